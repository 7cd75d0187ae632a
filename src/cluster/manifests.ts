// Every manifest a cluster batch applies, built as plain objects and validated with
// kubernetes-models (the OpenAPI schemas) before anything is sent: one batch/v1 Job per rollout
// attempt (with a tests sidecar: the agent never sees tests/) and its Secret (the session key), a
// ConfigMap with each task's tests/, and the in-cluster capture proxy (Secret with the admin key,
// a PersistentVolumeClaim for its store, Deployment, Service, a NetworkPolicy so rollout pods reach
// only the proxy and one so only rollout pods reach it). Rollout pods meet Pod Security "baseline",
// the proxy "restricted".
import { createHash } from 'node:crypto';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { dumpYaml, type KubernetesObject, type V1PodSecurityContext } from '@kubernetes/client-node';
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
  /**
   * The training run whose rollout server made the object (`serve --run`): `train cancel` removes
   * what a server killed before its own cleanup left (src/cluster/sweep.ts).
   */
  ownerRun: 'harness-lab/owner-run',
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
  let v = s
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/^-+|-+$/g, '');
  if (v.length > max) v = `${v.slice(0, max - 9).replace(/-+$/, '')}-${createHash('sha256').update(s).digest('hex').slice(0, 8)}`;
  return v || 'x';
}

export const jobName = (batchId: string, rolloutId: string, attempt: number): string =>
  dnsLabel(`hl-${batchId.slice(0, 12)}-${rolloutId}-a${attempt}`);
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
  task: HarborTask;
  harness: string;
  image: string;
  /**
   * The harness's bash script, environment and config files (registry.launchPlan) for in-pod paths,
   * made with SESSION_KEY_PLACEHOLDER as the session key: the pod puts the real key (from the
   * attempt's Secret, env HL_SESSION_KEY) in their place, so no key is in the Job's spec.
   */
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

/** Stands for the session key in everything the lab sends to the cluster; the pod replaces it. */
export const SESSION_KEY_PLACEHOLDER = 'HLSESSIONKEYPLACEHOLDER0';
/** The env var (from the attempt's Secret) that carries the session key into the rollout container. */
export const SESSION_KEY_ENV = 'HL_SESSION_KEY';
/** The key inside an attempt's Secret. */
export const SESSION_KEY_FIELD = 'session-key';

export const POD_PATHS = {
  home: '/tmp/harness-home',
  logs: '/logs',
  tests: '/tests',
  testsSource: '/opt/harness-lab/task-tests',
  handoff: '/opt/harness-lab/handoff',
  binDir: '/opt/harness-lab/bin',
  harnesses: '/opt/harness-lab/harnesses',
} as const;
/** The tests sidecar's user: not root, not the agent, so nothing of the agent's can act as it. */
export const TESTS_SIDECAR_UID = 65532;

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

/** The attempt's Secret (the session key the harness presents), named after its Job. */
export const attemptSecretName = (job: string): string => `${job}-key`;

const b64 = (s: string | Buffer) => Buffer.from(s).toString('base64');

/**
 * The tests sidecar (a native sidecar: an init container with restartPolicy Always, so it starts
 * before the rollout container and is stopped when it ends). It alone mounts the tests. At start it
 * writes a one-time token into the shared handoff volume; the entry script takes it (and removes it)
 * before the agent starts, so the agent never sees it. The tests are copied into the handoff only
 * when the token comes back, which the entry script does after the agent and every process it left
 * were killed. A wrong token is counted (the agent tried) and never answered; a restarted sidecar
 * never issues a second token.
 */
export function testsSidecarScript(): string {
  const h = POD_PATHS.handoff;
  return [
    'set -u',
    'umask 022',
    `H=${h}`,
    // Restarted (kubelet restarts a native sidecar): the token is gone with the old process; never issue another.
    'if [ -e "$H/.issued" ]; then exec sleep infinity; fi',
    'tok=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d " \\n")',
    ': > "$H/.issued"',
    'printf "%s" "$tok" > "$H/.token.tmp" && mv -f "$H/.token.tmp" "$H/token"',
    'while [ -e "$H/token" ]; do sleep 0.1; done',
    'tries=0',
    'while :; do',
    '  if [ -s "$H/release" ]; then',
    '    r=$(cat "$H/release"); rm -f "$H/release"',
    '    if [ "$r" = "$tok" ]; then',
    `      rm -rf "$H/tests" && mkdir "$H/tests" && cp -rL ${POD_PATHS.testsSource}/. "$H/tests/" && chmod -R a+rX "$H/tests" || exit 1`,
    '      printf "%s" "$tries" > "$H/.delivered.tmp" && mv -f "$H/.delivered.tmp" "$H/delivered"',
    '      exec sleep infinity',
    '    fi',
    '    tries=$((tries + 1))',
    '  fi',
    '  sleep 0.2',
    'done',
  ].join('\n');
}

/**
 * The pod's entry script: the session key from the attempt's Secret put into the harness's
 * environment and files, the tests token taken from the sidecar, the harness (bounded by its own
 * timeout for --on-timeout keep; its processes without capabilities the script keeps, so they can
 * neither read this script's memory nor its environment), every leftover process killed, the tests
 * fetched from the sidecar with the token, the verifier with a clean environment (no session key),
 * then one result line on stdout that the lab reads back through the pods/log API.
 */
export function entryScript(input: RolloutJobInput): string {
  const workdir = podWorkdir(input.task);
  const agentLog = `${POD_PATHS.logs}/agent/${input.launch.nativeLog}`;
  const verifierLog = `${POD_PATHS.logs}/verifier/test-stdout.txt`;
  const h = POD_PATHS.handoff;
  const agentEnv = Object.entries(input.launch.env).map(([k, v]) => `${k}=${v}`);
  const asUser = (user: string | undefined, cmd: string) => (user ? `runuser -u ${shellQuote(user)} -- ${cmd}` : cmd);
  const verifierEnv = [
    'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    `HOME=${POD_PATHS.home}`,
    ...Object.entries({ ...input.taskEnv, ...input.verifierEnv }).map(([k, v]) => `${k}=${v}`),
  ];
  const agentPath = `${POD_PATHS.binDir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`;
  const agentEnvArgs = agentEnv.map(shellQuote).join(' ');
  const agentShell = `env PATH=${agentPath} HOME=${POD_PATHS.home} ${agentEnvArgs} bash -c ${shellQuote(input.launch.script)}`;
  const agentTimeout = input.agentTimeoutInPod ? `timeout -k 30 ${input.timeoutSec} ` : '';
  const agentCmd = `${agentTimeout}$drop ${asUser(input.task.agentUser, agentShell)}`;
  const lines = [
    'set -u',
    'ms() { echo $(( $(date +%s%N) / 1000000 )); }',
    `k="\${${SESSION_KEY_ENV}:-}"`,
    `case "$k" in ''|*[!A-Za-z0-9_-]*) echo 'the session key (Secret env ${SESSION_KEY_ENV}) is missing or malformed' >&2; exit ${INFRA_EXIT_CODE} ;; esac`,
    `mkdir -p ${shellQuote(workdir)} ${POD_PATHS.home} ${POD_PATHS.logs}/agent ${POD_PATHS.logs}/verifier ${POD_PATHS.logs}/artifacts || exit ${INFRA_EXIT_CODE}`,
    `chmod 1777 ${POD_PATHS.home} ${POD_PATHS.logs}/agent ${POD_PATHS.logs}/verifier ${POD_PATHS.logs}/artifacts`,
    ...input.launch.files.map(
      (f) =>
        `mkdir -p ${shellQuote(f.path.replace(/\/[^/]*$/, '') || '/')} && printf '%s' '${b64(f.content)}' | ` +
        `base64 -d | sed "s|${SESSION_KEY_PLACEHOLDER}|$k|g" > ${shellQuote(f.path)} || exit ${INFRA_EXIT_CODE}`,
    ),
    ...(input.task.agentUser && input.launch.files.length ? [`chown -R ${shellQuote(input.task.agentUser)} ${POD_PATHS.home}`] : []),
    // The tests token: taken (and removed) before the agent exists, held only in this shell's memory.
    `for _ in $(seq 600); do [ -s ${h}/token ] && break; sleep 0.1; done`,
    `tests_token=$(cat ${h}/token 2>/dev/null); rm -f ${h}/token`,
    `[ -n "$tests_token" ] || { echo 'the tests sidecar issued no token' >&2; exit ${INFRA_EXIT_CODE}; }`,
    // The agent's processes lose capabilities this script keeps (kill, setpcap): the kernel then refuses
    // them ptrace and /proc/<pid>/{mem,environ} of this script even as root.
    "drop=''; if command -v setpriv >/dev/null 2>&1 && setpriv --bounding-set -kill,-setpcap true 2>/dev/null; " +
      "then drop='setpriv --bounding-set -kill,-setpcap --'; isolated=true; else isolated=false; fi",
    `agent_cmd=${shellQuote(agentCmd)}`,
    `agent_cmd="\${agent_cmd//${SESSION_KEY_PLACEHOLDER}/"$k"}"`,
    `echo ${shellQuote(`${PHASE_MARKER}agent`)}`,
    't0=$(ms)',
    `cd ${shellQuote(workdir)} && eval "$agent_cmd" 2>&1 | tee ${shellQuote(agentLog)}`,
    'agent_exit=${PIPESTATUS[0]}',
    'agent_ms=$(( $(ms) - t0 ))',
    // The agent phase ends here: nothing it started survives to see the tests arrive.
    'kill -9 -1 2>/dev/null; sleep 0.3; kill -9 -1 2>/dev/null',
    `echo ${shellQuote(`${PHASE_MARKER}verifier`)}`,
    `rm -rf ${h}/tests ${h}/delivered`,
    `printf '%s' "$tests_token" > ${h}/release; unset tests_token`,
    `for _ in $(seq 300); do [ -e ${h}/delivered ] && break; sleep 0.1; done`,
    `tries=$(cat ${h}/delivered 2>/dev/null || echo -1)`,
    `case "$tries" in ''|*[!0-9-]*) tries=-1 ;; esac`,
    `mkdir -p ${POD_PATHS.tests} && cp -r ${h}/tests/. ${POD_PATHS.tests}/ 2>/dev/null || tries=-1`,
    'probe=$(env -i ' + verifierEnv.map(shellQuote).join(' ') + ' env)',
    'case "$probe" in *"$k"*) key_absent=false ;; *) key_absent=true ;; esac',
    't1=$(ms)',
    `if [ "$tries" -ge 0 ]; then cd ${shellQuote(workdir)} && timeout -k 10 ${input.task.verifierTimeoutSec} ` +
      `${asUser(input.task.verifierUser, `env -i ${verifierEnv.map(shellQuote).join(' ')} bash ${POD_PATHS.tests}/test.sh`)} ` +
      `2>&1 | tee ${shellQuote(verifierLog)}; verifier_exit=\${PIPESTATUS[0]}; else verifier_exit=-1; fi`,
    'verifier_ms=$(( $(ms) - t1 ))',
    `rj=$(base64 -w0 ${POD_PATHS.logs}/verifier/reward.json 2>/dev/null || true)`,
    `rt=$(base64 -w0 ${POD_PATHS.logs}/verifier/reward.txt 2>/dev/null || true)`,
    `printf '\\n${RESULT_MARKER}{"agent_exit":%s,"agent_ms":%s,"verifier_exit":%s,"verifier_ms":%s,` +
      `"session_key_absent":%s,"tests_requests_refused":%s,"agent_isolated":%s,"reward_json":"%s","reward_txt":"%s"}\\n' ` +
      `"$agent_exit" "$agent_ms" "$verifier_exit" "$verifier_ms" "$key_absent" "$tries" "$isolated" "$rj" "$rt"`,
    'exit 0',
  ];
  return lines.join('\n');
}

export const PodResultSchema = z
  .object({
    agent_exit: z.number().int(),
    agent_ms: z.number(),
    /** -1: the verifier did not run (the tests never arrived). */
    verifier_exit: z.number().int(),
    verifier_ms: z.number(),
    session_key_absent: z.boolean(),
    /** Wrong tokens the tests sidecar refused during the agent's turn; -1: the tests never arrived. */
    tests_requests_refused: z.number().int(),
    /** The agent ran without the capabilities the entry script keeps (setpriv was there). */
    agent_isolated: z.boolean(),
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

export function rolloutLabels(
  i: Pick<RolloutJobInput, 'batchId' | 'groupId' | 'rolloutId' | 'task' | 'harness' | 'attempt'>,
): Record<string, string> {
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

/**
 * Pod Security "baseline" for the rollout container: no privilege escalation (no_new_privs), the
 * runtime's seccomp profile, and only the capabilities the entry script needs (chown/setuid/setgid for
 * the task's agent and verifier users, kill for the agent's leftovers, setpcap to drop capabilities
 * from the agent); NET_RAW, MKNOD and SETFCAP are gone. It runs as the image's user (tasks are root
 * images), which "restricted" would refuse.
 */
export const ROLLOUT_SECURITY_CONTEXT = {
  allowPrivilegeEscalation: false,
  privileged: false,
  seccompProfile: { type: 'RuntimeDefault' },
  capabilities: {
    drop: ['ALL'],
    add: [
      'CHOWN',
      'DAC_OVERRIDE',
      'FOWNER',
      'FSETID',
      'KILL',
      'SETGID',
      'SETUID',
      'SETPCAP',
      'NET_BIND_SERVICE',
      'SYS_CHROOT',
      'AUDIT_WRITE',
    ],
  },
} as const;

/** Pod Security "restricted": a non-root user, no capabilities at all, no escalation, RuntimeDefault seccomp. */
export const restrictedSecurityContext = (uid: number) => ({
  runAsNonRoot: true,
  runAsUser: uid,
  runAsGroup: uid,
  allowPrivilegeEscalation: false,
  privileged: false,
  readOnlyRootFilesystem: true,
  seccompProfile: { type: 'RuntimeDefault' },
  capabilities: { drop: ['ALL'] },
});

const SIDECAR_RESOURCES = { requests: { cpu: '50m', memory: '32Mi' }, limits: { cpu: '50m', memory: '32Mi' } };

export function rolloutJob(input: RolloutJobInput): KubernetesObject & Record<string, unknown> {
  const labels = rolloutLabels(input);
  const name = jobName(input.batchId, input.rolloutId, input.attempt);
  const volumes: Record<string, unknown>[] = [
    { name: 'task-tests', configMap: { name: testsConfigMapName(input.batchId, input.task.name) } },
    { name: 'tests-handoff', emptyDir: { sizeLimit: '64Mi' } },
  ];
  const mounts: Record<string, unknown>[] = [{ name: 'tests-handoff', mountPath: POD_PATHS.handoff }];
  const h = input.harnessFrom;
  if (h.kind === 'hostPath') {
    volumes.push(
      { name: 'node-binary', hostPath: { path: h.nodeBinary, type: 'File' } },
      { name: 'harness-cache', hostPath: { path: h.harnessCache, type: 'DirectoryOrCreate' } },
    );
    mounts.push(
      { name: 'node-binary', mountPath: `${POD_PATHS.binDir}/node`, readOnly: true },
      { name: 'harness-cache', mountPath: POD_PATHS.harnesses, readOnly: true },
    );
    if (h.reactScript) {
      volumes.push({ name: 'react-harness', hostPath: { path: h.reactScript, type: 'File' } });
      mounts.push({ name: 'react-harness', mountPath: `${POD_PATHS.binDir}/react-harness.js`, readOnly: true });
    }
  }
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: {
      name,
      namespace: input.namespace,
      labels: { ...labels, ...(input.queueName ? { [LABELS.queue]: input.queueName } : {}) },
      annotations: {
        'harness-lab/task-name': input.task.fullName,
        'harness-lab/session': input.sessionId,
        'harness-lab/rollout-id': input.rolloutId,
      },
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
          securityContext: { seccompProfile: { type: 'RuntimeDefault' } },
          initContainers: [
            {
              name: 'tests',
              image: input.image,
              restartPolicy: 'Always',
              command: ['bash', '-c', testsSidecarScript()],
              resources: SIDECAR_RESOURCES,
              securityContext: restrictedSecurityContext(TESTS_SIDECAR_UID),
              volumeMounts: [
                { name: 'task-tests', mountPath: POD_PATHS.testsSource, readOnly: true },
                { name: 'tests-handoff', mountPath: POD_PATHS.handoff },
              ],
            },
          ],
          containers: [
            {
              name: 'rollout',
              image: input.image,
              command: ['bash', '-c', entryScript(input)],
              env: [
                ...Object.entries(input.taskEnv).map(([n, value]) => ({ name: n, value })),
                { name: SESSION_KEY_ENV, valueFrom: { secretKeyRef: { name: attemptSecretName(name), key: SESSION_KEY_FIELD } } },
              ],
              resources: taskResources(input.task),
              securityContext: ROLLOUT_SECURITY_CONTEXT,
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

/**
 * An attempt's Secret: the session key its harness presents. Created before the Job, then owned by
 * it (ownerReferences, set once the Job has a uid), so the garbage collector removes it with the Job;
 * the lab deletes it itself as soon as the attempt ends.
 */
export function attemptSecret(job: KubernetesObject, key: string): KubernetesObject & Record<string, unknown> {
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: attemptSecretName(job.metadata!.name!), namespace: job.metadata!.namespace!, labels: { ...job.metadata!.labels } },
    type: 'Opaque',
    immutable: true,
    stringData: { [SESSION_KEY_FIELD]: key },
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
  if (size > CONFIGMAP_LIMIT)
    throw new ClusterError(
      `${task.name}/tests: ${Math.round(size / 1024)} KiB is too large for a ConfigMap (limit about 1 MiB); bake tests/ into the task image for cluster batches`,
    );
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: testsConfigMapName(batchId, task.name),
      namespace,
      labels: { [LABELS.managedBy]: 'harness-lab', [LABELS.batch]: labelValue(batchId), [LABELS.task]: labelValue(task.name) },
      annotations: { 'harness-lab/items': JSON.stringify(items) },
    },
    binaryData,
  };
}

/** The ConfigMap's items, for the Job's volume (set after the ConfigMap is built). */
export function withTestItems(job: Record<string, unknown>, configMap: Record<string, unknown>): void {
  const items = JSON.parse((configMap.metadata as { annotations: Record<string, string> }).annotations['harness-lab/items']!) as {
    key: string;
    path: string;
  }[];
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
  /** The capture store's claim (default 1Gi, the cluster's default StorageClass). */
  storage?: string;
  storageClassName?: string;
}

/** The Service's names rollout pods reach the proxy by: the proxy refuses any other Host (request-guard.ts). */
export function serviceHostFlags(name: string, namespace: string): string[] {
  return [name, `${name}.${namespace}`, `${name}.${namespace}.svc`, `${name}.${namespace}.svc.cluster.local`].flatMap((host) => [
    '--allowed-host',
    host,
  ]);
}
/** The proxy's user: the restricted profile wants a non-root one, and the image needs none of its own. */
export const PROXY_UID = 65532;
export const PROXY_DATA_DIR = '/var/lib/harness-lab/capture';
/** The proxy's capture store survives a pod restart on this claim (ReadWriteOnce: hence Recreate, never two pods). */
export const proxyClaimName = (batchId: string): string => `${proxyName(batchId)}-capture`;

export function proxyManifests(input: ProxyInput): (KubernetesObject & Record<string, unknown>)[] {
  const name = proxyName(input.batchId);
  const batch = labelValue(input.batchId);
  const podLabels = { [LABELS.name]: 'harness-lab-proxy', [LABELS.batch]: batch, [LABELS.role]: 'proxy' };
  const labels = { ...podLabels, [LABELS.managedBy]: 'harness-lab' };
  const res = { cpu: input.cpu ?? '1', memory: input.memory ?? '1Gi' };
  return [
    {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name, namespace: input.namespace, labels },
      type: 'Opaque',
      stringData: { 'admin-key': input.adminKey, ...(input.engineApiKey ? { 'engine-api-key': input.engineApiKey } : {}) },
    },
    stateClaim(proxyClaimName(input.batchId), input.namespace, labels, input.storage ?? '1Gi', input.storageClassName),
    {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name, namespace: input.namespace, labels },
      spec: {
        replicas: 1,
        // One writer on the claim at a time: the old pod is gone before the new one starts.
        strategy: { type: 'Recreate' },
        selector: { matchLabels: podLabels },
        template: {
          metadata: { labels: podLabels },
          spec: {
            automountServiceAccountToken: false,
            enableServiceLinks: false,
            securityContext: restrictedPodSecurityContext(PROXY_UID),
            containers: [
              {
                name: 'proxy',
                image: input.image,
                command: [
                  ...(input.command ?? ['harness-lab']),
                  'proxy',
                  '--engine-url',
                  input.engineUrl,
                  '--model',
                  input.model,
                  '--host',
                  '0.0.0.0',
                  '--port',
                  String(PROXY_PORT),
                  ...serviceHostFlags(name, input.namespace),
                  '--data-dir',
                  PROXY_DATA_DIR,
                  ...(input.maxModelCalls ? ['--max-model-calls', String(input.maxModelCalls)] : []),
                ],
                env: [
                  { name: 'HOME', value: '/tmp' },
                  { name: 'HARNESS_LAB_ADMIN_KEY', valueFrom: { secretKeyRef: { name, key: 'admin-key' } } },
                  ...(input.engineApiKey
                    ? [{ name: 'HARNESS_LAB_ENGINE_API_KEY', valueFrom: { secretKeyRef: { name, key: 'engine-api-key' } } }]
                    : []),
                ],
                ports: [{ name: 'http', containerPort: PROXY_PORT, protocol: 'TCP' }],
                readinessProbe: { httpGet: { path: '/health', port: PROXY_PORT }, periodSeconds: 5 },
                resources: { requests: res, limits: res },
                securityContext: restrictedSecurityContext(PROXY_UID),
                volumeMounts: [
                  { name: 'capture', mountPath: PROXY_DATA_DIR },
                  { name: 'tmp', mountPath: '/tmp' },
                  ...(input.volumes ?? []).map((v) => ({ name: v.name, mountPath: v.mountPath, readOnly: true })),
                ],
              },
            ],
            volumes: [
              { name: 'capture', persistentVolumeClaim: { claimName: proxyClaimName(input.batchId) } },
              { name: 'tmp', emptyDir: { sizeLimit: '256Mi' } },
              ...(input.volumes ?? []).map((v) => ({ name: v.name, hostPath: { path: v.hostPath } })),
            ],
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
          {
            to: [
              {
                namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'kube-system' } },
                podSelector: { matchLabels: { 'k8s-app': 'kube-dns' } },
              },
            ],
            ports: [
              { protocol: 'UDP', port: 53 },
              { protocol: 'TCP', port: 53 },
            ],
          },
        ],
      },
    },
    {
      // Only this batch's rollout pods reach the proxy (the lab's port-forward enters the pod's own
      // network namespace through the kubelet, which no NetworkPolicy filters).
      apiVersion: 'networking.k8s.io/v1',
      kind: 'NetworkPolicy',
      metadata: { name: dnsLabel(`hl-proxy-ingress-${input.batchId}`, 60), namespace: input.namespace, labels },
      spec: {
        podSelector: { matchLabels: podLabels },
        policyTypes: ['Ingress'],
        ingress: [
          {
            from: [{ podSelector: { matchLabels: { [LABELS.batch]: batch, [LABELS.role]: 'rollout' } } }],
            ports: [{ protocol: 'TCP', port: PROXY_PORT }],
          },
        ],
      },
    },
  ];
}

/** The proxy's URL as rollout pods see it (cluster DNS). */
export const inClusterProxyUrl = (namespace: string, batchId: string): string =>
  `http://${proxyName(batchId)}.${namespace}.svc:${PROXY_PORT}`;

type ModelClass = new (data: never) => { validate(): void };

async function modelFor(apiVersion: string, kind: string): Promise<ModelClass | undefined> {
  const mods: Record<string, () => Promise<Record<string, unknown>>> = {
    'batch/v1': () => import('kubernetes-models/batch/v1'),
    v1: () => import('kubernetes-models/v1'),
    'apps/v1': () => import('kubernetes-models/apps/v1'),
    'networking.k8s.io/v1': () => import('kubernetes-models/networking.k8s.io/v1'),
    'rbac.authorization.k8s.io/v1': () => import('kubernetes-models/rbac.authorization.k8s.io/v1'),
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

/** A ReadWriteOnce claim for one writer's state (the capture proxy's store, a rollout server's batches). */
export function stateClaim(
  name: string,
  namespace: string,
  labels: Record<string, string>,
  storage: string,
  storageClassName?: string,
): KubernetesObject & Record<string, unknown> {
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: { name, namespace, labels },
    spec: {
      accessModes: ['ReadWriteOnce'],
      resources: { requests: { storage } },
      ...(storageClassName ? { storageClassName } : {}),
    },
  };
}

/** Pod Security "restricted" at the pod level: one non-root uid owns the process and the volumes. */
export function restrictedPodSecurityContext(uid: number): V1PodSecurityContext {
  return { runAsNonRoot: true, runAsUser: uid, runAsGroup: uid, fsGroup: uid, seccompProfile: { type: 'RuntimeDefault' } };
}
