// Every manifest a cluster batch applies, built as plain objects and validated with
// kubernetes-models (the OpenAPI schemas) before anything is sent: one batch/v1 Job per rollout
// attempt, a ConfigMap with each task's tests/, and the in-cluster capture proxy (Secret with the
// admin key, Deployment, Service, and a NetworkPolicy so rollout pods reach only the proxy).
import { createHash } from 'node:crypto';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { dumpYaml, type KubernetesObject } from '@kubernetes/client-node';
import { z } from 'zod';
import { shellQuote } from '../harness/registry.js';
import type { HarborTask } from '../tasks/task.js';
import { ClusterError } from './kube.js';

export const LABELS = {
  managedBy: 'app.kubernetes.io/managed-by',
  name: 'app.kubernetes.io/name',
  batch: 'harness-lab/batch',
  group: 'harness-lab/group',
  rollout: 'harness-lab/rollout',
  task: 'harness-lab/task',
  harness: 'harness-lab/harness',
  attempt: 'harness-lab/attempt',
  role: 'harness-lab/role',
  queue: 'kueue.x-k8s.io/queue-name',
} as const;

export const PROXY_PORT = 8100;
export const RESULT_MARKER = 'HARNESS_LAB_RESULT ';
export const PHASE_MARKER = 'HARNESS_LAB_PHASE ';
/** The entry script's exit code when it could not even start the harness (podFailurePolicy FailJob). */
export const INFRA_EXIT_CODE = 42;
const CONFIGMAP_LIMIT = 900 * 1024;

/** A label value (<= 63 characters, [A-Za-z0-9._-], alphanumeric at both ends); long values keep a hash suffix. */
export function labelValue(s: string): string {
  let v = s.replace(/[^A-Za-z0-9._-]+/g, '-').replace(/^[^A-Za-z0-9]+|[^A-Za-z0-9]+$/g, '');
  if (v.length > 63) v = `${v.slice(0, 54).replace(/[^A-Za-z0-9]+$/, '')}-${createHash('sha256').update(s).digest('hex').slice(0, 8)}`;
  return v || 'x';
}

/** A DNS-1123 label (Job, Service names): lowercase, <= 63. */
export function dnsLabel(s: string, max = 63): string {
  let v = s.toLowerCase().replace(/[^a-z0-9-]+/g, '-').replace(/^-+|-+$/g, '');
  if (v.length > max) v = `${v.slice(0, max - 9).replace(/-+$/, '')}-${createHash('sha256').update(s).digest('hex').slice(0, 8)}`;
  return v || 'x';
}

export const jobName = (batchId: string, rolloutId: string, attempt: number): string => dnsLabel(`hl-${batchId.slice(0, 12)}-${rolloutId}-a${attempt}`);
export const proxyName = (batchId: string): string => dnsLabel(`hl-proxy-${batchId}`, 50);
export const testsConfigMapName = (batchId: string, task: string): string => dnsLabel(`hl-tests-${batchId.slice(0, 12)}-${task}`);
export const rolloutSelector = (batchId: string): string => `${LABELS.batch}=${labelValue(batchId)}`;

/** Where the harness comes from inside the pod. */
export type HarnessSource =
  /** Baked into the (pushed) task image at /opt/harness-lab/{bin,harnesses}: real clusters. */
  | { kind: 'image' }
  /** hostPath volumes from the node (the test double, kind with extraMounts): node binary, harness cache, reference harness. */
  | { kind: 'hostPath'; nodeBinary: string; harnessCache: string; reactScript?: string };

export interface RolloutLaunch {
  /** The harness's bash script, environment and config files (registry.launchPlan) for in-pod paths. */
  script: string;
  env: Record<string, string>;
  files: { path: string; content: string }[];
  nativeLog: string;
}

export interface RolloutJobInput {
  namespace: string;
  batchId: string;
  groupId: string;
  rolloutId: string;
  attempt: number;
  sessionId: string;
  /** The key the harness presents, when it is not the session id (minted per attempt). */
  sessionKey?: string;
  task: HarborTask;
  harness: string;
  image: string;
  launch: RolloutLaunch;
  /** The agent's wall clock (the batch's --timeout). */
  timeoutSec: number;
  /**
   * Also bound the agent inside the pod (then run the verifier anyway): for `--on-timeout keep`, which
   * wants the verifier's reward of a timed-out agent. Otherwise the Job's deadline alone ends it.
   */
  agentTimeoutInPod?: boolean;
  /** Time allowed for scheduling and image pulls on top of agent + verifier (default 60). */
  startupSlackSec?: number;
  ttlSecondsAfterFinished?: number;
  queueName?: string | null;
  harnessFrom: HarnessSource;
  taskEnv: Record<string, string>;
  verifierEnv: Record<string, string>;
}

export const POD_PATHS = { home: '/tmp/harness-home', logs: '/logs', tests: '/tests', testsSource: '/opt/harness-lab/task-tests', binDir: '/opt/harness-lab/bin', harnesses: '/opt/harness-lab/harnesses' } as const;

export function podWorkdir(task: HarborTask): string {
  return task.environment.workdir ?? '/app';
}

/** requests = limits (Guaranteed QoS: an unambiguous OOMKilled), from task.toml; 1 CPU / 2 GiB when it says nothing. */
export function taskResources(task: HarborTask): { requests: Record<string, string>; limits: Record<string, string> } {
  const r: Record<string, string> = { cpu: String(task.environment.cpus ?? 1), memory: `${task.environment.memoryMb ?? 2048}Mi` };
  if (task.environment.storageMb) r['ephemeral-storage'] = `${task.environment.storageMb}Mi`;
  return { requests: { ...r }, limits: { ...r } };
}

export function jobDeadlineSec(input: Pick<RolloutJobInput, 'timeoutSec' | 'task' | 'startupSlackSec'>): number {
  return Math.ceil(input.timeoutSec + input.task.verifierTimeoutSec + (input.startupSlackSec ?? 60));
}

const b64 = (s: string | Buffer) => Buffer.from(s).toString('base64');

/**
 * The pod's entry script: harness files, the harness (bounded by its own timeout), then tests/ copied in
 * and the verifier with a clean environment (no session key), then one result line on stdout that the
 * lab reads back through the pods/log API.
 */
export function entryScript(input: RolloutJobInput): string {
  const workdir = podWorkdir(input.task);
  const agentLog = `${POD_PATHS.logs}/agent/${input.launch.nativeLog}`;
  const verifierLog = `${POD_PATHS.logs}/verifier/test-stdout.txt`;
  const agentEnv = Object.entries(input.launch.env).map(([k, v]) => `${k}=${v}`);
  const asUser = (user: string | undefined, cmd: string) => (user ? `runuser -u ${shellQuote(user)} -- ${cmd}` : cmd);
  const verifierEnv = ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', `HOME=${POD_PATHS.home}`, ...Object.entries({ ...input.taskEnv, ...input.verifierEnv }).map(([k, v]) => `${k}=${v}`)];
  const lines = [
    'set -u',
    'ms() { echo $(( $(date +%s%N) / 1000000 )); }',
    `mkdir -p ${shellQuote(workdir)} ${POD_PATHS.home} ${POD_PATHS.logs}/agent ${POD_PATHS.logs}/verifier ${POD_PATHS.logs}/artifacts || exit ${INFRA_EXIT_CODE}`,
    `chmod 1777 ${POD_PATHS.home} ${POD_PATHS.logs}/agent ${POD_PATHS.logs}/verifier ${POD_PATHS.logs}/artifacts`,
    ...input.launch.files.map((f) => `mkdir -p ${shellQuote(f.path.replace(/\/[^/]*$/, '') || '/')} && printf '%s' '${b64(f.content)}' | base64 -d > ${shellQuote(f.path)} || exit ${INFRA_EXIT_CODE}`),
    ...(input.task.agentUser && input.launch.files.length ? [`chown -R ${shellQuote(input.task.agentUser)} ${POD_PATHS.home}`] : []),
    `echo ${shellQuote(`${PHASE_MARKER}agent`)}`,
    't0=$(ms)',
    `cd ${shellQuote(workdir)} && ${input.agentTimeoutInPod ? `timeout -k 30 ${input.timeoutSec} ` : ''}${asUser(input.task.agentUser, `env PATH=${POD_PATHS.binDir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=${POD_PATHS.home} ${agentEnv.map(shellQuote).join(' ')} bash -c ${shellQuote(input.launch.script)}`)} 2>&1 | tee ${shellQuote(agentLog)}`,
    'agent_exit=${PIPESTATUS[0]}',
    'agent_ms=$(( $(ms) - t0 ))',
    `echo ${shellQuote(`${PHASE_MARKER}verifier`)}`,
    `mkdir -p ${POD_PATHS.tests} && cp -r ${POD_PATHS.testsSource}/. ${POD_PATHS.tests}/ || exit ${INFRA_EXIT_CODE}`,
    'probe=$(env -i ' + verifierEnv.map(shellQuote).join(' ') + ' env)',
    `case "$probe" in *${shellQuote(input.sessionKey ?? input.sessionId)}*) key_absent=false ;; *) key_absent=true ;; esac`,
    't1=$(ms)',
    `cd ${shellQuote(workdir)} && timeout -k 10 ${input.task.verifierTimeoutSec} ${asUser(input.task.verifierUser, `env -i ${verifierEnv.map(shellQuote).join(' ')} bash ${POD_PATHS.tests}/test.sh`)} 2>&1 | tee ${shellQuote(verifierLog)}`,
    'verifier_exit=${PIPESTATUS[0]}',
    'verifier_ms=$(( $(ms) - t1 ))',
    `rj=$(base64 -w0 ${POD_PATHS.logs}/verifier/reward.json 2>/dev/null || true)`,
    `rt=$(base64 -w0 ${POD_PATHS.logs}/verifier/reward.txt 2>/dev/null || true)`,
    `printf '\\n${RESULT_MARKER}{"agent_exit":%s,"agent_ms":%s,"verifier_exit":%s,"verifier_ms":%s,"session_key_absent":%s,"reward_json":"%s","reward_txt":"%s"}\\n' "$agent_exit" "$agent_ms" "$verifier_exit" "$verifier_ms" "$key_absent" "$rj" "$rt"`,
    'exit 0',
  ];
  return lines.join('\n');
}

export const PodResultSchema = z
  .object({
    agent_exit: z.number().int(),
    agent_ms: z.number(),
    verifier_exit: z.number().int(),
    verifier_ms: z.number(),
    session_key_absent: z.boolean(),
    reward_json: z.string(),
    reward_txt: z.string(),
  })
  .strict();
export type PodResult = z.infer<typeof PodResultSchema>;

/** The last result line of a pod's log, or undefined when the entry script never got there. */
export function parsePodResult(log: string): PodResult | undefined {
  const lines = log.split('\n').filter((l) => l.startsWith(RESULT_MARKER));
  const last = lines.at(-1);
  if (!last) return undefined;
  try {
    return PodResultSchema.parse(JSON.parse(last.slice(RESULT_MARKER.length)));
  } catch {
    return undefined;
  }
}

export function rolloutLabels(i: Pick<RolloutJobInput, 'batchId' | 'groupId' | 'rolloutId' | 'task' | 'harness' | 'attempt'>): Record<string, string> {
  return {
    [LABELS.managedBy]: 'harness-lab',
    [LABELS.batch]: labelValue(i.batchId),
    [LABELS.group]: labelValue(i.groupId),
    [LABELS.rollout]: labelValue(i.rolloutId),
    [LABELS.task]: labelValue(i.task.name),
    [LABELS.harness]: labelValue(i.harness),
    [LABELS.attempt]: String(i.attempt),
    [LABELS.role]: 'rollout',
  };
}

export function rolloutJob(input: RolloutJobInput): KubernetesObject & Record<string, unknown> {
  const labels = rolloutLabels(input);
  const volumes: Record<string, unknown>[] = [{ name: 'task-tests', configMap: { name: testsConfigMapName(input.batchId, input.task.name), items: undefined } }];
  const mounts: Record<string, unknown>[] = [{ name: 'task-tests', mountPath: POD_PATHS.testsSource, readOnly: true }];
  const h = input.harnessFrom;
  if (h.kind === 'hostPath') {
    volumes.push({ name: 'node-binary', hostPath: { path: h.nodeBinary, type: 'File' } }, { name: 'harness-cache', hostPath: { path: h.harnessCache, type: 'DirectoryOrCreate' } });
    mounts.push({ name: 'node-binary', mountPath: `${POD_PATHS.binDir}/node`, readOnly: true }, { name: 'harness-cache', mountPath: POD_PATHS.harnesses, readOnly: true });
    if (h.reactScript) {
      volumes.push({ name: 'react-harness', hostPath: { path: h.reactScript, type: 'File' } });
      mounts.push({ name: 'react-harness', mountPath: `${POD_PATHS.binDir}/react-harness.js`, readOnly: true });
    }
  }
  for (const v of volumes) if (v.configMap) delete (v.configMap as Record<string, unknown>).items;
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: {
      name: jobName(input.batchId, input.rolloutId, input.attempt),
      namespace: input.namespace,
      labels: { ...labels, ...(input.queueName ? { [LABELS.queue]: input.queueName } : {}) },
      annotations: { 'harness-lab/task-name': input.task.fullName, 'harness-lab/session': input.sessionId, 'harness-lab/rollout-id': input.rolloutId },
    },
    spec: {
      backoffLimit: 0,
      activeDeadlineSeconds: jobDeadlineSec(input),
      ttlSecondsAfterFinished: input.ttlSecondsAfterFinished ?? 3600,
      // Kueue admits a queued Job by unsuspending it; without a queue the Job starts at once.
      ...(input.queueName ? { suspend: true } : {}),
      podFailurePolicy: {
        rules: [
          // Node drain, preemption, eviction: not the rollout's fault, and not counted against backoffLimit.
          { action: 'Ignore', onPodConditions: [{ type: 'DisruptionTarget', status: 'True' }] },
          { action: 'FailJob', onExitCodes: { containerName: 'rollout', operator: 'In', values: [INFRA_EXIT_CODE] } },
        ],
      },
      template: {
        metadata: { labels, annotations: { 'harness-lab/session': input.sessionId } },
        spec: {
          restartPolicy: 'Never',
          automountServiceAccountToken: false,
          enableServiceLinks: false,
          terminationGracePeriodSeconds: 10,
          containers: [
            {
              name: 'rollout',
              image: input.image,
              command: ['bash', '-c', entryScript(input)],
              env: Object.entries(input.taskEnv).map(([name, value]) => ({ name, value })),
              resources: taskResources(input.task),
              volumeMounts: mounts,
              terminationMessagePolicy: 'FallbackToLogsOnError',
            },
          ],
          volumes,
        },
      },
    },
  };
}

/** tests/ as a ConfigMap (binaryData; keys are indices, items map them back to paths). */
export function testsConfigMap(namespace: string, batchId: string, task: HarborTask): KubernetesObject & Record<string, unknown> {
  const files: string[] = [];
  const walk = (d: string) => {
    for (const n of readdirSync(d).sort()) {
      const p = join(d, n);
      if (statSync(p).isDirectory()) walk(p);
      else files.push(p);
    }
  };
  walk(task.testsDir);
  const binaryData: Record<string, string> = {};
  let size = 0;
  const items = files.map((f, i) => {
    const data = readFileSync(f);
    size += data.length;
    binaryData[`f${i}`] = data.toString('base64');
    return { key: `f${i}`, path: relative(task.testsDir, f) };
  });
  if (size > CONFIGMAP_LIMIT) throw new ClusterError(`${task.name}/tests: ${Math.round(size / 1024)} KiB is too large for a ConfigMap (limit about 1 MiB); bake tests/ into the task image for cluster batches`);
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: testsConfigMapName(batchId, task.name), namespace, labels: { [LABELS.managedBy]: 'harness-lab', [LABELS.batch]: labelValue(batchId), [LABELS.task]: labelValue(task.name) }, annotations: { 'harness-lab/items': JSON.stringify(items) } },
    binaryData,
  };
}

/** The ConfigMap's items, for the Job's volume (set after the ConfigMap is built). */
export function withTestItems(job: Record<string, unknown>, configMap: Record<string, unknown>): void {
  const items = JSON.parse(((configMap.metadata as { annotations: Record<string, string> }).annotations)['harness-lab/items']!) as { key: string; path: string }[];
  const spec = (job.spec as { template: { spec: { volumes: { name: string; configMap?: Record<string, unknown> }[] } } }).template.spec;
  const v = spec.volumes.find((x) => x.name === 'task-tests')!;
  v.configMap = { ...v.configMap, items, defaultMode: 0o755 };
}

export interface ProxyInput {
  namespace: string;
  batchId: string;
  /** Image with harness-lab in it (real clusters: pushed to --registry). */
  image: string;
  /** How to start `harness-lab` in that image (default ["harness-lab"]). */
  command?: string[];
  engineUrl: string;
  model: string;
  adminKey: string;
  /** The engine's credential, kept in the Secret and given to the proxy as HARNESS_LAB_ENGINE_API_KEY. */
  engineApiKey?: string;
  maxModelCalls?: number;
  /** Extra volumes (hostPath of a local build, for the test double). */
  volumes?: { name: string; hostPath: string; mountPath: string }[];
  cpu?: string;
  memory?: string;
}

/** The Service's names rollout pods reach the proxy by: the proxy refuses any other Host (request-guard.ts). */
function serviceHostFlags(name: string, namespace: string): string[] {
  return [name, `${name}.${namespace}`, `${name}.${namespace}.svc`, `${name}.${namespace}.svc.cluster.local`].flatMap((host) => ['--allowed-host', host]);
}

export function proxyManifests(input: ProxyInput): (KubernetesObject & Record<string, unknown>)[] {
  const name = proxyName(input.batchId);
  const batch = labelValue(input.batchId);
  const podLabels = { [LABELS.name]: 'harness-lab-proxy', [LABELS.batch]: batch, [LABELS.role]: 'proxy' };
  const labels = { ...podLabels, [LABELS.managedBy]: 'harness-lab' };
  const res = { cpu: input.cpu ?? '1', memory: input.memory ?? '1Gi' };
  return [
    { apiVersion: 'v1', kind: 'Secret', metadata: { name, namespace: input.namespace, labels }, type: 'Opaque', stringData: { 'admin-key': input.adminKey, ...(input.engineApiKey ? { 'engine-api-key': input.engineApiKey } : {}) } },
    {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name, namespace: input.namespace, labels },
      spec: {
        replicas: 1,
        selector: { matchLabels: podLabels },
        template: {
          metadata: { labels: podLabels },
          spec: {
            automountServiceAccountToken: false,
            enableServiceLinks: false,
            containers: [
              {
                name: 'proxy',
                image: input.image,
                command: [...(input.command ?? ['harness-lab']), 'proxy', '--engine-url', input.engineUrl, '--model', input.model, '--host', '0.0.0.0', '--port', String(PROXY_PORT), ...serviceHostFlags(name, input.namespace), '--data-dir', '/var/lib/harness-lab/capture', ...(input.maxModelCalls ? ['--max-model-calls', String(input.maxModelCalls)] : [])],
                env: [
                  { name: 'HARNESS_LAB_ADMIN_KEY', valueFrom: { secretKeyRef: { name, key: 'admin-key' } } },
                  ...(input.engineApiKey ? [{ name: 'HARNESS_LAB_ENGINE_API_KEY', valueFrom: { secretKeyRef: { name, key: 'engine-api-key' } } }] : []),
                ],
                ports: [{ name: 'http', containerPort: PROXY_PORT, protocol: 'TCP' }],
                readinessProbe: { httpGet: { path: '/health', port: PROXY_PORT }, periodSeconds: 5 },
                resources: { requests: res, limits: res },
                volumeMounts: [{ name: 'capture', mountPath: '/var/lib/harness-lab/capture' }, ...(input.volumes ?? []).map((v) => ({ name: v.name, mountPath: v.mountPath, readOnly: true }))],
              },
            ],
            volumes: [{ name: 'capture', emptyDir: {} }, ...(input.volumes ?? []).map((v) => ({ name: v.name, hostPath: { path: v.hostPath } }))],
          },
        },
      },
    },
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name, namespace: input.namespace, labels },
      spec: { selector: podLabels, ports: [{ name: 'http', port: PROXY_PORT, targetPort: PROXY_PORT, protocol: 'TCP' }] },
    },
    {
      apiVersion: 'networking.k8s.io/v1',
      kind: 'NetworkPolicy',
      metadata: { name: dnsLabel(`hl-rollouts-${input.batchId}`, 60), namespace: input.namespace, labels },
      spec: {
        podSelector: { matchLabels: { [LABELS.batch]: batch, [LABELS.role]: 'rollout' } },
        policyTypes: ['Ingress', 'Egress'],
        ingress: [],
        egress: [
          { to: [{ podSelector: { matchLabels: podLabels } }], ports: [{ protocol: 'TCP', port: PROXY_PORT }] },
          { to: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'kube-system' } }, podSelector: { matchLabels: { 'k8s-app': 'kube-dns' } } }], ports: [{ protocol: 'UDP', port: 53 }, { protocol: 'TCP', port: 53 }] },
        ],
      },
    },
  ];
}

/** The proxy's URL as rollout pods see it (cluster DNS). */
export const inClusterProxyUrl = (namespace: string, batchId: string): string => `http://${proxyName(batchId)}.${namespace}.svc:${PROXY_PORT}`;

type ModelClass = new (data: never) => { validate(): void };

async function modelFor(apiVersion: string, kind: string): Promise<ModelClass | undefined> {
  const mods: Record<string, () => Promise<Record<string, unknown>>> = {
    'batch/v1': () => import('kubernetes-models/batch/v1'),
    v1: () => import('kubernetes-models/v1'),
    'apps/v1': () => import('kubernetes-models/apps/v1'),
    'networking.k8s.io/v1': () => import('kubernetes-models/networking.k8s.io/v1'),
  };
  const load = mods[apiVersion];
  return load ? ((await load())[kind] as ModelClass | undefined) : undefined;
}

/** Validates each manifest against the Kubernetes OpenAPI schema; the error names the object and the field. */
export async function validateManifests(objs: KubernetesObject[]): Promise<void> {
  for (const o of objs) {
    const Model = await modelFor(o.apiVersion ?? '', o.kind ?? '');
    const id = `${o.kind} ${o.metadata?.namespace ? `${o.metadata.namespace}/` : ''}${o.metadata?.name}`;
    if (!Model) throw new ClusterError(`${id}: no schema to validate ${o.apiVersion} ${o.kind} against`);
    try {
      new Model(o as never).validate();
    } catch (err) {
      const errors = (err as { errors?: { instancePath?: string; message?: string }[] }).errors;
      const detail = errors?.length ? errors.map((e) => `${e.instancePath || '/'} ${e.message}`).join('; ') : (err as Error).message;
      throw new ClusterError(`${id} is not a valid manifest: ${detail}`);
    }
  }
}

/** `-o json` (one v1 List, as `kubectl create --dry-run=client -o json` prints several objects) or `-o yaml` (documents separated by ---). */
export function formatManifests(objs: KubernetesObject[], format: 'json' | 'yaml'): string {
  if (format === 'json') return `${JSON.stringify({ apiVersion: 'v1', kind: 'List', metadata: {}, items: objs }, null, 2)}\n`;
  return objs.map((o) => dumpYaml(o, { noRefs: true, lineWidth: -1 })).join('---\n');
}
