// `harness-lab validate`: one rollout of a harness against a task, checked against the capture contract.
import { resolve } from 'node:path';
import { harnessNames } from '../harness/registry.js';
import { formatValidationTable, validateHarness } from '../sandbox/validate.js';
import { defineCommand, UsageError } from './args.js';

const USAGE = `usage: harness-lab validate --harness NAME [--task DIR] [--engine-url URL] [--model NAME]
                            [--sandbox docker|local] [--timeout SECONDS] [--out DIR] [--json]

Runs one rollout of the harness (default task: the shipped examples/tasks/hello-file with its
scripted policy) and checks the capture contract: every model call captured (the harness's own log
against the proxy), dialect, token ids and logprobs aligned, graph well formed, ATIF cross-check,
reward read, session key absent from the verifier. Exits non-zero on any failure.

  --harness NAME   ${harnessNames().join(', ')}`;

export const validateCommand = defineCommand({
  name: 'validate',
  summary: 'check a harness wiring against the capture contract (one sandboxed rollout)',
  usage: USAGE,
  flags: {
    harness: { type: 'string', required: true },
    task: { type: 'string' },
    'engine-url': { type: 'string' },
    model: { type: 'string' },
    sandbox: { type: 'string', default: 'docker' },
    timeout: { type: 'integer' },
    out: { type: 'string', default: 'harness-lab-rollouts' },
    json: { type: 'boolean' },
    verbose: { type: 'boolean', short: 'v' },
  },
  run: async ({ flags }) => {
    const sandbox = flags.sandbox;
    if (sandbox !== 'docker' && sandbox !== 'local') throw new UsageError(`--sandbox must be docker or local, got '${sandbox}'`);
    const table = await validateHarness({
      harness: flags.harness,
      taskDir: flags.task,
      sandbox,
      engineUrl: flags['engine-url'],
      model: flags.model,
      outDir: resolve(flags.out),
      timeoutSec: flags.timeout || undefined,
      log: flags.verbose ? (l) => process.stderr.write(`  ${l}\n`) : undefined,
    });
    if (flags.json)
      process.stdout.write(
        `${JSON.stringify({ harness: table.harness, task: table.task, sandbox: table.sandbox, ok: table.ok, rows: table.rows, out_dir: table.rollout.out_dir }, null, 2)}\n`,
      );
    else process.stdout.write(`${formatValidationTable(table)}\n`);
    return table.ok ? 0 : 1;
  },
});
