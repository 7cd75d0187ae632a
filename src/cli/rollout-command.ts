// `harness-lab rollout` (formerly `run`, still accepted): rollouts of a real harness in sandboxes against a
// Harbor task, captured.
import { resolve } from 'node:path';
import { allowTemplateVariables } from '../tasks/task.js';
import { defineCommand, UsageError } from './args.js';
import { openLab, type Lab } from '../sandbox/lab.js';
import { rolloutLine, runRollout } from '../sandbox/rollout-runner.js';
import { harnessNames } from '../harness/registry.js';

const USAGE = `usage: harness-lab rollout --task DIR --harness NAME [--engine-url URL] [--model NAME]
                           [--engine-api-key K] [--sandbox docker|local] [-n N] [--timeout SECONDS] [--out DIR]
                           [--allow-env NAME]...

Runs N rollouts of a real, unmodified harness, each in its own sandbox, against a Harbor task. Every
model call goes through the capture proxy; the verifier's reward is read after the agent finishes.
Without --engine-url the task's scripted policy (policy.json next to the task) answers.

  --harness NAME     ${harnessNames().join(', ')}
  --engine-api-key K credential for --engine-url (or HARNESS_LAB_ENGINE_API_KEY); never enters a
                     sandbox, a record or a log
  --sandbox KIND     docker (default: no network, or its own egress network if the task allows
                     it; the capture only through a per-rollout session socket) or local (no
                     isolation: for trusted tasks and policies; the reference harness, no Docker)
  --timeout SECONDS  wall clock for the agent (default: the task's agent.timeout_sec, else 600);
                     on expiry the sandbox is stopped and the rollout is errored with reward null
  --out DIR          rollouts go to DIR/<task>/<harness>/<n>/ (default ./harness-lab-rollouts)
  --allow-env NAME   a host variable task templates (\${NAME} in [environment].env, [verifier].env)
                     may copy into the sandbox (repeatable; or HARNESS_LAB_ALLOW_ENV=A,B); others
                     are refused, the lab's HARNESS_LAB_* keys always`;

export const rolloutCommand = defineCommand({
  name: 'rollout',
  summary: 'run a harness in a sandbox against a Harbor task, capturing every model call',
  usage: USAGE,
  flags: {
    task: { type: 'string', required: true },
    harness: { type: 'string', required: true },
    'engine-url': { type: 'string' },
    'engine-api-key': { type: 'string' },
    model: { type: 'string' },
    sandbox: { type: 'string', default: 'docker' },
    n: { type: 'integer', short: 'n', default: 1 },
    timeout: { type: 'integer' },
    out: { type: 'string', default: 'harness-lab-rollouts' },
    verbose: { type: 'boolean', short: 'v' },
    'allow-env': { type: 'string', multiple: true },
  },
  run: async ({ flags }) => {
    allowTemplateVariables(flags['allow-env']);
    const sandbox = flags.sandbox;
    if (sandbox !== 'docker' && sandbox !== 'local') throw new UsageError(`--sandbox must be docker or local, got '${sandbox}'`);
    const n = flags.n;
    const timeoutSec = flags.timeout || undefined;
    const say = (line: string) => process.stdout.write(`${line}\n`);
    if (sandbox === 'local') {
      process.stderr.write(
        "harness-lab: --sandbox local does not isolate: the harness runs as you on the host's network and can " +
          "reach the engine and every loopback service (the proxy's admin routes need this command's admin key); " +
          'rollouts say isolation: none\n',
      );
    }
    const lab: Lab = await openLab({
      taskDir: flags.task,
      harness: flags.harness,
      sandbox,
      engineUrl: flags['engine-url'],
      engineApiKey: flags['engine-api-key'] ?? (process.env.HARNESS_LAB_ENGINE_API_KEY || undefined),
      adminKey: process.env.HARNESS_LAB_ADMIN_KEY || undefined,
      model: flags.model,
      outDir: resolve(flags.out),
      log: flags.verbose ? (l) => process.stderr.write(`  ${l}\n`) : undefined,
    });
    let failures = 0;
    try {
      if (flags.verbose) process.stderr.write(`engine: ${lab.engineDescription}\nproxy: ${lab.proxy.url}\n`);
      for (let i = 0; i < Math.max(1, n); i++) {
        const r = await runRollout({ ...lab.rolloutOptions, timeoutSec });
        say(rolloutLine(r));
        if (r.status !== 'ok') failures++;
      }
    } finally {
      await lab.close();
    }
    return failures ? 1 : 0;
  },
});
