// The Kubernetes backend: one batch/v1 Job per rollout attempt, the batch's capture proxy in the
// cluster (Deployment + Service, admin key from a Secret, rollout egress limited by a
// NetworkPolicy) reached from the lab through a client-library port-forward, one watch per batch
// for Jobs and one for their pods, facts read from what the watch and the pod's log say (never exec
// from the laptop), cancel and cleanup by label with propagationPolicy Background.
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type * as k8s from '@kubernetes/client-node';
import { PatchStrategy } from '@kubernetes/client-node';
import type Docker from 'dockerode';
import { z } from 'zod';
import {
  ClusterError,
  apiStatus,
  assertPermissions,
  checkReachable,
  clusterError,
  createOrKeep,
  loadCluster,
  type Cluster,
  type ClusterTarget,
  type Permission,
} from '../../cluster/kube.js';
import {
  INFRA_EXIT_CODE,
  LABELS,
  formatManifests,
  PHASE_MARKER,
  POD_PATHS,
  SESSION_KEY_PLACEHOLDER,
  attemptSecret,
  attemptSecretName,
  proxyClaimName,
  PROXY_PORT,
  inClusterProxyUrl,
  jobDeadlineSec,
  labelValue,
  parsePodResult,
  podWorkdir,
  proxyManifests,
  proxyName,
  rolloutJob,
  rolloutSelector,
  testsConfigMap,
  validateManifests,
  withTestItems,
  type HarnessSource,
  type ProxyInput,
} from '../../cluster/manifests.js';
import { forwardPort, type PortForwardHandle } from '../../cluster/port-forward.js';
import { BatchWatch } from '../../cluster/watch.js';
import { harnessEntry, launchPlan } from '../../harness/registry.js';
import { parseRewardJson, parseRewardTxt, type Reward } from '../../sandbox/reward.js';
import { loadTask, resolveEnvTemplate, type HarborTask } from '../../tasks/task.js';
import type { AttemptFacts, BackendModule, BatchBackend, BatchCapture, RolloutAttempt } from '../backend.js';
import { SessionMirror } from './k8s-mirror.js';
import { batchPaths, type BatchManifest } from '../state.js';
import { DockerRuntime, dockerfileBases, taskImageTag } from '../../sandbox/docker.js';
import { BASE_IMAGE } from '../../sandbox/images.js';
import { connectDocker } from '../../sandbox/docker-client.js';
import { pushImages } from '../../cluster/registry-push.js';
import { harnessCacheRoot } from '../../harness/run-local.js';
import { ensureReactScript } from '../../sandbox/react-script.js';

export interface K8sBackendOptions {
  manifest: BatchManifest;
  batchDir: string;
  /** A kubeconfig file; default $KUBECONFIG / ~/.kube/config. Context and namespace come from the manifest's k8s target. */
  kubeconfig?: string;
  /** The image each task's pods run (the local task image tag; prefixed with the manifest's registry). */
  taskImage: (task: HarborTask) => string;
  harnessFrom?: HarnessSource;
  /** The in-cluster proxy's image and how to start harness-lab in it. */
  proxy: Pick<ProxyInput, 'image' | 'command' | 'volumes' | 'cpu' | 'memory'>;
  startupSlackSec?: number;
  ttlSecondsAfterFinished?: number;
  /** Extra time past the Job's deadline before the lab's own watchdog deletes the Job (default 30 s). */
  watchdogGraceSec?: number;
  /** How long a rollout pod may stay Unschedulable before the attempt is an infra error (default 60 s). */
  unschedulableGraceSec?: number;
  /** How long to wait for the proxy pod to become ready (default 180 s). */
  proxyReadyTimeoutSec?: number;
  adminKey?: string;
  engineApiKey?: string;
  /** How often running rollouts' new calls are mirrored into `<batch>/capture` (default 1000 ms; 0: only when an attempt ends). */
  followIntervalMs?: number;
  log?: (line: string) => void;
}

/** The permissions a cluster batch needs in its namespace, asked before anything is created. */
export const K8S_PERMISSIONS: Permission[] = [
  { verb: 'create', group: 'batch', resource: 'jobs' },
  { verb: 'list', group: 'batch', resource: 'jobs' },
  { verb: 'watch', group: 'batch', resource: 'jobs' },
  { verb: 'deletecollection', group: 'batch', resource: 'jobs' },
  { verb: 'list', group: '', resource: 'pods' },
  { verb: 'watch', group: '', resource: 'pods' },
  { verb: 'get', group: '', resource: 'pods', subresource: 'log' },
  // client-node port-forwards over a WebSocket: a GET, which the API server authorizes as `get`.
  { verb: 'get', group: '', resource: 'pods', subresource: 'portforward' },
  { verb: 'list', group: '', resource: 'events' },
  { verb: 'watch', group: '', resource: 'events' },
  { verb: 'create', group: '', resource: 'configmaps' },
  { verb: 'create', group: '', resource: 'secrets' },
  { verb: 'patch', group: '', resource: 'secrets' },
  { verb: 'delete', group: '', resource: 'secrets' },
  { verb: 'deletecollection', group: '', resource: 'secrets' },
  { verb: 'create', group: '', resource: 'persistentvolumeclaims' },
  { verb: 'delete', group: '', resource: 'persistentvolumeclaims' },
  { verb: 'create', group: '', resource: 'services' },
  { verb: 'create', group: 'apps', resource: 'deployments' },
  { verb: 'create', group: 'networking.k8s.io', resource: 'networkpolicies' },
];

/** `REG/harness-lab/task-x:hash` for a real cluster; the local tag for the test double (no registry). */
export function clusterImage(localTag: string, registry: string | null): string {
  return registry ? `${registry.replace(/\/+$/, '')}/${localTag}` : localTag;
}

function target(manifest: BatchManifest, kubeconfig?: string): ClusterTarget & { namespace: string } {
  if (!manifest.k8s) throw new ClusterError(`batch ${manifest.batch_id} has no k8s target (backend ${manifest.backend})`);
  return { ...(kubeconfig ? { kubeconfig } : {}), context: manifest.k8s.context, namespace: manifest.k8s.namespace };
}

function engineAndModel(manifest: BatchManifest): { engineUrl: string; model: string } {
  if (!manifest.engine_url)
    throw new ClusterError(
      'a cluster batch needs --engine-url: an inference engine the in-cluster proxy can reach (the embedded engine runs only on this machine)',
    );
  if (!manifest.model) throw new ClusterError('a cluster batch needs --model: the model name the in-cluster proxy serves');
  return { engineUrl: manifest.engine_url, model: manifest.model };
}

interface Prepared {
  tasks: Map<string, HarborTask>;
  configMaps: Map<string, k8s.KubernetesObject & Record<string, unknown>>;
}

function prepareTasks(manifest: BatchManifest, namespace: string): Prepared {
  const tasks = new Map<string, HarborTask>();
  const configMaps = new Map<string, k8s.KubernetesObject & Record<string, unknown>>();
  for (const ref of manifest.tasks) {
    const task = loadTask(ref.dir);
    tasks.set(ref.name, task);
    configMaps.set(ref.name, testsConfigMap(namespace, manifest.batch_id, task));
  }
  return { tasks, configMaps };
}

function buildJob(
  opts: Pick<K8sBackendOptions, 'taskImage' | 'harnessFrom' | 'startupSlackSec' | 'ttlSecondsAfterFinished'>,
  manifest: BatchManifest,
  namespace: string,
  prepared: Prepared,
  r: { rolloutId: string; groupId: string; task: string; harness: string; attempt: number; sessionId: string },
) {
  const task = prepared.tasks.get(r.task);
  if (!task) throw new ClusterError(`rollout ${r.rolloutId}: task ${r.task} is not in batch ${manifest.batch_id}`);
  const entry = harnessEntry(r.harness);
  const { model } = engineAndModel(manifest);
  const harnessFrom = opts.harnessFrom ?? { kind: 'image' };
  if (entry.install.kind === 'bundled-script' && harnessFrom.kind === 'hostPath' && !harnessFrom.reactScript)
    throw new ClusterError(`harness ${entry.name} needs its bundled script mounted (harnessFrom.reactScript)`);
  const plan = launchPlan(entry, {
    harnessesDir: POD_PATHS.harnesses,
    binDir: POD_PATHS.binDir,
    home: POD_PATHS.home,
    workdir: podWorkdir(task),
    logsDir: POD_PATHS.logs,
    proxyUrl: inClusterProxyUrl(namespace, manifest.batch_id),
    // The key itself travels in the attempt's Secret; the pod puts it in place of this.
    sessionKey: SESSION_KEY_PLACEHOLDER,
    model: model.split('/').pop()!,
    instruction: task.instruction.trim(),
  });
  const taskFile = `${task.name}/task.toml`;
  const job = rolloutJob({
    namespace,
    batchId: manifest.batch_id,
    groupId: r.groupId,
    rolloutId: r.rolloutId,
    attempt: r.attempt,
    sessionId: r.sessionId,
    task,
    harness: entry.name,
    image: clusterImage(opts.taskImage(task), manifest.k8s?.registry ?? null),
    launch: { ...plan, nativeLog: entry.nativeLog },
    timeoutSec: manifest.timeout_sec,
    agentTimeoutInPod: manifest.on_timeout === 'keep',
    ...(opts.startupSlackSec !== undefined ? { startupSlackSec: opts.startupSlackSec } : {}),
    ...(opts.ttlSecondsAfterFinished !== undefined ? { ttlSecondsAfterFinished: opts.ttlSecondsAfterFinished } : {}),
    queueName: manifest.k8s?.queue_name ?? null,
    harnessFrom,
    taskEnv: resolveEnvTemplate(task.environment.env, process.env, taskFile, 'environment.env'),
    verifierEnv: resolveEnvTemplate(task.verifierEnv, process.env, taskFile, 'verifier.env'),
  });
  withTestItems(job, prepared.configMaps.get(r.task)!);
  return { job, task, entry };
}

function proxyInput(opts: Pick<K8sBackendOptions, 'proxy' | 'manifest' | 'engineApiKey'>, namespace: string, adminKey: string): ProxyInput {
  return {
    ...opts.proxy,
    ...engineAndModel(opts.manifest),
    namespace,
    batchId: opts.manifest.batch_id,
    adminKey,
    ...(opts.engineApiKey ? { engineApiKey: opts.engineApiKey } : {}),
  };
}

/**
 * Every manifest `batch submit --backend k8s` would apply, validated, without contacting a cluster:
 * the proxy's Secret (admin key shown as a placeholder), Deployment, Service and NetworkPolicy, each
 * task's tests ConfigMap, and attempt 0 of every rollout's Job.
 */
export async function k8sDryRunManifests(
  opts: Omit<K8sBackendOptions, 'batchDir'> & { sessionIdFor?: (rolloutId: string) => string },
): Promise<k8s.KubernetesObject[]> {
  const { manifest } = opts;
  const namespace = target(manifest).namespace;
  const prepared = prepareTasks(manifest, namespace);
  const objs: k8s.KubernetesObject[] = [
    ...proxyManifests(proxyInput(opts, namespace, '<generated at submit>')),
    ...prepared.configMaps.values(),
  ];
  for (const g of manifest.groups)
    for (const id of g.rollout_ids)
      objs.push(
        buildJob(opts, manifest, namespace, prepared, {
          rolloutId: id,
          groupId: g.group_id,
          task: g.task,
          harness: g.harness,
          attempt: 0,
          sessionId: opts.sessionIdFor?.(id) ?? `${manifest.batch_id}-${id}-0`,
        }).job,
      );
  await validateManifests(objs);
  return objs;
}

type Outcome =
  | { kind: 'job'; job: k8s.V1Job; condition: k8s.V1JobCondition }
  | { kind: 'refused'; reason: string; message: string }
  | { kind: 'proxy'; detail: string }
  | { kind: 'oom'; pod: k8s.V1Pod; container: string }
  | { kind: 'evicted'; pod: k8s.V1Pod; reason: string }
  | { kind: 'stuck'; pod: k8s.V1Pod; reason: string; message: string }
  | { kind: 'deleted' }
  | { kind: 'watchdog'; afterSec: number }
  | { kind: 'cancelled' };

const STUCK_REASONS = new Set([
  'ErrImagePull',
  'ImagePullBackOff',
  'InvalidImageName',
  'CreateContainerConfigError',
  'CreateContainerError',
  'ErrImageNeverPull',
]);

function podOutcome(pod: k8s.V1Pod): Outcome | undefined {
  const conds = pod.status?.conditions ?? [];
  const unscheduled = conds.find((c) => c.type === 'PodScheduled' && c.status === 'False' && c.reason === 'Unschedulable');
  if (unscheduled) return { kind: 'stuck', pod, reason: 'Unschedulable', message: unscheduled.message ?? '' };
  const disruption = conds.find((c) => c.type === 'DisruptionTarget' && c.status === 'True');
  for (const cs of pod.status?.containerStatuses ?? []) {
    if (cs.state?.terminated?.reason === 'OOMKilled') return { kind: 'oom', pod, container: cs.name };
    const waiting = cs.state?.waiting;
    if (waiting?.reason && STUCK_REASONS.has(waiting.reason))
      return { kind: 'stuck', pod, reason: waiting.reason, message: waiting.message ?? '' };
  }
  if (disruption && (pod.status?.phase === 'Failed' || (pod.status?.containerStatuses ?? []).some((cs) => cs.state?.terminated)))
    return { kind: 'evicted', pod, reason: disruption.reason ?? 'DisruptionTarget' };
  return undefined;
}

function finishedCondition(job: k8s.V1Job): k8s.V1JobCondition | undefined {
  return (job.status?.conditions ?? []).find((c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True');
}

function rewardOf(json: string, txt: string): Reward | null {
  try {
    if (json) return parseRewardJson(Buffer.from(json, 'base64').toString('utf8'));
    if (txt) return parseRewardTxt(Buffer.from(txt, 'base64').toString('utf8'));
  } catch {
    return null;
  }
  return null;
}

/** Splits a pod log at the entry script's phase markers into the agent's and the verifier's output. */
function splitLog(log: string): { agent: string; verifier: string } {
  const a = log.indexOf(`${PHASE_MARKER}agent\n`);
  const v = log.indexOf(`${PHASE_MARKER}verifier\n`);
  const agent = a < 0 ? '' : log.slice(a + PHASE_MARKER.length + 6, v < 0 ? undefined : v);
  const verifier =
    v < 0
      ? ''
      : log
          .slice(v + PHASE_MARKER.length + 9)
          .split('\n')
          .filter((l) => !l.startsWith('HARNESS_LAB_RESULT '))
          .join('\n');
  return { agent, verifier };
}

export class K8sBackend implements BatchBackend {
  readonly kind = 'k8s' as const;
  private closed = false;

  private constructor(
    readonly cluster: Cluster,
    private readonly opts: K8sBackendOptions,
    private readonly prepared: Prepared,
    readonly watch: BatchWatch,
    readonly capture: K8sCapture,
    private forward: PortForwardHandle,
  ) {}

  /**
   * Everything checked before anything is created (kubeconfig and context, reachability, permissions,
   * tasks, manifests), then the proxy applied and port-forwarded and the batch's watches started.
   */
  static async open(opts: K8sBackendOptions): Promise<K8sBackend> {
    const log = opts.log ?? (() => {});
    const cluster = loadCluster(target(opts.manifest, opts.kubeconfig));
    const version = await checkReachable(cluster);
    log(`kube context ${cluster.context} (${cluster.server}, ${version}), namespace ${cluster.namespace}`);
    await assertPermissions(cluster, K8S_PERMISSIONS);
    const prepared = prepareTasks(opts.manifest, cluster.namespace);
    const adminKey = opts.adminKey ?? randomBytes(24).toString('hex');
    const proxyObjs = proxyManifests(proxyInput(opts, cluster.namespace, adminKey));
    // Every rollout's Job is built and validated too, so an unknown harness or a task env naming an
    // unset variable fails here, before anything is created.
    const jobs = opts.manifest.groups.flatMap((g) =>
      g.rollout_ids.map(
        (id) =>
          buildJob(opts, opts.manifest, cluster.namespace, prepared, {
            rolloutId: id,
            groupId: g.group_id,
            task: g.task,
            harness: g.harness,
            attempt: 0,
            sessionId: `${opts.manifest.batch_id}-${id}-check`,
          }).job,
      ),
    );
    await validateManifests([...proxyObjs, ...prepared.configMaps.values(), ...jobs]);
    for (const o of [...proxyObjs, ...prepared.configMaps.values()]) {
      const r = await createOrKeep(cluster, o);
      log(`${o.kind} ${cluster.namespace}/${o.metadata?.name} ${r}`);
    }
    // A resumed batch keeps its proxy (and its sessions): read the admin key back from the Secret.
    const secret = await cluster.core
      .readNamespacedSecret({ namespace: cluster.namespace, name: proxyName(opts.manifest.batch_id) })
      .catch((e: unknown) => {
        throw clusterError(cluster, `reading Secret ${cluster.namespace}/${proxyName(opts.manifest.batch_id)}`, e);
      });
    const key = Buffer.from(secret.data?.['admin-key'] ?? '', 'base64').toString('utf8') || adminKey;
    const watch = new BatchWatch(cluster, `${LABELS.batch}=${labelValue(opts.manifest.batch_id)}`);
    try {
      await watch.start();
    } catch (err) {
      throw clusterError(cluster, `watching Jobs and pods of batch ${opts.manifest.batch_id}`, err);
    }
    let forward: PortForwardHandle;
    try {
      const pod = await waitForProxyPod(cluster, watch, opts.manifest.batch_id, (opts.proxyReadyTimeoutSec ?? 180) * 1000);
      forward = await forwardPort(cluster, pod, PROXY_PORT, log);
      await waitForHealth(forward.url, 30_000);
      log(`capture proxy ${cluster.namespace}/${pod} forwarded to ${forward.url}`);
    } catch (err) {
      watch.stop();
      throw err;
    }
    const capture = new K8sCapture(forward.url, key, opts.batchDir, engineAndModel(opts.manifest).engineUrl, log);
    const backend = new K8sBackend(cluster, opts, prepared, watch, capture, forward);
    capture.reconnect = () => backend.reforward();
    capture.startFollowing(opts.followIntervalMs ?? 1000);
    return backend;
  }

  private reforwarding: Promise<string> | undefined;

  /**
   * A new port-forward to the proxy's ready pod (the old one dropped, or the pod was replaced);
   * concurrent callers share one. The batch's sessions live in the proxy, so nothing is lost.
   */
  reforward(): Promise<string> {
    this.reforwarding ??= (async () => {
      if (this.closed) throw new ClusterError(`batch ${this.opts.manifest.batch_id} is closed: its port-forward is not made again`);
      const log = this.opts.log ?? (() => {});
      await this.forward.close().catch(() => {});
      const pod = await waitForProxyPod(
        this.cluster,
        this.watch,
        this.opts.manifest.batch_id,
        (this.opts.proxyReadyTimeoutSec ?? 180) * 1000,
      );
      this.forward = await forwardPort(this.cluster, pod, PROXY_PORT, log);
      await waitForHealth(this.forward.url, 30_000);
      log(`capture proxy ${this.cluster.namespace}/${pod} forwarded again to ${this.forward.url}`);
      return this.forward.url;
    })().finally(() => (this.reforwarding = undefined));
    return this.reforwarding;
  }

  /** The current port-forward (made again after a drop). */
  get portForward(): PortForwardHandle {
    return this.forward;
  }

  get proxyUrl(): string {
    return this.forward.url;
  }

  async run(attempt: RolloutAttempt): Promise<AttemptFacts> {
    const t0 = Date.now();
    const { rollout } = attempt;
    const ns = this.cluster.namespace;
    const facts: AttemptFacts = {
      backendRef: null,
      agent: { exitCode: null, timedOut: false, ms: 0 },
      verifier: null,
      reward: null,
      infraError: null,
      cancelled: false,
    };
    let built: ReturnType<typeof buildJob>;
    try {
      built = buildJob(this.opts, attempt.manifest, ns, this.prepared, {
        rolloutId: rollout.rollout_id,
        groupId: rollout.group_id,
        task: rollout.task,
        harness: rollout.harness,
        attempt: attempt.attempt,
        sessionId: attempt.sessionId,
      });
      await validateManifests([built.job]);
    } catch (err) {
      facts.infraError = facts.setupFailure = (err as Error).message;
      return facts;
    }
    const name = built.job.metadata!.name!;
    facts.backendRef = name;
    mkdirSync(attempt.outDir, { recursive: true });
    writeFileSync(join(attempt.outDir, 'job.json'), `${JSON.stringify(built.job, null, 2)}\n`);
    // Listen before creating, so no event of this Job can be missed.
    const proxyAtStart = this.proxyGeneration();
    const outcome = this.outcomeOf(
      name,
      jobDeadlineSec({
        timeoutSec: attempt.manifest.timeout_sec,
        task: built.task,
        ...(this.opts.startupSlackSec !== undefined ? { startupSlackSec: this.opts.startupSlackSec } : {}),
      }),
      attempt.signal,
      proxyAtStart,
    );
    const secretName = attemptSecretName(name);
    try {
      // The key first (the pod needs it to start), then the Job, then the Secret owned by the Job.
      await createOrKeep(this.cluster, attemptSecret(built.job, this.capture.keyOf(attempt.sessionId)));
      const r = await createOrKeep(this.cluster, built.job);
      attempt.log(`Job ${ns}/${name} ${r}`);
      await this.ownSecret(name, secretName);
      // Not queued: admitted now, so the watchdog runs even if the watch never reports this Job.
      outcome.arm(built.job as k8s.V1Job);
    } catch (err) {
      outcome.cancel();
      await this.deleteSecret(secretName, attempt.log);
      facts.infraError = facts.setupFailure = (err as Error).message;
      return facts;
    }
    const o = await outcome.promise;
    // The key is needed no longer: gone now, not only when the Job's TTL removes it.
    await this.deleteSecret(secretName, attempt.log);
    // A proxy that restarted under the attempt may have lost or refused some of its calls: run it again.
    const restarted = o.kind === 'proxy' ? o.detail : o.kind === 'cancelled' ? undefined : this.proxyRestartedSince(proxyAtStart);
    if (restarted) {
      await this.cluster.batch.deleteNamespacedJob({ namespace: ns, name, propagationPolicy: 'Background' }).catch(() => {});
      return {
        ...facts,
        agent: { ...facts.agent, ms: Date.now() - t0 },
        infraError: `the capture proxy restarted while this attempt ran (${restarted}); the rollout runs again`,
        rerun: true,
      };
    }
    const elapsed = Date.now() - t0;
    const pod = this.watch
      .podsOfJob(name)
      .sort((a, b) => String(b.metadata?.creationTimestamp ?? '').localeCompare(String(a.metadata?.creationTimestamp ?? '')))[0];
    const podName = pod?.metadata?.name;
    const deleteJob = async () => {
      await this.cluster.batch.deleteNamespacedJob({ namespace: ns, name, propagationPolicy: 'Background' }).catch((err: unknown) => {
        if (apiStatus(err)?.code !== 404) attempt.log(clusterError(this.cluster, `deleting Job ${ns}/${name}`, err).message);
      });
    };
    switch (o.kind) {
      case 'cancelled':
        await deleteJob();
        return { ...facts, cancelled: true, agent: { ...facts.agent, ms: elapsed } };
      case 'watchdog':
        await deleteJob();
        return { ...facts, agent: { exitCode: null, timedOut: true, ms: elapsed } };
      case 'deleted':
        return {
          ...facts,
          agent: { ...facts.agent, ms: elapsed },
          infraError: `Job ${ns}/${name} was deleted from outside the lab before it finished`,
        };
      case 'proxy':
        return { ...facts, agent: { ...facts.agent, ms: elapsed }, infraError: `the capture proxy restarted (${o.detail})`, rerun: true };
      case 'oom': {
        const limit = o.pod.spec?.containers.find((c) => c.name === o.container)?.resources?.limits?.memory;
        await deleteJob();
        return {
          ...facts,
          agent: { ...facts.agent, ms: elapsed },
          infraError: `OOMKilled: container ${o.container} of pod ${ns}/${o.pod.metadata?.name} exceeded its memory limit${limit ? ` (${limit})` : ''}`,
        };
      }
      case 'evicted':
        await deleteJob();
        return {
          ...facts,
          agent: { ...facts.agent, ms: elapsed },
          infraError: `pod ${ns}/${o.pod.metadata?.name} was evicted (DisruptionTarget: ${o.reason}); Job ${name} deleted, the runner may retry`,
        };
      case 'stuck': {
        await deleteJob();
        const why = `pod ${ns}/${o.pod.metadata?.name} cannot start: ${o.reason}${o.message ? ` (${o.message})` : ''}`;
        return { ...facts, agent: { ...facts.agent, ms: elapsed }, infraError: why, setupFailure: why };
      }
      case 'refused': {
        await deleteJob();
        const why = `Job ${ns}/${name} could not create its pod: ${o.reason}: ${o.message}`;
        return { ...facts, agent: { ...facts.agent, ms: elapsed }, infraError: why, setupFailure: why };
      }
      case 'job': {
        const reason = o.condition.reason ?? '';
        if (o.condition.type === 'Failed' && reason === 'DeadlineExceeded')
          return { ...facts, agent: { exitCode: null, timedOut: true, ms: elapsed } };
        const log = podName ? await this.podLog(podName) : '';
        if (log) {
          writeFileSync(join(attempt.outDir, 'pod.log'), log);
          const parts = splitLog(log);
          mkdirSync(join(attempt.outDir, 'agent'), { recursive: true });
          mkdirSync(join(attempt.outDir, 'verifier'), { recursive: true });
          writeFileSync(join(attempt.outDir, 'agent', built.entry.nativeLog), parts.agent);
          writeFileSync(join(attempt.outDir, 'verifier', 'test-stdout.txt'), parts.verifier);
        }
        const result = parsePodResult(log);
        if (o.condition.type === 'Failed') {
          const code = pod?.status?.containerStatuses?.[0]?.state?.terminated?.exitCode;
          const why =
            reason === 'PodFailurePolicy' && code === INFRA_EXIT_CODE
              ? 'the entry script could not prepare the sandbox'
              : `the pod failed (${reason}${code !== undefined ? `, exit ${code}` : ''})`;
          return {
            ...facts,
            agent: { ...facts.agent, ms: elapsed },
            infraError: `Job ${ns}/${name} failed: ${why}: ${o.condition.message ?? ''}`.trim(),
          };
        }
        if (!result)
          return {
            ...facts,
            agent: { ...facts.agent, ms: elapsed },
            infraError: `pod ${ns}/${podName} of Job ${name} ended without its result line (see ${join(attempt.outDir, 'pod.log')})`,
          };
        const reward = rewardOf(result.reward_json, result.reward_txt);
        if (result.tests_requests_refused !== 0) {
          const why =
            result.tests_requests_refused < 0
              ? `the tests sidecar of pod ${ns}/${podName} never handed over tests/ (the verifier did not run)`
              : `something in the agent's turn asked the tests sidecar of pod ${ns}/${podName} for tests/ ${result.tests_requests_refused} time(s) and was refused; the rollout is not trusted`;
          return { ...facts, agent: { exitCode: result.agent_exit, timedOut: false, ms: result.agent_ms }, infraError: why };
        }
        return {
          ...facts,
          agent: {
            exitCode: result.agent_exit === 124 ? null : result.agent_exit,
            timedOut: result.agent_exit === 124,
            ms: result.agent_ms,
          },
          verifier: {
            exitCode: result.verifier_exit === 124 ? null : result.verifier_exit,
            timedOut: result.verifier_exit === 124,
            ms: result.verifier_ms,
          },
          reward: reward ? { value: reward.value, scores: reward.scores } : null,
          infraError: result.session_key_absent ? null : 'the session key is visible in the verifier environment',
        };
      }
    }
  }

  private async podLog(pod: string): Promise<string> {
    try {
      return await this.cluster.core.readNamespacedPodLog({ namespace: this.cluster.namespace, name: pod, container: 'rollout' });
    } catch {
      return '';
    }
  }

  /** Resolves with the first decisive thing the batch's watches say about one Job. */
  private outcomeOf(
    name: string,
    deadlineSec: number,
    signal: AbortSignal,
    proxyAtStart: string,
  ): { promise: Promise<Outcome>; cancel(): void; arm(job: k8s.V1Job): void } {
    const offs: (() => void)[] = [];
    let watchdog: NodeJS.Timeout | undefined;
    let settle!: (o: Outcome) => void;
    let settled = false;
    const promise = new Promise<Outcome>((resolve) => {
      settle = (o) => {
        if (settled) return;
        settled = true;
        offs.forEach((f) => f());
        clearTimeout(watchdog);
        signal.removeEventListener('abort', onAbort);
        resolve(o);
      };
    });
    const onAbort = () => settle({ kind: 'cancelled' });
    if (signal.aborted) queueMicrotask(onAbort);
    signal.addEventListener('abort', onAbort);
    const armWatchdog = (job: k8s.V1Job) => {
      // The lab's own timer starts at admission (a Kueue-suspended Job's deadline is reset while it waits).
      if (settled || watchdog || job.spec?.suspend) return;
      const afterSec = deadlineSec + (this.opts.watchdogGraceSec ?? 30);
      watchdog = setTimeout(() => settle({ kind: 'watchdog', afterSec }), afterSec * 1000);
    };
    const onJob = (type: string, job: k8s.V1Job) => {
      if (job.metadata?.name !== name) return;
      if (type === 'DELETED') return settle({ kind: 'deleted' });
      armWatchdog(job);
      const condition = finishedCondition(job);
      if (condition) settle({ kind: 'job', job, condition });
    };
    let unschedulable: NodeJS.Timeout | undefined;
    offs.push(() => clearTimeout(unschedulable));
    const onPod = (type: string, pod: k8s.V1Pod) => {
      if (pod.metadata?.labels?.[LABELS.role] === 'proxy') {
        const restarted = this.proxyRestartedSince(proxyAtStart);
        if (restarted) settle({ kind: 'proxy', detail: restarted });
        return;
      }
      const owner = pod.metadata?.labels?.['batch.kubernetes.io/job-name'] ?? pod.metadata?.labels?.['job-name'];
      if (owner !== name || type === 'DELETED') return;
      const o = podOutcome(pod);
      if (!o) return void (clearTimeout(unschedulable), (unschedulable = undefined));
      if (o.kind !== 'stuck' || o.reason !== 'Unschedulable') return settle(o);
      // A cluster autoscaler may still add a node: unschedulable for the grace period is an infra error.
      unschedulable ??= setTimeout(() => settle(o), (this.opts.unschedulableGraceSec ?? 60) * 1000);
    };
    // The Job controller could not make the pod (Pod Security admission, a quota): only an Event says so.
    const onEvent = (type: string, ev: k8s.CoreV1Event) => {
      if (type === 'DELETED' || ev.involvedObject?.name !== name || ev.reason !== 'FailedCreate') return;
      settle({ kind: 'refused', reason: ev.reason, message: ev.message ?? '' });
    };
    offs.push(this.watch.jobs.on(onJob), this.watch.pods.on(onPod), this.watch.jobEvents.on(onEvent));
    const existing = this.watch.jobs.objects.get(name);
    if (existing) onJob('MODIFIED', existing);
    for (const ev of this.watch.jobEvents.objects.values()) onEvent('ADDED', ev);
    return { promise, cancel: () => settle({ kind: 'cancelled' }), arm: armWatchdog };
  }

  /** Makes the Job the owner of its attempt's Secret, so the garbage collector removes both together. */
  private async ownSecret(job: string, secret: string): Promise<void> {
    const ns = this.cluster.namespace;
    const created = await this.cluster.batch.readNamespacedJob({ namespace: ns, name: job }).catch((err: unknown) => {
      throw clusterError(this.cluster, `reading Job ${ns}/${job}`, err);
    });
    const ownerReferences = [{ apiVersion: 'batch/v1', kind: 'Job', name: job, uid: created.metadata!.uid!, blockOwnerDeletion: false }];
    await this.cluster.objects
      .patch(
        { apiVersion: 'v1', kind: 'Secret', metadata: { name: secret, namespace: ns, ownerReferences } },
        undefined,
        undefined,
        undefined,
        undefined,
        PatchStrategy.MergePatch,
      )
      .catch((err: unknown) => {
        throw clusterError(this.cluster, `making Job ${ns}/${job} the owner of Secret ${ns}/${secret}`, err);
      });
  }

  private async deleteSecret(secret: string, log: (line: string) => void): Promise<void> {
    const ns = this.cluster.namespace;
    await this.cluster.core.deleteNamespacedSecret({ namespace: ns, name: secret }).catch((err: unknown) => {
      if (apiStatus(err)?.code !== 404) log(clusterError(this.cluster, `deleting Secret ${ns}/${secret}`, err).message);
    });
  }

  /** The proxy's pod and its container restarts, as the pods watch last saw them. */
  private proxyGeneration(): string {
    const pods = [...this.watch.pods.objects.values()].filter(
      (p) => p.metadata?.labels?.[LABELS.role] === 'proxy' && !p.metadata?.deletionTimestamp,
    );
    return pods
      .map((p) => `${p.metadata?.name}#${(p.status?.containerStatuses ?? []).reduce((n, c) => n + (c.restartCount ?? 0), 0)}`)
      .sort()
      .join(',');
  }

  /** Why the proxy is not the one an attempt started with (replaced pod, restarted container), or undefined. */
  private proxyRestartedSince(before: string): string | undefined {
    const now = this.proxyGeneration();
    if (now === before || !before) return undefined;
    return `proxy pod(s) ${before} then ${now || 'none'}`;
  }

  /** Deletes every Job (and, through Background propagation, its pods) of the batch; one deletecollection. */
  async cleanupBatch(batchId: string): Promise<string[]> {
    const ns = this.cluster.namespace;
    return deleteBatchJobs(this.cluster, ns, batchId);
  }

  /** Deletes one attempt's Job (its pod through Background propagation); gone already is fine. */
  async removeAttempt(jobName: string): Promise<void> {
    const ns = this.cluster.namespace;
    await this.cluster.batch
      .deleteNamespacedJob({ namespace: ns, name: jobName, propagationPolicy: 'Background' })
      .catch((err: unknown) => {
        if (apiStatus(err)?.code !== 404) throw clusterError(this.cluster, `deleting Job ${ns}/${jobName}`, err);
      });
  }

  /** Removes the batch's proxy, Secret, Service, NetworkPolicy and tests ConfigMaps (after its sessions were mirrored). */
  async teardown(): Promise<void> {
    await teardownBatch(this.cluster, this.opts.manifest.batch_id);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // Mirroring stops before the port-forward goes (the runner closes the capture too: a no-op then).
    await this.capture.close().catch(() => {});
    this.watch.stop();
    await this.forward.close();
  }
}

export async function deleteBatchJobs(cluster: Cluster, ns: string, batchId: string): Promise<string[]> {
  const selector = rolloutSelector(batchId);
  let names: string[];
  try {
    names = (await cluster.batch.listNamespacedJob({ namespace: ns, labelSelector: selector })).items.map((j) => j.metadata!.name!);
  } catch (err) {
    // Never delete on a failed list: a transient error must not look like "nothing to keep".
    throw clusterError(cluster, `listing Jobs of batch ${batchId} (${selector})`, err);
  }
  if (!names.length) return [];
  try {
    await cluster.batch.deleteCollectionNamespacedJob({ namespace: ns, labelSelector: selector, propagationPolicy: 'Background' });
  } catch (err) {
    throw clusterError(cluster, `deleting Jobs of batch ${batchId} (${selector})`, err);
  }
  return names;
}

export async function teardownBatch(cluster: Cluster, batchId: string): Promise<void> {
  const ns = cluster.namespace;
  const name = proxyName(batchId);
  const selector = rolloutSelector(batchId);
  const quiet = (doing: string) => (err: unknown) => {
    if (apiStatus(err)?.code !== 404) throw clusterError(cluster, doing, err);
  };
  await cluster.apps
    .deleteNamespacedDeployment({ namespace: ns, name, propagationPolicy: 'Background' })
    .catch(quiet(`deleting Deployment ${ns}/${name}`));
  await cluster.core.deleteNamespacedService({ namespace: ns, name }).catch(quiet(`deleting Service ${ns}/${name}`));
  await cluster.core.deleteNamespacedSecret({ namespace: ns, name }).catch(quiet(`deleting Secret ${ns}/${name}`));
  // Attempts' Secrets left by a lab that stopped mid-attempt (the Job's garbage collection takes the rest).
  await cluster.core
    .deleteCollectionNamespacedSecret({ namespace: ns, labelSelector: `${selector},${LABELS.role}=rollout` })
    .catch(quiet(`deleting attempt Secrets of ${batchId}`));
  await cluster.core
    .deleteNamespacedPersistentVolumeClaim({ namespace: ns, name: proxyClaimName(batchId) })
    .catch(quiet(`deleting PersistentVolumeClaim ${ns}/${proxyClaimName(batchId)}`));
  await cluster.networking
    .deleteCollectionNamespacedNetworkPolicy({ namespace: ns, labelSelector: selector })
    .catch(quiet(`deleting NetworkPolicies of ${batchId}`));
  await cluster.core
    .deleteCollectionNamespacedConfigMap({ namespace: ns, labelSelector: selector })
    .catch(quiet(`deleting ConfigMaps of ${batchId}`));
}

async function waitForProxyPod(cluster: Cluster, watch: BatchWatch, batchId: string, timeoutMs: number): Promise<string> {
  const isReady = (p: k8s.V1Pod) =>
    p.metadata?.labels?.[LABELS.role] === 'proxy' &&
    !p.metadata?.deletionTimestamp &&
    (p.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
  const ready = () => [...watch.pods.objects.values()].find(isReady)?.metadata?.name;
  const now = ready();
  if (now) return now;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      off();
      const pods = [...watch.pods.objects.values()].filter((p) => p.metadata?.labels?.[LABELS.role] === 'proxy');
      const state = pods
        .map(
          (p) =>
            `${p.metadata?.name}: ${p.status?.phase ?? '?'}${(p.status?.containerStatuses ?? []).map((c) => (c.state?.waiting?.reason ? ` ${c.state.waiting.reason}` : '')).join('')}`,
        )
        .join('; ');
      reject(
        new ClusterError(
          `the capture proxy of batch ${batchId} (Deployment ${cluster.namespace}/${proxyName(batchId)}) did not become ready within ${Math.round(timeoutMs / 1000)} s${state ? `: ${state}` : ': no pod'}`,
        ),
      );
    }, timeoutMs);
    const off = watch.pods.on(() => {
      const name = ready();
      if (!name) return;
      clearTimeout(timer);
      off();
      resolve(name);
    });
  });
}

async function waitForHealth(url: string, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < end) {
    try {
      const res = await fetch(`${url}/health`, { signal: AbortSignal.timeout(5000) });
      if (res.ok) return;
      last = `HTTP ${res.status}`;
    } catch (err) {
      last = (err as Error).message;
    }
    await new Promise((r) => setTimeout(r, 300));
  }
  throw new ClusterError(`the capture proxy did not answer /health through the port-forward ${url} (${last})`);
}

const RolloutDocSchema = z
  .object({ calls: z.array(z.unknown()), trainable: z.boolean(), validation: z.array(z.string()).default([]) })
  .loose();
const CreatedSchema = z.object({ api_key: z.string().min(1) }).loose();

/** Why a request never got an HTTP answer (the port-forward dropped, the proxy pod went away, a timeout). */
function transportReason(err: unknown): { refused: boolean; text: string } {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  const code = cause?.code ?? (err as NodeJS.ErrnoException).code;
  return { refused: code === 'ECONNREFUSED', text: [code, cause?.message ?? (err as Error).message].filter(Boolean).join(': ') };
}

/**
 * The in-cluster proxy as the runner sees it, through the port-forward. Each attempt's session is
 * followed while it runs (k8s-mirror.ts): its calls land in `<batch>/capture` as they happen. A
 * request that gets no answer (the port-forward dropped) is retried, then the port-forward is made
 * again (`reconnect`) and the mirror resumes from its last mirrored call.
 */
export class K8sCapture implements BatchCapture {
  /** Makes the port-forward again and returns its URL (set by the backend). */
  reconnect: (() => Promise<string>) | undefined;
  readonly mirror: SessionMirror;

  constructor(
    public url: string,
    private readonly adminKey: string,
    batchDir: string,
    engineUrl: string,
    private readonly log: (line: string) => void = () => {},
  ) {
    this.mirror = new SessionMirror(batchPaths(batchDir).capture, (path) => this.call('GET', path), engineUrl, log);
  }

  /** Follows running sessions every `intervalMs` (0: only at each attempt's end). */
  startFollowing(intervalMs: number): void {
    if (intervalMs > 0) this.mirror.start(intervalMs);
  }

  private async call(method: string, path: string, body?: unknown): Promise<unknown> {
    for (let attempt = 0; ; attempt++) {
      let res: Response;
      let text: string;
      try {
        res = await fetch(`${this.url}${path}`, {
          method,
          headers: { authorization: `Bearer ${this.adminKey}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
          ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
          signal: AbortSignal.timeout(30_000),
        });
        text = await res.text();
      } catch (err) {
        const why = transportReason(err);
        // A POST is repeated only when it never left (connection refused): it is not idempotent.
        if (attempt >= 3 || (method !== 'GET' && !why.refused))
          throw new Error(
            `the in-cluster capture proxy did not answer ${method} ${path} through the port-forward ${this.url} (${why.text})`,
          );
        // First a plain retry (a dropped stream heals on the next connection), then a new port-forward.
        if (attempt === 0 || !this.reconnect) await new Promise((r) => setTimeout(r, 300));
        else {
          this.log(`the port-forward to the capture proxy dropped (${why.text}); forwarding again`);
          this.url = await this.reconnect();
        }
        continue;
      }
      if (!res.ok) throw new Error(`the in-cluster capture proxy answered ${method} ${path} with ${res.status}: ${text.slice(0, 300)}`);
      return text ? JSON.parse(text) : undefined;
    }
  }

  /** Minted keys of this lab's sessions, in memory only: a record, export or log carries the session id, never the key. */
  private readonly keys = new Map<string, string>();

  async createSession(req: {
    sessionId: string;
    metadata: Record<string, unknown>;
    sampling: Record<string, number>;
    maxModelCalls: number;
  }): Promise<void> {
    const created = CreatedSchema.parse(
      await this.call('POST', '/sessions', {
        session_id: req.sessionId,
        max_model_calls: req.maxModelCalls,
        metadata: req.metadata,
        sampling: req.sampling,
        mint_key: true,
      }),
    );
    this.keys.set(req.sessionId, created.api_key);
    this.mirror.follow(req.sessionId);
  }

  /** The key the attempt's harness presents (the session id only for a session this lab did not create). */
  keyOf(sessionId: string): string {
    return this.keys.get(sessionId) ?? sessionId;
  }

  async sessionFacts(sessionId: string): Promise<{ nCalls: number; trainable: boolean; findings: string[] }> {
    const doc = RolloutDocSchema.parse(await this.call('GET', `/sessions/${encodeURIComponent(sessionId)}/rollout`));
    // The last sync: whatever the polling had not fetched yet; ids already mirrored are skipped.
    let mirrored = -1;
    let failure = '';
    try {
      mirrored = await this.mirror.sync(sessionId);
    } catch (err) {
      failure = err instanceof Error ? err.message : String(err);
      this.log(`mirroring session ${sessionId} into the batch directory: ${failure}`);
    }
    await this.mirror.unfollow(sessionId);
    // What trains is what the batch directory holds: a copy short of the proxy's calls is never trainable.
    if (failure || mirrored < doc.calls.length) {
      const short = `[FATAL mirror] ${failure ? `the final mirror failed (${failure})` : `${mirrored} of the proxy's ${doc.calls.length} call(s)`} in ${this.mirror.fileOf(sessionId)}`;
      return { nCalls: doc.calls.length, trainable: false, findings: [short, ...doc.validation] };
    }
    return { nCalls: doc.calls.length, trainable: doc.trainable, findings: doc.validation };
  }

  /** Mirrors a session into `<batch>/capture/sessions/<id>.jsonl` now (the capture store's format); returns the file. */
  async mirrorNow(sessionId: string): Promise<string> {
    await this.mirror.sync(sessionId);
    return this.mirror.fileOf(sessionId);
  }

  async close(): Promise<void> {
    await this.mirror.close();
  }
}

/**
 * A proxy image that exists only in the local daemon (HARNESS_LAB_K8S_PROXY_IMAGE=a local tag) is
 * pushed to the registry too and referenced from there; one already under the registry, or unknown
 * locally, is referenced as given (the cluster pulls it).
 */
export async function pushedProxy(
  docker: Docker,
  proxy: K8sBackendOptions['proxy'],
  registry: string,
  log?: (line: string) => void,
): Promise<K8sBackendOptions['proxy']> {
  const underRegistry = proxy.image.startsWith(`${registry.replace(/\/+$/, '')}/`);
  const local = await docker
    .getImage(proxy.image)
    .inspect()
    .then(
      () => true,
      () => false,
    );
  if (underRegistry || !local) return proxy;
  const pushed = await pushImages(docker, [proxy.image], registry, { ...(log ? { log } : {}) });
  return { ...proxy, image: pushed.get(proxy.image)! };
}

/**
 * HARNESS_LAB_K8S_HARNESS_FROM=hostPath: the pods mount this machine's node binary, harness cache and
 * reference harness from the node (the test double, or kind with extraMounts of the same paths);
 * otherwise the harness must be baked into the task image (real clusters).
 */
export async function harnessFromEnv(env: NodeJS.ProcessEnv = process.env): Promise<{ harnessFrom?: HarnessSource }> {
  const v = env.HARNESS_LAB_K8S_HARNESS_FROM;
  if (!v || v === 'image') return {};
  if (v !== 'hostPath') throw new ClusterError(`HARNESS_LAB_K8S_HARNESS_FROM=${v}: expected image or hostPath`);
  return {
    harnessFrom: {
      kind: 'hostPath',
      nodeBinary: process.execPath,
      harnessCache: harnessCacheRoot(env),
      reactScript: await ensureReactScript(),
    },
  };
}

/** The proxy image of a cluster batch: HARNESS_LAB_K8S_PROXY_IMAGE, else harness-lab's image under the registry. */
export function defaultProxy(manifest: BatchManifest, env: NodeJS.ProcessEnv = process.env): K8sBackendOptions['proxy'] {
  return {
    image: env.HARNESS_LAB_K8S_PROXY_IMAGE || clusterImage('harness-lab/harness-lab:latest', manifest.k8s?.registry ?? null),
    command: ['harness-lab'],
  };
}

/**
 * Each task's image tag as `harness-lab run` builds it (built here when Docker is reachable: it must
 * then be pushed to the registry); without Docker, the tag the build would have (base image ids unknown).
 */
export async function taskImageTags(manifest: BatchManifest, build: boolean, log?: (line: string) => void): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const runtime = await DockerRuntime.connect().catch(() => undefined);
  for (const ref of manifest.tasks) {
    const task = loadTask(ref.dir);
    if (runtime && build) out.set(task.name, await runtime.prepareImage(task, log));
    else if (!task.environment.dockerfile) out.set(task.name, task.environment.dockerImage ?? BASE_IMAGE);
    else {
      // The same tag prepareImage gives: the context hash over the local base images' ids, when Docker has them.
      const bases = dockerfileBases(readFileSync(task.environment.dockerfile, 'utf8')).filter((b) => !b.includes('$'));
      const ids = runtime
        ? await Promise.all(
            bases.map((b) =>
              runtime.docker
                .getImage(b)
                .inspect()
                .then(
                  (i) => i.Id,
                  () => undefined,
                ),
            ),
          )
        : [];
      const known = ids.filter((i): i is string => Boolean(i));
      out.set(task.name, taskImageTag(task.name, task.environment.contextDir, known.length === bases.length ? known : []));
    }
  }
  return out;
}

/** What src/batch/backends/index.ts loads for `--backend k8s`. */
export const k8sBackendModule: BackendModule = {
  async open(ctx) {
    const images = await taskImageTags(ctx.manifest, true, ctx.log);
    const reg = ctx.manifest.k8s?.registry;
    // Pushed before anything is created in the cluster: a failed push fails the batch with no Job made.
    let proxy = defaultProxy(ctx.manifest);
    if (reg) {
      const docker = await connectDocker();
      await pushImages(docker, [...images.values()], reg, { log: ctx.log });
      proxy = await pushedProxy(docker, proxy, reg, ctx.log);
    }
    const backend = await K8sBackend.open({
      manifest: ctx.manifest,
      batchDir: ctx.batchDir,
      taskImage: (t) => images.get(t.name)!,
      proxy,
      ...(await harnessFromEnv()),
      ...(ctx.engineApiKey ? { engineApiKey: ctx.engineApiKey } : {}),
      log: ctx.log,
    });
    return { backend, capture: backend.capture };
  },
  async cleanup(manifest, log, opts) {
    const cluster = loadCluster(target(manifest));
    await checkReachable(cluster);
    const removed = await deleteBatchJobs(cluster, cluster.namespace, manifest.batch_id);
    if (removed.length)
      log(
        `deleted ${removed.length} Job(s) of batch ${manifest.batch_id} in ${cluster.namespace} (propagationPolicy Background): ${removed.join(', ')}`,
      );
    // A finished batch needs its proxy no more (its sessions were mirrored into the batch directory);
    // an unfinished one keeps it, so a resume finds its sessions and admin key.
    if (opts?.finished) {
      await teardownBatch(cluster, manifest.batch_id);
      log(`removed the capture proxy and ConfigMaps of finished batch ${manifest.batch_id} in ${cluster.namespace}`);
    }
    return removed;
  },
  async preflight(k8s) {
    const cluster = loadCluster({ context: k8s?.context ?? null, namespace: k8s?.namespace ?? 'default' });
    await checkReachable(cluster);
    await assertPermissions(cluster, K8S_PERMISSIONS);
  },
  async dryRun(plan, format) {
    const images = await taskImageTags(plan.manifest, false);
    const objs = await k8sDryRunManifests({
      manifest: plan.manifest,
      taskImage: (t) => images.get(t.name)!,
      proxy: defaultProxy(plan.manifest),
    });
    return formatManifests(objs, format);
  },
};
