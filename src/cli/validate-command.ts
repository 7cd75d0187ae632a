// `harness-lab validate`: one rollout of a harness against a task, checked against the capture contract.
import { resolve } from 'node:path';
import { harnessNames } from '../harness/registry.js';
import { formatValidationTable, validateHarness } from '../sandbox/validate.js';
import { intFlag, parseFlags, UsageError, withUsage } from './args.js';
import type { CliCommand } from './main.js';

const USAGE = `usage: harness-lab validate --harness NAME [--task DIR] [--engine-url URL] [--model NAME]
                            [--sandbox docker|local] [--timeout SECONDS] [--out DIR] [--json]

Runs one rollout of the harness (default task: the shipped examples/tasks/hello-file with its
scripted policy) and checks the capture contract: every model call captured (the harness's own log
against the proxy), dialect, token ids and logprobs aligned, graph well formed, ATIF cross-check,
reward read, session key absent from the verifier. Exits non-zero on any failure.

  --harness NAME   ${harnessNames().join(', ')}`;

export const validateCommand: CliCommand = {
  summary: 'check a harness wiring against the capture contract (one sandboxed rollout)',
  run: (argv) =>
    withUsage(async () => {
      const { values } = parseFlags(
        argv,
        {
          harness: { type: 'string' },
          task: { type: 'string' },
          'engine-url': { type: 'string' },
          model: { type: 'string' },
          sandbox: { type: 'string' },
          timeout: { type: 'string' },
          out: { type: 'string' },
          json: { type: 'boolean' },
          verbose: { type: 'boolean', short: 'v' },
        },
        USAGE,
      );
      if (values.help) {
        process.stdout.write(`${USAGE}\n`);
        return 0;
      }
      if (!values.harness) throw new UsageError(`--harness is required\n\n${USAGE}`);
      const sandbox = values.sandbox ?? 'docker';
      if (sandbox !== 'docker' && sandbox !== 'local') throw new UsageError(`--sandbox must be docker or local, got '${sandbox}'`);
      const table = await validateHarness({
        harness: values.harness,
        taskDir: values.task,
        sandbox,
        engineUrl: values['engine-url'],
        model: values.model,
        outDir: resolve(values.out ?? 'harness-lab-runs'),
        timeoutSec: values.timeout === undefined ? undefined : intFlag(values.timeout, 'timeout', 0) || undefined,
        log: values.verbose ? (l) => process.stderr.write(`  ${l}\n`) : undefined,
      });
      if (values.json) process.stdout.write(`${JSON.stringify({ harness: table.harness, task: table.task, sandbox: table.sandbox, ok: table.ok, rows: table.rows, out_dir: table.rollout.out_dir }, null, 2)}\n`);
      else process.stdout.write(`${formatValidationTable(table)}\n`);
      return table.ok ? 0 : 1;
    }),
};
