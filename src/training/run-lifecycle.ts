// A training run as one thing, whoever starts it (`train submit|status|cancel` in src/cli, Start
// Training Run and the Training Runs view in src/extension): with `data: {source: rollout-server,
// serve: ...}` the run's rollout server is planned (task images built and pushed first, as `batch
// submit --backend k8s` does), deployed and waited for before the trainer is created, recorded with
// the run, reported with it (health and what it has done, from its /metrics) and removed with it.
import type * as k8s from '@kubernetes/client-node';
import { clusterImage, defaultLabImage, readyLabImage, taskImageTags } from '../cluster/images.js';
import type { Cluster } from '../cluster/kube.js';
import { validateManifests } from '../cluster/manifests.js';
import {
  deployRolloutServer,
  loadSplits,
  newAdminKey,
  removeRolloutServer,
  rolloutServerHealth,
  rolloutServerManifests,
  rolloutServerProgress,
  rolloutServerUrl,
  serveName,
  waitForRolloutServer,
  type ServerHealth,
  type ServerProgress,
} from './rollout-server.js';
import {
  cancelRun,
  defaultRunName,
  kindFor,
  operatorOf,
  readRunRecord,
  runManifest,
  submitRun,
  validateRunManifest,
  type Operator,
  type RunKind,
  type RunObject,
  type RunRecord,
  type ServeSpec,
  type TrainConfig,
  type Trainer,
} from './trainer-jobs.js';

type Obj = k8s.KubernetesObject & Record<string, unknown>;
export type Log = (line: string) => void;

/** How long a started run waits for its rollout server's pod to be ready before the trainer is created. */
export const SERVER_READY_TIMEOUT_MS = 300_000;

export interface PlannedServer {
  objects: Obj[];
  record: NonNullable<RunRecord['rollout_server']>;
}

/**
 * The server's objects for run `name`. `build`: build the task images with Docker and push them (and
 * a lab image that exists only here) to the spec's registry; otherwise (a dry run) the tags a build
 * would give, and the admin key shown as a placeholder.
 */
export async function planRolloutServer(
  spec: ServeSpec,
  configFile: string,
  name: string,
  namespace: string,
  opts: { build: boolean; log: Log },
): Promise<PlannedServer> {
  const splits = loadSplits(spec, configFile);
  const tasks = splits.flatMap((s) => s.tasks);
  let taskImages = await taskImageTags(tasks, opts.build, opts.log);
  // The lab's image: the spec's, else HARNESS_LAB_K8S_PROXY_IMAGE, else built from this CLI (and pushed).
  const imageEnv = spec.image ? { ...process.env, HARNESS_LAB_K8S_PROXY_IMAGE: spec.image } : process.env;
  const registry = spec.registry ?? null;
  const image = opts.build ? await readyLabImage(registry, opts.log, imageEnv) : defaultLabImage(registry, imageEnv);
  if (registry) {
    if (opts.build) {
      const { connectDocker } = await import('../sandbox/docker-client.js');
      const { pushImages } = await import('../cluster/registry-push.js');
      const pushed = await pushImages(await connectDocker(), [...taskImages.values()], registry, { log: opts.log });
      taskImages = new Map([...taskImages].map(([t, local]) => [t, pushed.get(local) ?? local]));
    } else taskImages = new Map([...taskImages].map(([t, local]) => [t, clusterImage(local, registry)]));
  }
  const objects = rolloutServerManifests({
    run: name,
    namespace,
    spec,
    splits,
    image,
    taskImages,
    adminKey: opts.build ? newAdminKey() : '<generated at submit>',
  });
  return { objects, record: { name: serveName(name), url: rolloutServerUrl(name, namespace), splits: splits.map((s) => s.name) } };
}

const serveSpecOf = (config: TrainConfig): ServeSpec | undefined =>
  config.data.source === 'rollout-server' ? config.data.serve : undefined;

export interface RunPlanInput {
  trainer: Trainer;
  config: TrainConfig;
  configFile: string;
  operator: Operator;
  name?: string | undefined;
  namespace: string;
}

/**
 * Everything a run would create, validated, in creation order (its rollout server's objects, then
 * the trainer's), without contacting a cluster: `auto` means the trainer's operator.
 */
export async function planRun(input: RunPlanInput, log: Log): Promise<k8s.KubernetesObject[]> {
  const kind = kindFor(input.trainer, input.operator === 'auto' ? operatorOf(input.trainer) : input.operator);
  const name = input.name ?? input.config.name ?? defaultRunName(input.trainer);
  const trainer = runManifest({ trainer: input.trainer, kind, config: input.config, name, namespace: input.namespace });
  await validateRunManifest(trainer);
  const spec = serveSpecOf(input.config);
  const server = spec ? (await planRolloutServer(spec, input.configFile, name, input.namespace, { build: false, log })).objects : [];
  await validateManifests(server);
  return [...server, trainer];
}

export interface StartRunOptions {
  trainer: Trainer;
  config: TrainConfig;
  configFile: string;
  operator: Operator;
  name?: string | undefined;
  recordsDir?: string;
  serverReadyTimeoutMs?: number;
}

export interface StartedRun {
  record: RunRecord;
  object: RunObject;
  /** Why the trainer is the kind it is (its operator's CRD, or a plain Job). */
  why: string;
  /** The rollout server deployed for it, when its config asks for one. */
  server: PlannedServer['record'] | undefined;
}

/**
 * Starts a run: its rollout server first when the config asks for one (deployed, then waited for:
 * the trainer's first request must find it), then the trainer, both in the run's record. A server
 * that does not start, or a trainer the cluster refuses, takes the server deployed for it away again.
 */
export async function startRun(cluster: Cluster, opts: StartRunOptions, log: Log): Promise<StartedRun> {
  const name = opts.name ?? opts.config.name ?? defaultRunName(opts.trainer);
  const spec = serveSpecOf(opts.config);
  let server: PlannedServer | undefined;
  if (spec) {
    server = await planRolloutServer(spec, opts.configFile, name, cluster.namespace, { build: true, log });
    await deployRolloutServer(cluster, server.objects, log);
  }
  try {
    if (server) {
      log(`waiting for rollout server ${server.record.name} to be ready`);
      const h = await waitForRolloutServer(cluster, name, opts.serverReadyTimeoutMs ?? SERVER_READY_TIMEOUT_MS);
      log(`rollout server ${server.record.name} is ready (${h.detail})`);
    }
    const submitted = await submitRun(cluster, {
      trainer: opts.trainer,
      config: opts.config,
      configFile: opts.configFile,
      operator: opts.operator,
      name,
      ...(opts.recordsDir ? { recordsDir: opts.recordsDir } : {}),
      ...(server ? { rolloutServer: server.record } : {}),
    });
    return { ...submitted, server: server?.record };
  } catch (err) {
    if (server)
      await removeRolloutServer(cluster, name, log).catch((e: unknown) => log(`removing the rollout server: ${(e as Error).message}`));
    throw err;
  }
}

export interface ServerStatus {
  name: string;
  health: ServerHealth;
  /** What it has done (its /metrics), once it is ready. */
  progress: ServerProgress | undefined;
  /** Why its /metrics could not be read, when they could not. */
  error: string | undefined;
}

/** The run's rollout server now: its health and, once ready, what it has done. */
export async function rolloutServerStatus(cluster: Cluster, run: string): Promise<ServerStatus> {
  const health = await rolloutServerHealth(cluster, run);
  let error: string | undefined;
  const progress =
    health.state === 'Ready' && health.pod
      ? await rolloutServerProgress(cluster, run, health.pod).catch((err: unknown) => {
          error = (err as Error).message;
          return undefined;
        })
      : undefined;
  return { name: serveName(run), health, progress, error };
}

/** "12 rollout(s) done (completed 10, infra_error 2)": by class, in words. */
export const byClass = (counts: Record<string, number>): string =>
  Object.entries(counts)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');

/** One line on the run's rollout server (what `train status` prints). */
export function serverStatusLine(s: ServerStatus): string {
  const parts = [`rollout server ${s.name}: ${s.health.state} (${s.health.detail})`];
  const p = s.progress;
  if (p) {
    const classes = byClass(p.rollouts);
    const causes = byClass(p.causes);
    parts.push(
      `${p.done} rollout(s) done${classes ? ` (${classes})` : ''}, ${p.running} running`,
      `infra-failed ${(p.infraFailedRate * 100).toFixed(1)}%${causes ? ` (${causes})` : ''}`,
      p.rewardMean === null ? 'no reward yet' : `reward mean ${p.rewardMean.toFixed(3)} over ${p.scored}`,
      `breaker ${p.breaker}`,
    );
  } else if (s.error) parts.push(`its /metrics could not be read: ${s.error}`);
  return parts.join('; ');
}

/** `train status --json`'s rollout_server field. */
export function serverStatusJson(s: ServerStatus): Record<string, unknown> {
  return { ...s.health, ...(s.progress ? { progress: s.progress } : {}), ...(s.error ? { error: s.error } : {}) };
}

/** Whether run `name` has a rollout server: its record says so, or (a run found without its record) its Deployment does. */
export async function hasRolloutServer(cluster: Cluster, name: string, record?: RunRecord): Promise<boolean> {
  if (record?.rollout_server) return true;
  return (await rolloutServerHealth(cluster, name)).state !== 'Gone';
}

export interface StoppedRun {
  trainer: 'deleted' | 'gone';
  /** What of the rollout server was removed (undefined: the run had none). */
  server: string[] | undefined;
}

/**
 * Cancels a run: the trainer's object (its pods follow, propagationPolicy Background), then its
 * rollout server, which is given its grace period to stop its rollouts and remove their Jobs first.
 */
export async function stopRun(cluster: Cluster, kind: RunKind, name: string, log: Log, recordsDir?: string): Promise<StoppedRun> {
  let record: RunRecord | undefined;
  try {
    record = readRunRecord(name, recordsDir);
  } catch (err) {
    log(`${(err as Error).message}; looking for its rollout server by label`);
  }
  const trainer = await cancelRun(cluster, kind, name, recordsDir);
  if (!(await hasRolloutServer(cluster, name, record))) return { trainer, server: undefined };
  log(`stopping rollout server ${serveName(name)} (it removes its rollouts' Jobs and capture proxy first)`);
  return { trainer, server: await removeRolloutServer(cluster, name, log) };
}
