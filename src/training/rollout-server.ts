// The rollout server a training run deploys beside its trainer (`data: {source: rollout-server,
// serve: ...}`): `harness-lab serve --backend k8s` as a Deployment + Service in the run's namespace,
// its admin key in a Secret (the trainer reads it through secretKeyRef, the server through its own),
// its state directory on a PersistentVolumeClaim (Recreate: one writer), the splits it serves shipped
// from this machine in ConfigMaps, and a ServiceAccount bound to a Role with exactly the verbs the
// Kubernetes batch backend uses (src/cluster/permissions.ts). Everything carries the run's label, so
// the run is followed and removed as one thing.
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { basename, join, relative, resolve } from 'node:path';
import { PassThrough, type Writable } from 'node:stream';
// One import of client-node (a dynamic one loads a second copy under tsx, whose ApiException a
// 404 check does not recognise).
import * as k8s from '@kubernetes/client-node';
import { apiStatus, clusterError, createOrKeep, type Cluster } from '../cluster/kube.js';
import {
  LABELS,
  dnsLabel,
  labelValue,
  restrictedPodSecurityContext,
  restrictedSecurityContext,
  serviceHostFlags,
  stateClaim,
  validateManifests,
} from '../cluster/manifests.js';
import { ROLLOUT_PERMISSIONS, roleRules } from '../cluster/permissions.js';
import { deleteSelected } from '../cluster/sweep.js';
import { findTasks, loadTask } from '../tasks/task.js';
import { SERVE_PORT, serveKeyRef, serveName } from './serve-names.js';
import { RUN_LABEL, TrainConfigError, type ServeSpec } from './trainer-jobs.js';

export { SERVE_PORT, rolloutServerUrl, serveKeyRef, serveName } from './serve-names.js';

export const SERVE_ROLE = 'rollout-server';
const SERVE_UID = 65532;
const TASKS_DIR = '/var/lib/harness-lab/tasks';
const STATE_DIR = '/var/lib/harness-lab/serve';
const CONFIGMAP_LIMIT = 900 * 1024;
/** The server stops its rollouts and removes their Jobs and its capture proxy on SIGTERM: give it time. */
export const SERVE_GRACE_SEC = 120;

export const serveClaimName = (run: string): string => dnsLabel(`${run}-serve-state`);
export const tasksConfigMapName = (run: string, split: string): string => dnsLabel(`${run}-tasks-${split}`);
export const serveSelector = (run: string): string => `${RUN_LABEL}=${labelValue(run)},${LABELS.role}=${SERVE_ROLE}`;

type Obj = k8s.KubernetesObject & Record<string, unknown>;

export interface Split {
  name: string;
  dir: string;
  /** Each task's directory and name (as `serve --dataset` loads them). */
  tasks: { dir: string; name: string }[];
}

/** The splits the config names, each a directory of Harbor tasks on this machine (relative to the config file). */
export function loadSplits(spec: ServeSpec, configFile: string): Split[] {
  const base = resolve(configFile, '..');
  return Object.entries(spec.datasets).map(([name, d]) => {
    const dir = resolve(base, d);
    let dirs: string[];
    try {
      dirs = findTasks(dir);
    } catch (err) {
      throw new TrainConfigError(
        `${configFile}: data.serve.datasets.${name}: ${dir}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`,
      );
    }
    if (!dirs.length) throw new TrainConfigError(`${configFile}: data.serve.datasets.${name}: no Harbor task (task.toml) under ${dir}`);
    return { name, dir, tasks: dirs.map((t) => ({ dir: t, name: loadTask(t).name })) };
  });
}

/** One split's task files as a ConfigMap (binaryData f0..fN) whose items rebuild the tree under the split's mount. */
export function splitConfigMap(run: string, namespace: string, split: Split): Obj {
  const files: string[] = [];
  const walk = (d: string) => {
    for (const n of readdirSync(d).sort()) {
      const p = join(d, n);
      if (statSync(p).isDirectory()) walk(p);
      else files.push(p);
    }
  };
  for (const t of split.tasks) walk(t.dir);
  const binaryData: Record<string, string> = {};
  let size = 0;
  const items = files.map((f, i) => {
    const data = readFileSync(f);
    size += data.length;
    binaryData[`f${i}`] = data.toString('base64');
    return { key: `f${i}`, path: relative(split.dir, f) || basename(f) };
  });
  if (size > CONFIGMAP_LIMIT)
    throw new TrainConfigError(
      `data.serve.datasets.${split.name}: its tasks are ${Math.round(size / 1024)} KiB, too large for a ConfigMap (about 1 MiB); serve fewer tasks per split`,
    );
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: tasksConfigMapName(run, split.name),
      namespace,
      labels: runLabels(run),
      annotations: { 'harness-lab/items': JSON.stringify(items), 'harness-lab/split': split.name },
    },
    binaryData,
  };
}

function runLabels(run: string): Record<string, string> {
  return { [LABELS.managedBy]: 'harness-lab', [RUN_LABEL]: labelValue(run), [LABELS.role]: SERVE_ROLE };
}

export interface RolloutServerInput {
  run: string;
  namespace: string;
  spec: ServeSpec;
  splits: Split[];
  /** The lab's image (harness-lab on PATH): the server's, and its capture proxy's. */
  image: string;
  /** Each task's image as the cluster pulls it, by task name (built and pushed before anything is created). */
  taskImages: ReadonlyMap<string, string>;
  adminKey: string;
}

/** Every object of the run's rollout server, in creation order. */
export function rolloutServerManifests(input: RolloutServerInput): Obj[] {
  const { run, namespace: ns, spec } = input;
  const name = serveName(run);
  const labels = runLabels(run);
  const podLabels = { [RUN_LABEL]: labelValue(run), [LABELS.role]: SERVE_ROLE };
  const configMaps = input.splits.map((s) => splitConfigMap(run, ns, s));
  const images: Record<string, string> = {};
  for (const s of input.splits)
    for (const t of s.tasks) {
      const image = input.taskImages.get(t.name);
      if (!image) throw new TrainConfigError(`data.serve.datasets.${s.name}: no image for task ${t.name}`);
      images[t.name] = image;
    }
  const res = { cpu: spec.cpu, memory: spec.memory };
  const flag = (f: string, v: number | undefined) => (v === undefined ? [] : [f, String(v)]);
  return [
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name, namespace: ns, labels }, automountServiceAccountToken: true },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata: { name, namespace: ns, labels },
      rules: roleRules(ROLLOUT_PERMISSIONS),
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: { name, namespace: ns, labels },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name },
      subjects: [{ kind: 'ServiceAccount', name, namespace: ns }],
    },
    {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name, namespace: ns, labels },
      type: 'Opaque',
      stringData: { [serveKeyRef(run).key]: input.adminKey },
    },
    ...configMaps,
    stateClaim(serveClaimName(run), ns, labels, spec.storage, spec.storageClassName),
    {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name, namespace: ns, labels },
      spec: {
        replicas: 1,
        // One writer on the state claim: the old pod is gone before the new one starts.
        strategy: { type: 'Recreate' },
        selector: { matchLabels: podLabels },
        template: {
          metadata: { labels: podLabels },
          spec: {
            serviceAccountName: name,
            enableServiceLinks: false,
            terminationGracePeriodSeconds: SERVE_GRACE_SEC,
            securityContext: restrictedPodSecurityContext(SERVE_UID),
            containers: [
              {
                name: 'serve',
                image: input.image,
                command: [
                  'harness-lab',
                  'serve',
                  '--backend',
                  'k8s',
                  '--namespace',
                  ns,
                  '--host',
                  '0.0.0.0',
                  '--port',
                  String(SERVE_PORT),
                  ...serviceHostFlags(name, ns),
                  ...input.splits.flatMap((s) => ['--dataset', `${s.name}=${TASKS_DIR}/${s.name}`]),
                  '--state-dir',
                  STATE_DIR,
                  // Everything it makes in the cluster is labelled with the run (train cancel sweeps it).
                  '--run',
                  run,
                  '--max-concurrent',
                  String(spec.maxConcurrent),
                  ...flag('--parallel', spec.parallel),
                  ...flag('--breaker-after', spec.breakerAfter),
                  ...flag('--max-starting', spec.maxStarting),
                ],
                env: [
                  { name: 'HOME', value: '/tmp' },
                  { name: 'HARNESS_LAB_ADMIN_KEY', valueFrom: { secretKeyRef: { name, key: serveKeyRef(run).key } } },
                  // Its capture proxy runs the same image; the task images are already where the cluster pulls them.
                  { name: 'HARNESS_LAB_K8S_PROXY_IMAGE', value: input.image },
                  { name: 'HARNESS_LAB_K8S_TASK_IMAGES', value: JSON.stringify(images) },
                  ...Object.entries(spec.env).map(([k, v]) => ({ name: k, value: v })),
                ],
                ports: [{ name: 'http', containerPort: SERVE_PORT, protocol: 'TCP' }],
                readinessProbe: { httpGet: { path: '/health', port: SERVE_PORT }, periodSeconds: 5 },
                resources: { requests: res, limits: res },
                securityContext: restrictedSecurityContext(SERVE_UID),
                volumeMounts: [
                  { name: 'state', mountPath: STATE_DIR },
                  { name: 'tmp', mountPath: '/tmp' },
                  // configMaps[i] is split i's.
                  ...input.splits.map((s, i) => ({ name: `tasks-${i}`, mountPath: `${TASKS_DIR}/${s.name}`, readOnly: true })),
                ],
              },
            ],
            volumes: [
              { name: 'state', persistentVolumeClaim: { claimName: serveClaimName(run) } },
              { name: 'tmp', emptyDir: { sizeLimit: '1Gi' } },
              ...configMaps.map((c, i) => ({
                name: `tasks-${i}`,
                configMap: {
                  name: c.metadata!.name!,
                  items: JSON.parse((c.metadata as { annotations: Record<string, string> }).annotations['harness-lab/items']!) as unknown[],
                },
              })),
            ],
          },
        },
      },
    },
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name, namespace: ns, labels },
      spec: { selector: podLabels, ports: [{ name: 'http', port: SERVE_PORT, targetPort: SERVE_PORT, protocol: 'TCP' }] },
    },
  ];
}

export const newAdminKey = (): string => randomBytes(24).toString('hex');

/** A short fingerprint of the key (the run record and the log name the key by it, never by the key). */
export const keyFingerprint = (key: string): string => createHash('sha256').update(key).digest('hex').slice(0, 12);

/** Creates the server's objects (an existing one is kept: a repeated submit is idempotent). */
export async function deployRolloutServer(cluster: Cluster, objs: Obj[], log: (line: string) => void): Promise<void> {
  await validateManifests(objs);
  for (const o of objs) {
    const r = await createOrKeep(cluster, o);
    log(`${o.kind} ${cluster.namespace}/${o.metadata?.name} ${r}`);
  }
}

export interface ServerHealth {
  /** Ready, Starting, Waiting (with the pod's reason), Gone. */
  state: 'Ready' | 'Starting' | 'Waiting' | 'Gone';
  detail: string;
  pod: string | undefined;
}

/** The server's Deployment and pod as the API server has them now. */
export async function rolloutServerHealth(cluster: Cluster, run: string): Promise<ServerHealth> {
  const name = serveName(run);
  const dep = await cluster.apps.readNamespacedDeployment({ namespace: cluster.namespace, name }).catch((err: unknown) => {
    if (apiStatus(err)?.code === 404) return undefined;
    throw clusterError(cluster, `reading Deployment ${cluster.namespace}/${name}`, err);
  });
  if (!dep) return { state: 'Gone', detail: `Deployment ${cluster.namespace}/${name} is not there`, pod: undefined };
  const pods = await cluster.core
    .listNamespacedPod({ namespace: cluster.namespace, labelSelector: serveSelector(run) })
    .catch((err: unknown) => {
      throw clusterError(cluster, `listing the pods of ${name}`, err);
    });
  const live = pods.items.filter((p) => !p.metadata?.deletionTimestamp);
  const ready = live.find((p) => (p.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True'));
  if (ready) return { state: 'Ready', detail: `pod ${ready.metadata?.name} ready`, pod: ready.metadata?.name };
  const { podWaiting } = await import('./trainer-pods.js');
  const waiting = podWaiting(live);
  if (waiting)
    return {
      state: 'Waiting',
      detail: `${waiting.pod}: ${waiting.reason}${waiting.message ? ` (${waiting.message})` : ''}`,
      pod: waiting.pod,
    };
  return {
    state: 'Starting',
    detail: live.length ? `pod ${live[0]!.metadata?.name} not ready yet` : 'no pod yet',
    pod: live[0]?.metadata?.name,
  };
}

/** The server's admin key, read back from its Secret (to scrape its /metrics through a port-forward). */
export async function rolloutServerKey(cluster: Cluster, run: string): Promise<string> {
  const ref = serveKeyRef(run);
  const s = await cluster.core.readNamespacedSecret({ namespace: cluster.namespace, name: ref.secret }).catch((err: unknown) => {
    throw clusterError(cluster, `reading Secret ${cluster.namespace}/${ref.secret}`, err);
  });
  const b64 = s.data?.[ref.key];
  if (!b64) throw clusterError(cluster, `reading Secret ${cluster.namespace}/${ref.secret}`, new Error(`it has no key ${ref.key}`));
  return Buffer.from(b64, 'base64').toString('utf8');
}

/**
 * Removes the server: its Deployment first, then (once its pod is gone, so the server had its grace
 * period to stop its rollouts and remove their Jobs with its Role still bound) everything else of the
 * run's server by label. Returns what was deleted.
 */
export async function removeRolloutServer(
  cluster: Cluster,
  run: string,
  log: (line: string) => void,
  opts: { podGoneTimeoutMs?: number } = {},
): Promise<string[]> {
  const ns = cluster.namespace;
  const name = serveName(run);
  const selector = `${RUN_LABEL}=${labelValue(run)},${LABELS.role}=${SERVE_ROLE}`;
  const removed: string[] = [];
  const gone = (doing: string) => (err: unknown) => {
    if (apiStatus(err)?.code !== 404) throw clusterError(cluster, doing, err);
    return undefined;
  };
  const del = async (kind: string, fn: () => Promise<unknown>) => {
    const r = await fn().catch(gone(`deleting ${kind} ${ns}/${name}`));
    if (r !== undefined) removed.push(`${kind} ${name}`);
  };
  await del('Deployment', () => cluster.apps.deleteNamespacedDeployment({ namespace: ns, name, propagationPolicy: 'Background' }));
  const end = Date.now() + (opts.podGoneTimeoutMs ?? (SERVE_GRACE_SEC + 30) * 1000);
  for (;;) {
    const pods = await cluster.core.listNamespacedPod({ namespace: ns, labelSelector: serveSelector(run) }).catch((err: unknown) => {
      throw clusterError(cluster, `listing the pods of ${name}`, err);
    });
    if (!pods.items.length) break;
    if (Date.now() > end) {
      log(`the rollout server's pod ${pods.items.map((p) => p.metadata?.name).join(', ')} is still stopping; removing the rest anyway`);
      break;
    }
    await new Promise((r) => setTimeout(r, 500));
  }
  // What the server made for its rollouts and did not remove itself (killed before its cleanup ended).
  const left = await deleteSelected(cluster, `${LABELS.ownerRun}=${labelValue(run)}`);
  if (left.length) log(`removed what the rollout server left: ${left.join(', ')}`);
  removed.push(...left);
  await del('Service', () => cluster.core.deleteNamespacedService({ namespace: ns, name }));
  await del('Secret', () => cluster.core.deleteNamespacedSecret({ namespace: ns, name }));
  const cms = await cluster.core.listNamespacedConfigMap({ namespace: ns, labelSelector: selector }).catch((err: unknown) => {
    throw clusterError(cluster, `listing the ConfigMaps of ${name}`, err);
  });
  for (const c of cms.items) {
    const n = c.metadata!.name!;
    await cluster.core.deleteNamespacedConfigMap({ namespace: ns, name: n }).catch(gone(`deleting ConfigMap ${ns}/${n}`));
    removed.push(`ConfigMap ${n}`);
  }
  const claim = serveClaimName(run);
  if (
    (await cluster.core
      .deleteNamespacedPersistentVolumeClaim({ namespace: ns, name: claim })
      .catch(gone(`deleting PVC ${ns}/${claim}`))) !== undefined
  )
    removed.push(`PersistentVolumeClaim ${claim}`);
  const rbac = cluster.kc.makeApiClient(k8s.RbacAuthorizationV1Api);
  await del('RoleBinding', () => rbac.deleteNamespacedRoleBinding({ namespace: ns, name }));
  await del('Role', () => rbac.deleteNamespacedRole({ namespace: ns, name }));
  await del('ServiceAccount', () => cluster.core.deleteNamespacedServiceAccount({ namespace: ns, name }));
  return removed;
}

export interface ServerProgress {
  /** Rollouts that reached a verdict, by class (completed, policy_failure, timeout, infra_error, ...). */
  rollouts: Record<string, number>;
  done: number;
  infraFailed: number;
  /** infra_error over every rollout that ended (0 when none ended). */
  infraFailedRate: number;
  causes: Record<string, number>;
  rewardMean: number | null;
  scored: number;
  running: number;
  breaker: string;
}

/** Reads serve's Prometheus text (its own metric names, src/serve/rollouts.ts) into a run's progress. */
export function parseServeMetrics(text: string): ServerProgress {
  const samples: { name: string; labels: Record<string, string>; value: number }[] = [];
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (!m) continue;
    const labels = Object.fromEntries([...(m[2] ?? '').matchAll(/([a-z_]+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1]!, x[2]!]));
    samples.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  const by = (name: string, label: string) =>
    Object.fromEntries(samples.filter((s) => s.name === name).map((s) => [s.labels[label] ?? '', s.value]));
  const one = (name: string) => samples.find((s) => s.name === name)?.value ?? 0;
  const rollouts = by('harness_lab_serve_rollouts_total', 'class');
  const done = Object.values(rollouts).reduce((a, b) => a + b, 0);
  const infraFailed = rollouts.infra_error ?? 0;
  const scored = one('harness_lab_serve_scored_total');
  const breaker = samples.find((s) => s.name === 'harness_lab_serve_breaker_state' && s.value === 1)?.labels.state ?? 'unknown';
  const sandboxes = by('harness_lab_serve_sandboxes', 'state');
  return {
    rollouts,
    done,
    infraFailed,
    infraFailedRate: done ? infraFailed / done : 0,
    causes: by('harness_lab_serve_infra_failures_total', 'cause'),
    rewardMean: scored ? one('harness_lab_serve_reward_sum') / scored : null,
    scored,
    running: Object.values(sandboxes).reduce((a, b) => a + b, 0),
    breaker,
  };
}

/** The server's progress, scraped from its /metrics through a port-forward to its ready pod. */
export async function rolloutServerProgress(cluster: Cluster, run: string, pod: string): Promise<ServerProgress> {
  const key = await rolloutServerKey(cluster, run);
  const { forwardPort } = await import('../cluster/port-forward.js');
  const fwd = await forwardPort(cluster, pod, SERVE_PORT, () => {});
  try {
    const res = await fetch(`${fwd.url}/metrics`, { headers: { authorization: `Bearer ${key}` }, signal: AbortSignal.timeout(15_000) });
    const text = await res.text();
    if (!res.ok) throw clusterError(cluster, `reading /metrics of ${pod}`, new Error(`HTTP ${res.status}: ${text.slice(0, 200)}`));
    return parseServeMetrics(text);
  } finally {
    await fwd.close();
  }
}

/** Streams the log of the run's rollout server pod (following it unless `follow` is false, until `signal` aborts). */
export async function streamServerLog(
  cluster: Cluster,
  run: string,
  out: Writable,
  follow = true,
  signal?: AbortSignal,
): Promise<{ pod: string }> {
  const health = await rolloutServerHealth(cluster, run);
  if (!health.pod) throw new TrainConfigError(`training run "${run}" has no rollout server pod (${health.detail})`);
  const pod = health.pod;
  // As streamRunLogs: client-node pipes the body into the stream it is given and never ends `out`.
  const pass = new PassThrough();
  pass.pipe(out, { end: false });
  await new Promise<void>((resolve, reject) => {
    let ctl: AbortController | undefined;
    pass.on('end', () => resolve());
    pass.on('error', (err) => reject(clusterError(cluster, `streaming the log of pod ${cluster.namespace}/${pod}`, err)));
    signal?.addEventListener(
      'abort',
      () => {
        ctl?.abort();
        resolve();
      },
      { once: true },
    );
    new k8s.Log(cluster.kc).log(cluster.namespace, pod, 'serve', pass, { follow }).then(
      (c) => {
        ctl = c;
        if (signal?.aborted) c.abort();
      },
      (err: unknown) => reject(clusterError(cluster, `streaming the log of pod ${cluster.namespace}/${pod}`, err)),
    );
  });
  pass.unpipe(out);
  return { pod };
}

/**
 * Waits until the server's pod is ready (the trainer is created only then: its first request must
 * find the server). A pod stuck on a reason that does not clear by itself (an image that cannot be
 * pulled, a config error) fails at once with that reason; otherwise after `timeoutMs`.
 */
export async function waitForRolloutServer(cluster: Cluster, run: string, timeoutMs: number): Promise<ServerHealth> {
  const { podWaiting } = await import('./trainer-pods.js');
  const end = Date.now() + timeoutMs;
  for (;;) {
    const h = await rolloutServerHealth(cluster, run);
    if (h.state === 'Ready') return h;
    if (h.state === 'Waiting') {
      const pods = await cluster.core.listNamespacedPod({ namespace: cluster.namespace, labelSelector: serveSelector(run) });
      if (podWaiting(pods.items)?.stuck) throw new TrainConfigError(`the rollout server ${serveName(run)} cannot start: ${h.detail}`);
    }
    if (Date.now() > end)
      throw new TrainConfigError(
        `the rollout server ${serveName(run)} was not ready within ${Math.round(timeoutMs / 1000)} s: ${h.detail}`,
      );
    await new Promise((r) => setTimeout(r, 1000));
  }
}
