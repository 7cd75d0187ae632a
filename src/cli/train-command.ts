// `harness-lab train submit|status|logs|cancel|list`: training runs on the user's cluster (src/training/trainer-jobs.ts).
import { defineCommand, defineCommandGroup, UsageError, type CliCommand } from './args.js';

const USAGE = `usage: harness-lab train submit --trainer trl|verl --config FILE [--name RUN]
                              [--operator auto|kuberay|kubeflow|none]
                              [--context C] [--namespace N] [--dry-run -o json|yaml]
       harness-lab train status RUN [--watch] [--json] [--context C] [--namespace N]
       harness-lab train logs RUN [--no-follow] [--server] [--context C] [--namespace N]
       harness-lab train cancel RUN [--context C] [--namespace N]
       harness-lab train list [--json] [--context C] [--namespace N]

A training run is one object on the cluster, labelled harness-lab/run=RUN: veRL as a KubeRay RayJob
(ray.io/v1), TRL as a Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1), or a plain batch/v1
Job when the cluster has no such operator (--operator none, or the CRD is absent). The config (YAML or
JSON) names the image, command/args, GPUs, and where the rollouts come from: the rollout server's URL
(\`harness-lab serve\`) or an export file on a PVC or hostPath volume. With \`data.serve\` the run deploys
its own rollout server beside the trainer (harness-lab serve --backend k8s: Deployment, Service, admin
key Secret read by secretKeyRef, state PVC, ServiceAccount + Role + RoleBinding), followed by status
and removed by cancel with the trainer. See docs/training-runs.md.

  --operator      auto (default): the trainer's operator if the cluster serves its CRD, else a Job
  --dry-run       print the validated manifest (-o json|yaml) and send nothing
  status --watch  follow the run's phase (one list + watch) until it ends
  logs            stream the main pod's log (the Job's pod, the Ray head, the first node);
                  --server: the run's rollout server's log`;

const say = (line: string) => process.stdout.write(`${line}\n`);
const target = { context: { type: 'string' }, namespace: { type: 'string' }, kubeconfig: { type: 'string' } } as const;

async function cluster(flags: { context?: string | undefined; namespace?: string | undefined; kubeconfig?: string | undefined }) {
  const { loadCluster } = await import('../cluster/kube.js');
  return loadCluster({
    ...(flags.kubeconfig ? { kubeconfig: flags.kubeconfig } : {}),
    context: flags.context ?? null,
    namespace: flags.namespace ?? null,
  });
}

/** Cluster and config errors are the user's to fix: one line, exit 1. */
async function guarded(name: string, fn: () => Promise<number>): Promise<number> {
  const { ClusterError } = await import('../cluster/kube.js');
  const { TrainConfigError } = await import('../training/trainer-jobs.js');
  try {
    return await fn();
  } catch (err) {
    if (err instanceof ClusterError || err instanceof TrainConfigError) {
      process.stderr.write(`harness-lab ${name}: ${err.message}\n`);
      return 1;
    }
    throw err;
  }
}

const submit = defineCommand({
  name: 'train submit',
  summary: 'start a training run (RayJob, TrainJob or Job) from a trainer config',
  usage: USAGE,
  flags: {
    trainer: { type: 'string', required: true },
    config: { type: 'string', required: true },
    name: { type: 'string' },
    operator: { type: 'string', default: 'auto' },
    ...target,
    'dry-run': { type: 'boolean' },
    output: { type: 'string', short: 'o' },
  },
  run: async ({ flags }) => {
    const tj = await import('../training/trainer-jobs.js');
    if (!(tj.TRAINERS as readonly string[]).includes(flags.trainer))
      throw new UsageError(`--trainer must be one of ${tj.TRAINERS.join(', ')}, got '${flags.trainer}'`);
    if (!(tj.OPERATORS as readonly string[]).includes(flags.operator))
      throw new UsageError(`--operator must be one of ${tj.OPERATORS.join(', ')}, got '${flags.operator}'`);
    if (flags.output && !flags['dry-run']) throw new UsageError('-o is for --dry-run');
    if (flags['dry-run'] && flags.output !== undefined && !['json', 'yaml'].includes(flags.output))
      throw new UsageError(`-o must be json or yaml, got '${flags.output}'`);
    const trainer = flags.trainer as (typeof tj.TRAINERS)[number];
    const operator = flags.operator as (typeof tj.OPERATORS)[number];
    return guarded('train submit', async () => {
      const config = tj.loadTrainConfig(flags.config);
      if (flags.name !== undefined && !/^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/.test(flags.name))
        throw new UsageError(`--name must be an RFC 1035 label (lowercase, digits, -, a letter first, <= 63), got '${flags.name}'`);
      const log = (line: string) => process.stderr.write(`${line}\n`);
      // One way in: the editor's Start Training Run plans and starts a run with the same functions.
      const life = await import('../training/run-lifecycle.js');
      if (flags['dry-run']) {
        const objs = await life.planRun(
          { trainer, config, configFile: flags.config, operator, name: flags.name, namespace: flags.namespace ?? 'default' },
          log,
        );
        const { formatManifests } = await import('../cluster/manifests.js');
        // One object prints as itself (as before); a run with its server prints as a v1 List.
        process.stdout.write(
          flags.output === 'yaml'
            ? formatManifests(objs, 'yaml')
            : objs.length === 1
              ? `${JSON.stringify(objs[0], null, 2)}\n`
              : formatManifests(objs, 'json'),
        );
        return 0;
      }
      const c = await cluster(flags);
      const { record, why, server } = await life.startRun(
        c,
        { trainer, config, configFile: flags.config, operator, name: flags.name },
        log,
      );
      if (server) say(`deployed rollout server ${server.name} (${server.url}; splits ${server.splits.join(', ')})`);
      say(`created ${record.kind} ${record.namespace}/${record.name} in kube context "${record.context}" (${why})`);
      say(
        `follow it: harness-lab train status ${record.name} --watch; harness-lab train logs ${record.name}${server ? ' [--server]' : ''}`,
      );
      return 0;
    });
  },
});

const status = defineCommand({
  name: 'train status',
  summary: "a training run's phase, from one list + watch",
  usage: USAGE,
  flags: { watch: { type: 'boolean', short: 'w' }, json: { type: 'boolean' }, ...target },
  positionals: ['RUN'],
  run: async ({ flags, positionals }) =>
    guarded('train status', async () => {
      const tj = await import('../training/trainer-jobs.js');
      const c = await cluster(flags);
      const name = positionals[0]!;
      const { kind, trainer, record } = await tj.findRun(c, name);
      const w = new tj.RunWatch(c, kind, name);
      let final: { phase: string; detail: string } = { phase: 'Unknown', detail: '' };
      await new Promise<void>((resolve, reject) => {
        w.watch.onError((err) => {
          if (!flags.watch) reject(err);
        });
        w.start((p) => {
          final = p;
          if (flags.watch && !flags.json)
            say(`${new Date().toISOString()}  ${kind} ${name}: ${p.phase}${p.detail ? ` (${p.detail})` : ''}`);
          if (!flags.watch || p.deleted || tj.TERMINAL.has(p.phase)) resolve();
        }).catch(reject);
      }).finally(() => w.stop());
      const life = await import('../training/run-lifecycle.js');
      const server = record?.rollout_server ? await life.rolloutServerStatus(c, name) : undefined;
      if (flags.json)
        say(
          JSON.stringify({
            name,
            kind,
            trainer: trainer ?? null,
            namespace: c.namespace,
            context: c.context,
            phase: final.phase,
            detail: final.detail,
            ...(server ? { rollout_server: life.serverStatusJson(server) } : {}),
          }),
        );
      else {
        if (!flags.watch)
          say(`${kind} ${c.namespace}/${name} (${trainer ?? '?'}): ${final.phase}${final.detail ? ` (${final.detail})` : ''}`);
        if (server) say(life.serverStatusLine(server));
      }
      return final.phase === 'Failed' ? 1 : final.phase === 'Unknown' ? 1 : 0;
    }),
});

const logs = defineCommand({
  name: 'train logs',
  summary: "stream a training run's log from its pod",
  usage: USAGE,
  flags: { 'no-follow': { type: 'boolean' }, server: { type: 'boolean' }, ...target },
  positionals: ['RUN'],
  run: async ({ flags, positionals }) =>
    guarded('train logs', async () => {
      const tj = await import('../training/trainer-jobs.js');
      const c = await cluster(flags);
      const name = positionals[0]!;
      if (flags.server) {
        const rs = await import('../training/rollout-server.js');
        await rs.streamServerLog(c, name, process.stdout, !flags['no-follow']);
        return 0;
      }
      const { kind } = await tj.findRun(c, name);
      const abort = new AbortController();
      const onSig = () => abort.abort();
      process.once('SIGINT', onSig);
      try {
        await tj.streamRunLogs(c, kind, name, process.stdout, { follow: !flags['no-follow'], signal: abort.signal });
      } finally {
        process.off('SIGINT', onSig);
      }
      return 0;
    }),
});

const cancel = defineCommand({
  name: 'train cancel',
  summary: 'delete what a training run created (propagationPolicy Background)',
  usage: USAGE,
  flags: { ...target },
  positionals: ['RUN'],
  run: async ({ flags, positionals }) =>
    guarded('train cancel', async () => {
      const tj = await import('../training/trainer-jobs.js');
      const c = await cluster(flags);
      const name = positionals[0]!;
      const { kind } = await tj.findRun(c, name);
      const life = await import('../training/run-lifecycle.js');
      const r = await life.stopRun(c, kind, name, (line) => process.stderr.write(`${line}\n`));
      say(
        r.trainer === 'deleted'
          ? `deleted ${kind} ${c.namespace}/${name} (its pods follow, propagationPolicy Background)`
          : `${kind} ${c.namespace}/${name} was already gone`,
      );
      if (r.server) say(`removed ${r.server.length ? r.server.join(', ') : 'nothing (already gone)'}`);
      return 0;
    }),
});

const list = defineCommand({
  name: 'train list',
  summary: 'the training runs in a namespace',
  usage: USAGE,
  flags: { json: { type: 'boolean' }, ...target },
  run: async ({ flags }) =>
    guarded('train list', async () => {
      const tj = await import('../training/trainer-jobs.js');
      const runs = await tj.listRuns(await cluster(flags));
      if (flags.json) say(JSON.stringify(runs, null, 2));
      else for (const r of runs) say(`${r.name}  ${r.trainer}  ${r.kind}  ${r.phase}  ${r.created ?? ''}`);
      return 0;
    }),
});

export const trainCommand: CliCommand = defineCommandGroup({
  name: 'train',
  summary: 'training runs on Kubernetes (TRL, veRL): submit, status, logs, cancel, list',
  usage: USAGE,
  subcommands: { submit, status, logs, cancel, list },
});
