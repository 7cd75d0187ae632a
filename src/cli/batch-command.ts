// `harness-lab batch submit|status|watch|collect|cancel|resume`: flags in, src/batch/ does the work.
import { parseFlags, intFlag, UsageError, withUsage } from './args.js';
import type { CliCommand } from './main.js';
import { harnessNames } from '../harness/registry.js';

const USAGE = `usage: harness-lab batch submit --tasks DIR|GLOB --harness NAME[,NAME...] --group-size G
                              [--backend docker|k8s] [--parallel N] [--timeout S]
                              [--on-timeout discard|keep] [--engine-url URL] [--model M]
                              [--temperature T] [--policy-version V] [--out DIR]
                              [--context CTX] [--namespace NS] [--registry REG] [--queue NAME]
                              [--dry-run -o json|yaml]
       harness-lab batch status BATCH [--json] [--rollouts]
       harness-lab batch watch BATCH [--rollouts]
       harness-lab batch collect BATCH [--out FILE.jsonl]
       harness-lab batch cancel BATCH
       harness-lab batch resume BATCH

A batch is, for every task and every harness, a group of G rollouts of that task under that harness,
all captured through one proxy with the same sampling (temperature T; top_p 1, top_k -1, min_p 0,
pinned on every call). BATCH is the batch directory (--out; default ./harness-lab-batches/<id>):
its manifest and every rollout's state live there, so a batch survives its lab being killed:
\`batch resume\` finishes it without re-running finished rollouts.

  --tasks DIR|GLOB   a task folder, a folder of tasks, or a pattern (quote it); repeatable
  --harness NAMES    ${harnessNames().join(', ')}
  --parallel N       rollouts at once over the whole batch (default: from the cores and the
                     tasks' [environment] cpus and memory_mb)
  --timeout S        the agent's wall clock per rollout (default: the tasks' agent.timeout_sec)
  --on-timeout       discard (default: reward null, not trainable) or keep (the harness is
                     stopped, the verifier runs, tokens and its reward are kept)
  --engine-url URL   the inference engine; without it the embedded engine answers with each
                     task's policy.json
  --policy-version V stamped on every rollout (trainers drop samples of stale weights)

Every rollout ends in one class: completed, policy_failure (reward 0, trainable), infra_error
(discarded, reward null) or timeout. \`batch status\` flags groups with no contrast (all rewards
equal) or fewer than 2 trainable members; \`batch collect\` writes the trainable traces of the
groups a trainer can use.`;

const say = (line: string) => process.stdout.write(`${line}\n`);

function oneBatchDir(positionals: string[], sub: string): string {
  if (positionals.length !== 1) throw new UsageError(`batch ${sub} takes one BATCH directory, got ${positionals.length ? positionals.join(' ') : 'none'}\n\n${USAGE}`);
  return positionals[0]!;
}

function numberFlag(value: string | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isFinite(n)) throw new UsageError(`--${name} must be a number, got '${value}'`);
  return n;
}

async function submit(argv: string[]): Promise<number> {
  const { values, positionals } = parseFlags(
    argv,
    {
      tasks: { type: 'string', multiple: true },
      harness: { type: 'string', multiple: true },
      'group-size': { type: 'string' },
      backend: { type: 'string' },
      parallel: { type: 'string' },
      timeout: { type: 'string' },
      'on-timeout': { type: 'string' },
      'engine-url': { type: 'string' },
      model: { type: 'string' },
      temperature: { type: 'string' },
      'policy-version': { type: 'string' },
      out: { type: 'string' },
      context: { type: 'string' },
      namespace: { type: 'string' },
      registry: { type: 'string' },
      queue: { type: 'string' },
      'dry-run': { type: 'boolean' },
      output: { type: 'string', short: 'o' },
      verbose: { type: 'boolean', short: 'v' },
    },
    USAGE,
  );
  if (values.help) return say(USAGE), 0;
  // A shell-expanded GLOB arrives as one --tasks value followed by the other matches.
  const tasks = [...(values.tasks ?? []), ...positionals];
  if (!tasks.length) throw new UsageError(`--tasks is required\n\n${USAGE}`);
  const harnesses = (values.harness ?? []).flatMap((h) => h.split(',')).map((h) => h.trim()).filter(Boolean);
  if (!harnesses.length) throw new UsageError(`--harness is required\n\n${USAGE}`);
  if (values['group-size'] === undefined) throw new UsageError(`--group-size is required (at least 2)\n\n${USAGE}`);
  const backend = values.backend ?? 'docker';
  if (backend !== 'docker' && backend !== 'k8s') throw new UsageError(`--backend must be docker or k8s, got '${backend}'`);
  const onTimeout = values['on-timeout'] ?? 'discard';
  if (onTimeout !== 'discard' && onTimeout !== 'keep') throw new UsageError(`--on-timeout must be discard or keep, got '${onTimeout}'`);
  const format = values.output;
  if (format !== undefined && format !== 'json' && format !== 'yaml') throw new UsageError(`-o must be json or yaml, got '${format}'`);
  if (values['dry-run'] && backend !== 'k8s') throw new UsageError('--dry-run prints the Kubernetes objects a batch would create; it needs --backend k8s');

  const { planBatch, writeBatch, BatchPlanError } = await import('../batch/plan.js');
  let plan;
  try {
    plan = planBatch({
      tasks,
      harnesses,
      groupSize: numberFlag(values['group-size'], 'group-size')!,
      backend,
      parallel: values.parallel === undefined ? undefined : intFlag(values.parallel, 'parallel', 1),
      timeoutSec: numberFlag(values.timeout, 'timeout'),
      onTimeout,
      engineUrl: values['engine-url'],
      model: values.model,
      temperature: numberFlag(values.temperature, 'temperature'),
      policyVersion: values['policy-version'],
      outDir: values.out,
      k8s: backend === 'k8s' ? { context: values.context, namespace: values.namespace, registry: values.registry, queueName: values.queue } : undefined,
    });
  } catch (err) {
    if (err instanceof BatchPlanError) throw new UsageError(err.message);
    throw err;
  }
  // The backend loads before anything is written: a build without it fails here, naming it.
  const mod = await (await import('../batch/backends/index.js')).backendModule(backend);
  if (values['dry-run']) {
    if (!mod.dryRun) throw new Error('the k8s backend in this build has no dry run');
    process.stdout.write(await mod.dryRun(plan, format ?? 'yaml'));
    return 0;
  }
  writeBatch(plan);
  const m = plan.manifest;
  say(`batch ${m.batch_id}: ${m.tasks.length} task(s) x ${m.harnesses.length} harness(es) x ${m.group_size} = ${plan.states.length} rollouts in ${m.groups.length} groups, ${m.parallel} at a time, on ${m.backend}`);
  say(`batch directory: ${plan.dir}`);
  return runAndReport(plan.dir, values.verbose === true);
}

async function runAndReport(dir: string, verbose: boolean): Promise<number> {
  const { runBatch } = await import('../batch/runner.js');
  const { batchStatus, formatStatus } = await import('../batch/status.js');
  const summary = await runBatch({ dir, handleSignals: true, log: (l) => (verbose || !l.startsWith('  ') ? say(l) : undefined) });
  process.stdout.write(`\n${formatStatus(batchStatus(dir))}`);
  if (summary.stopped === 'interrupted') return 130;
  if (summary.stopped === 'cancelled') return say(`cancelled; \`harness-lab batch resume ${dir}\` continues it`), 1;
  return 0;
}

async function status(argv: string[]): Promise<number> {
  const { values, positionals } = parseFlags(argv, { json: { type: 'boolean' }, rollouts: { type: 'boolean' } }, USAGE);
  if (values.help) return say(USAGE), 0;
  const { batchStatus, formatStatus } = await import('../batch/status.js');
  const st = batchStatus(oneBatchDir(positionals, 'status'));
  process.stdout.write(values.json ? `${JSON.stringify(st, null, 2)}\n` : formatStatus(st, { rollouts: values.rollouts }));
  return 0;
}

async function watch(argv: string[]): Promise<number> {
  const { values, positionals } = parseFlags(argv, { rollouts: { type: 'boolean' } }, USAGE);
  if (values.help) return say(USAGE), 0;
  const { watchBatch } = await import('../batch/control.js');
  const st = await watchBatch(oneBatchDir(positionals, 'watch'), (t) => process.stdout.write(t), { rollouts: values.rollouts });
  return st.lab === 'finished' ? 0 : 1;
}

async function collect(argv: string[]): Promise<number> {
  const { values, positionals } = parseFlags(argv, { out: { type: 'string', short: 'o' } }, USAGE);
  if (values.help) return say(USAGE), 0;
  const { collectBatch } = await import('../batch/collect.js');
  const s = collectBatch(oneBatchDir(positionals, 'collect'), values.out);
  say(`wrote ${s.lines} trace(s) from ${s.rollouts} trainable rollout(s) in ${s.groupsKept.length} group(s) to ${s.file}`);
  for (const [g, why] of Object.entries(s.groupsDropped)) say(`  left out ${g}: ${why}`);
  return 0;
}

async function cancel(argv: string[]): Promise<number> {
  const { values, positionals } = parseFlags(argv, {}, USAGE);
  if (values.help) return say(USAGE), 0;
  const { cancelBatch } = await import('../batch/control.js');
  const dir = oneBatchDir(positionals, 'cancel');
  const s = await cancelBatch(dir, { log: say });
  if (s.finished) return say(`batch ${dir} has finished; nothing to cancel`), 0;
  say(`cancelled${s.stoppedLab ? ` (lab pid ${s.stoppedLab} stopped)` : ''}; removed ${s.removed.length} sandbox(es)${s.requeued.length ? `; ${s.requeued.length} rollout(s) queued again` : ''}. \`harness-lab batch resume ${dir}\` continues the batch.`);
  return 0;
}

async function resume(argv: string[]): Promise<number> {
  const { values, positionals } = parseFlags(argv, { verbose: { type: 'boolean', short: 'v' } }, USAGE);
  if (values.help) return say(USAGE), 0;
  return runAndReport(oneBatchDir(positionals, 'resume'), values.verbose === true);
}

const SUBCOMMANDS: Record<string, (argv: string[]) => Promise<number>> = { submit, status, watch, collect, cancel, resume };

export const batchCommand: CliCommand = {
  summary: 'GRPO groups of real harness rollouts: submit, status, watch, collect, cancel, resume',
  run: ([sub, ...rest]) =>
    withUsage(async () => {
      if (sub === undefined || sub === '-h' || sub === '--help') return say(USAGE), sub ? 0 : 2;
      const run = SUBCOMMANDS[sub];
      if (!run) throw new UsageError(`unknown batch subcommand '${sub}'; one of ${Object.keys(SUBCOMMANDS).join(', ')}\n\n${USAGE}`);
      return run(rest);
    }),
};
