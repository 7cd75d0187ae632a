// The Kubernetes backend: one batch/v1 Job per rollout attempt, the batch's capture proxy in the
// cluster (Deployment + Service, admin key from a Secret, rollout egress limited by a
// NetworkPolicy) reached from the lab through a client-library port-forward, one watch per batch
// for Jobs and one for their pods, facts read from what the watch and the pod's log say (never exec
// from the laptop), cancel and cleanup by label with propagationPolicy Background.
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type * as k8s from '@kubernetes/client-node';
import { PatchStrategy } from '@kubernetes/client-node';
import {
  ClusterError,
  apiStatus,
  assertPermissions,
  checkReachable,
  clusterError,
  createOrKeep,
  loadCluster,
  type Cluster,
  type Permission,
} from '../../../cluster/kube.js';
import {
  INFRA_EXIT_CODE,
  LABELS,
  PROXY_PORT,
  attemptSecret,
  attemptSecretName,
  jobDeadlineSec,
  labelValue,
  parsePodResult,
  proxyClaimName,
  proxyManifests,
  proxyName,
  rolloutSelector,
  validateManifests,
} from '../../../cluster/manifests.js';
import { ROLLOUT_PERMISSIONS } from '../../../cluster/permissions.js';
import { forwardPort, type PortForwardHandle } from '../../../cluster/port-forward.js';
import { BatchWatch } from '../../../cluster/watch.js';
import type { AttemptFacts, BatchBackend, RolloutAttempt } from '../../backend.js';
import type { BatchManifest } from '../../state.js';
import type { ProxyImage } from './images.js';
import {
  buildJob,
  engineAndModel,
  finishedCondition,
  podOutcome,
  prepareTasks,
  rewardOf,
  splitLog,
  target,
  type JobOptions,
  type Outcome,
  type Prepared,
} from './job.js';
import { K8sCapture, proxyInput, waitForHealth, waitForProxyPod } from './proxy.js';

export interface K8sBackendOptions extends JobOptions {
  manifest: BatchManifest;
  batchDir: string;
  /** A kubeconfig file; default $KUBECONFIG / ~/.kube/config. Context and namespace come from the manifest's k8s target. */
  kubeconfig?: string;
  /** The in-cluster proxy's image and how to start harness-lab in it. */
  proxy: ProxyImage;
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
export const K8S_PERMISSIONS: Permission[] = ROLLOUT_PERMISSIONS;

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
      o.metadata = { ...o.metadata, labels: { ...o.metadata?.labels, ...ownerRunLabel(opts.manifest) } };
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
    // Which lab process made the Job: a later one reaps the Jobs of a lab killed with -9 (reapStale).
    // And which training run's server, if one's (its attempt Secret copies the Job's labels).
    built.job.metadata!.labels = { ...built.job.metadata!.labels, [OWNER_LABEL]: LAB_INSTANCE, ...ownerRunLabel(attempt.manifest) };
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

/** LABELS.ownerRun for a batch a training run's rollout server runs (none for other batches). */
export function ownerRunLabel(manifest: Pick<BatchManifest, 'k8s'>): Record<string, string> {
  const run = manifest.k8s?.owner_run;
  return run ? { [LABELS.ownerRun]: labelValue(run) } : {};
}

/** The label naming the lab process that created a rollout Job. */
export const OWNER_LABEL = 'harness-lab/owner';
/** This lab process (random per process: pids repeat across pods and machines). */
export const LAB_INSTANCE = randomBytes(6).toString('hex');

/**
 * Deletes the batch's Jobs that another lab process created (one killed with -9 leaves them running;
 * this process's own are kept). A failed list deletes nothing. Returns the deleted Jobs' names.
 */
export async function reapStaleJobs(cluster: Cluster, batchId: string, self = LAB_INSTANCE): Promise<string[]> {
  const ns = cluster.namespace;
  const selector = `${rolloutSelector(batchId)},${OWNER_LABEL},${OWNER_LABEL}!=${self}`;
  let names: string[];
  try {
    names = (await cluster.batch.listNamespacedJob({ namespace: ns, labelSelector: selector })).items.map((j) => j.metadata!.name!);
  } catch (err) {
    throw clusterError(cluster, `listing Jobs of batch ${batchId} (${selector})`, err);
  }
  for (const name of names)
    await cluster.batch.deleteNamespacedJob({ namespace: ns, name, propagationPolicy: 'Background' }).catch((err: unknown) => {
      if (apiStatus(err)?.code !== 404) throw clusterError(cluster, `deleting Job ${ns}/${name}`, err);
    });
  return names;
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
