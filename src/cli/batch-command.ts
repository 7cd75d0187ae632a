// `harness-lab batch submit|status|watch|collect|cancel|resume`: flags in, src/batch/ does the work.
import { join, resolve } from 'node:path';
import { defineCommand, defineCommandGroup, UsageError, type CliCommand } from './args.js';
import { allowTemplateVariables } from '../tasks/task.js';
import { harnessNames } from '../harness/registry.js';

const USAGE = `usage: harness-lab batch submit --tasks DIR|GLOB --harness NAME[,NAME...] --group-size G
                              [--backend docker|k8s] [--parallel N] [--timeout S]
                              [--on-timeout discard|keep] [--engine-url URL] [--model M]
                              [--temperature T] [--policy-version V] [--out DIR]
                              [--engine-api-key K] [--allow-env NAME]...
                              [--max-starting N] [--start-timeout S] [--breaker-after K]
                              [--context CTX] [--namespace NS] [--registry REG] [--queue NAME]
                              [--dry-run -o json|yaml] [--keep]
       harness-lab batch status BATCH [--json] [--rollouts]
       harness-lab batch watch BATCH [--rollouts]
       harness-lab batch collect BATCH [--out FILE.jsonl]
       harness-lab batch cancel BATCH
       harness-lab batch resume BATCH [--keep]
       harness-lab batch teardown BATCH
       harness-lab batch delete BATCH [--force]

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
  --engine-api-key K credential for --engine-url (or HARNESS_LAB_ENGINE_API_KEY); held by the
                     proxy only, never written to the batch: give it again to batch resume
  --policy-version V stamped on every rollout (trainers drop samples of stale weights)
  --allow-env NAME   a host variable task templates (\${NAME} in [environment].env, [verifier].env)
                     may copy into the sandbox (repeatable; or HARNESS_LAB_ALLOW_ENV=A,B); others
                     are refused, the lab's HARNESS_LAB_* keys always
  --max-starting N   sandboxes starting at once, apart from --parallel (default 4; 0: no cap)
  --start-timeout S  wall budget of one sandbox start-up; past it the rollout is an infra
                     failure, not an agent timeout (default 300)
  --breaker-after K  after K infra failures in a row no sandbox starts until the backend answers
                     its probe again; the rollouts of that streak run again (default 10; 0: off)
  --keep             keep what a finished batch leaves on its backend (a k8s batch's proxy
                     Deployment, Service, Secret, ConfigMaps and Jobs); by default the lab removes
                     it when the batch ends; \`batch teardown\` removes it later

Every rollout ends in one class: completed, policy_failure (reward 0, trainable), infra_error
(discarded, reward null) or timeout. \`batch status\` flags groups with no contrast (all rewards
equal) or fewer than 2 trainable members; \`batch collect\` writes the trainable traces of the
groups a trainer can use.`;

const say = (line: string) => process.stdout.write(`${line}\n`);

function numberFlag(value: string | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n)) throw new UsageError(`--${name} must be a number, got '${value}'`);
  return n;
}

const submit = defineCommand({
  name: 'batch submit',
  summary: 'plan a batch, write its directory and run it to the end',
  usage: USAGE,
  flags: {
    tasks: { type: 'string', multiple: true },
    harness: { type: 'string', multiple: true },
    'group-size': { type: 'integer', required: true },
    backend: { type: 'string', default: 'docker' },
    parallel: { type: 'integer' },
    timeout: { type: 'string' },
    'on-timeout': { type: 'string', default: 'discard' },
    'engine-url': { type: 'string' },
    'engine-api-key': { type: 'string' },
    model: { type: 'string' },
    temperature: { type: 'string' },
    'policy-version': { type: 'string' },
    out: { type: 'string' },
    context: { type: 'string' },
    namespace: { type: 'string' },
    registry: { type: 'string' },
    queue: { type: 'string' },
    'max-starting': { type: 'integer' },
    'start-timeout': { type: 'string' },
    'breaker-after': { type: 'integer' },
    'dry-run': { type: 'boolean' },
    output: { type: 'string', short: 'o' },
    verbose: { type: 'boolean', short: 'v' },
    keep: { type: 'boolean' },
    'allow-env': { type: 'string', multiple: true },
  },
  // A shell-expanded GLOB arrives as one --tasks value followed by the other matches.
  positionals: ['TASK_DIR...'],
  run: async ({ flags, positionals }) => {
    allowTemplateVariables(flags['allow-env']);
    const tasks = [...flags.tasks, ...positionals];
    if (!tasks.length) throw new UsageError('--tasks is required', { showUsage: true });
    const harnesses = flags.harness
      .flatMap((h) => h.split(','))
      .map((h) => h.trim())
      .filter(Boolean);
    if (!harnesses.length) throw new UsageError('--harness is required', { showUsage: true });
    const backend = flags.backend;
    if (backend !== 'docker' && backend !== 'k8s') throw new UsageError(`--backend must be docker or k8s, got '${backend}'`);
    const onTimeout = flags['on-timeout'];
    if (onTimeout !== 'discard' && onTimeout !== 'keep') throw new UsageError(`--on-timeout must be discard or keep, got '${onTimeout}'`);
    const format = flags.output;
    if (format !== undefined && format !== 'json' && format !== 'yaml') throw new UsageError(`-o must be json or yaml, got '${format}'`);
    if (flags['dry-run'] && backend !== 'k8s')
      throw new UsageError('--dry-run prints the Kubernetes objects a batch would create; it needs --backend k8s');

    const { planBatch, writeBatch, BatchPlanError } = await import('../batch/plan.js');
    let plan;
    try {
      plan = planBatch({
        tasks,
        harnesses,
        groupSize: flags['group-size'],
        backend,
        parallel: flags.parallel,
        timeoutSec: numberFlag(flags.timeout, 'timeout'),
        onTimeout,
        engineUrl: flags['engine-url'],
        model: flags.model,
        temperature: numberFlag(flags.temperature, 'temperature'),
        policyVersion: flags['policy-version'],
        outDir: flags.out,
        k8s:
          backend === 'k8s'
            ? { context: flags.context, namespace: flags.namespace, registry: flags.registry, queueName: flags.queue }
            : undefined,
        maxStarting: flags['max-starting'],
        startTimeoutSec: numberFlag(flags['start-timeout'], 'start-timeout'),
        breakerAfter: flags['breaker-after'],
      });
    } catch (err) {
      if (err instanceof BatchPlanError) throw new UsageError(err.message);
      throw err;
    }
    // The backend loads before anything is written: a build without it fails here, naming it.
    const mod = await (await import('../batch/backends/index.js')).backendModule(backend);
    if (flags['dry-run']) {
      if (!mod.dryRun) throw new Error('the k8s backend in this build has no dry run');
      process.stdout.write(await mod.dryRun(plan, format ?? 'yaml'));
      return 0;
    }
    writeBatch(plan);
    const m = plan.manifest;
    say(
      `batch ${m.batch_id}: ${m.tasks.length} task(s) x ${m.harnesses.length} harness(es) x ${m.group_size} ` +
        `= ${plan.states.length} rollouts in ${m.groups.length} groups, ${m.parallel} at a time, on ${m.backend}`,
    );
    say(`batch directory: ${plan.dir}`);
    return runAndReport(plan.dir, flags.verbose, engineKey(flags['engine-api-key']), flags.keep);
  },
});

/** The engine credential: the flag, else HARNESS_LAB_ENGINE_API_KEY; never stored in the batch. */
const engineKey = (flag: string | undefined) => flag ?? (process.env.HARNESS_LAB_ENGINE_API_KEY || undefined);

async function runAndReport(dir: string, verbose: boolean, engineApiKey: string | undefined, keep: boolean): Promise<number> {
  const { runBatch } = await import('../batch/runner.js');
  const { batchStatus, formatStatus } = await import('../batch/status.js');
  const summary = await runBatch({
    dir,
    handleSignals: true,
    engineApiKey,
    log: (l) => (verbose || !l.startsWith('  ') ? say(l) : undefined),
  });
  const { tearDownAfterRun, teardownBatch } = await import('../batch/teardown.js');
  if (tearDownAfterRun(summary, keep)) {
    // The results are in the directory already: a backend that cannot be reached now is reported, not fatal.
    await teardownBatch(dir, { log: say }).then(
      (t) =>
        say(
          `tore down what batch ${t.batchId} left on ${t.backend}${t.removed.length ? ` (${t.removed.length} Job(s) or container(s))` : ''}; --keep keeps it`,
        ),
      (err: unknown) =>
        say(`could not tear down batch ${dir}: ${(err as Error).message}; \`harness-lab batch teardown ${dir}\` tries again`),
    );
  } else if (keep && summary.stopped === null && summary.queued === 0)
    say(`kept what the batch left on its backend (--keep); \`harness-lab batch teardown ${dir}\` removes it`);
  process.stdout.write(`\n${formatStatus(batchStatus(dir, { samples: true }))}`);
  if (summary.stopped === 'interrupted') return 130;
  if (summary.stopped === 'cancelled') {
    say(`cancelled; \`harness-lab batch resume ${dir}\` continues it`);
    return 1;
  }
  return 0;
}

const status = defineCommand({
  name: 'batch status',
  summary: "print a batch's groups and rollouts",
  usage: `usage: harness-lab batch status BATCH [--json] [--rollouts] [--stall-after S]

  --stall-after S  flag running rollouts with no model call and no sandbox output for S seconds
                   (default 300; 0: never)`,
  flags: { json: { type: 'boolean' }, rollouts: { type: 'boolean' }, 'stall-after': { type: 'integer' } },
  positionals: ['BATCH'],
  run: async ({ flags, positionals }) => {
    const { batchStatus, formatStatus } = await import('../batch/status.js');
    const st = batchStatus(positionals[0]!, { stallAfterS: flags['stall-after'], samples: true });
    process.stdout.write(flags.json ? `${JSON.stringify(st, null, 2)}\n` : formatStatus(st, { rollouts: flags.rollouts }));
    return 0;
  },
});

const watch = defineCommand({
  name: 'batch watch',
  summary: 'follow a running batch until it ends',
  usage: 'usage: harness-lab batch watch BATCH [--rollouts] [--stall-after S]',
  flags: { rollouts: { type: 'boolean' }, 'stall-after': { type: 'integer' } },
  positionals: ['BATCH'],
  run: async ({ flags, positionals }) => {
    const { watchBatch } = await import('../batch/control.js');
    const st = await watchBatch(positionals[0]!, (t) => process.stdout.write(t), {
      rollouts: flags.rollouts,
      stallAfterS: flags['stall-after'],
    });
    return st.lab === 'finished' ? 0 : 1;
  },
});

const collect = defineCommand({
  name: 'batch collect',
  summary: 'write the training traces of the usable groups',
  usage: 'usage: harness-lab batch collect BATCH [--out FILE.jsonl]',
  flags: { out: { type: 'string', short: 'o' } },
  positionals: ['BATCH'],
  run: async ({ flags, positionals }) => {
    // The export's one writer in its `collected` format: streamed, contract-checked, with FILE.manifest.json.
    const { runExport } = await import('../export/export.js');
    const { ExportContractError } = await import('../export/contract.js');
    const { ExportInputError } = await import('../export/source.js');
    const { BatchFileError } = await import('../batch/state.js');
    const dir = resolve(positionals[0]!);
    const file = resolve(flags.out ?? join(dir, 'collected.jsonl'));
    let m;
    try {
      m = await runExport({ format: 'collected', source: { kind: 'batch', dir }, out: file });
    } catch (err) {
      if (!(err instanceof ExportContractError || err instanceof ExportInputError || err instanceof BatchFileError)) throw err;
      process.stderr.write(`harness-lab batch collect: ${err.message}\n`);
      return 1;
    }
    say(
      `wrote ${m.counts.rows} trace(s) from ${m.counts.rollouts_kept} trainable rollout(s) in ${m.counts.groups_kept} group(s) to ${file}`,
    );
    for (const g of m.dropped_groups) say(`  left out ${g.group_id}: ${g.detail}`);
    return 0;
  },
});

const cancel = defineCommand({
  name: 'batch cancel',
  summary: 'stop a batch (its running lab, or what a dead one left)',
  usage: 'usage: harness-lab batch cancel BATCH',
  flags: {},
  positionals: ['BATCH'],
  run: async ({ positionals }) => {
    const { cancelBatch } = await import('../batch/control.js');
    const dir = positionals[0]!;
    const s = await cancelBatch(dir, { log: say });
    if (s.finished) {
      say(
        `batch ${dir} has finished; nothing to cancel${s.removed.length ? `; removed ${s.removed.length} leftover sandbox(es) or Job(s)` : ''}`,
      );
      return 0;
    }
    say(
      `cancelled${s.stoppedLab ? ` (lab pid ${s.stoppedLab} stopped)` : ''}; removed ${s.removed.length} sandbox(es)${s.requeued.length ? `; ${s.requeued.length} rollout(s) queued again` : ''}. ` +
        `\`harness-lab batch resume ${dir}\` continues the batch.`,
    );
    return 0;
  },
});

const resume = defineCommand({
  name: 'batch resume',
  summary: 'finish a batch whose lab was stopped or killed',
  usage: 'usage: harness-lab batch resume BATCH [-v] [--engine-api-key K] [--keep]',
  flags: { verbose: { type: 'boolean', short: 'v' }, 'engine-api-key': { type: 'string' }, keep: { type: 'boolean' } },
  positionals: ['BATCH'],
  run: async ({ flags, positionals }) => runAndReport(positionals[0]!, flags.verbose, engineKey(flags['engine-api-key']), flags.keep),
});

const teardown = defineCommand({
  name: 'batch teardown',
  summary: "remove what a batch left on its backend (a k8s batch's proxy, Secret, ConfigMaps, Jobs)",
  usage:
    'usage: harness-lab batch teardown BATCH\n\nRemoves the Jobs (or containers), proxy Deployment, Service, ' +
    'Secret, NetworkPolicy and ConfigMaps of\na batch no lab is running. Its results stay in BATCH; an unfinished ' +
    'batch can still be resumed.',
  flags: {},
  positionals: ['BATCH'],
  run: async ({ positionals }) => {
    const { teardownBatch } = await import('../batch/teardown.js');
    const t = await teardownBatch(positionals[0]!, { log: say });
    say(
      `tore down batch ${t.batchId} on ${t.backend}: ${t.removed.length} Job(s) or container(s) removed${t.backend === 'k8s' ? ', with its proxy, Secret, Service, NetworkPolicy and ConfigMaps' : ''}`,
    );
    return 0;
  },
});

const del = defineCommand({
  name: 'batch delete',
  summary: 'tear a batch down and remove its directory',
  usage:
    'usage: harness-lab batch delete BATCH [--force]\n\n--force removes the directory even when its backend cannot be reached (what it left there stays).',
  flags: { force: { type: 'boolean' } },
  positionals: ['BATCH'],
  run: async ({ flags, positionals }) => {
    const { deleteBatch } = await import('../batch/teardown.js');
    const dir = positionals[0]!;
    const t = await deleteBatch(dir, { log: say, force: flags.force });
    say(`deleted batch ${t?.batchId ?? dir}${t ? ` (${t.removed.length} Job(s) or container(s) removed)` : ''}`);
    return 0;
  },
});

/** `batch` dispatches to its subcommands, each a defined command of its own (`harness-lab batch submit: ...` errors). */
export const batchCommand: CliCommand = defineCommandGroup({
  name: 'batch',
  summary: 'rollout batches (GRPO groups): submit, status, resume, cancel, teardown, ...',
  usage: USAGE,
  subcommands: { submit, status, watch, collect, cancel, resume, teardown, delete: del },
});
