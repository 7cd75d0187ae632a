// A rollout attempt as a Kubernetes Job: the batch's tasks loaded with their tests ConfigMaps, one
// attempt's Job manifest built from the harness's launch plan, and what a Job, its pod and the pod's
// log say about how the attempt ended (read from the batch's watches; never exec from the laptop).
import type * as k8s from '@kubernetes/client-node';
import { ClusterError, type ClusterTarget } from '../../../cluster/kube.js';
import {
  POD_PATHS,
  PHASE_MARKER,
  SESSION_KEY_PLACEHOLDER,
  inClusterProxyUrl,
  podWorkdir,
  rolloutJob,
  testsConfigMap,
  withTestItems,
  type HarnessSource,
} from '../../../cluster/manifests.js';
import { harnessEntry, launchPlan } from '../../../harness/registry.js';
import { parseRewardJson, parseRewardTxt, type Reward } from '../../../sandbox/reward.js';
import { loadTask, resolveEnvTemplate, type HarborTask } from '../../../tasks/task.js';
import type { BatchManifest } from '../../state.js';
import { clusterImage } from './images.js';

/** What building a rollout's Job needs beyond the manifest. */
export interface JobOptions {
  /** The image each task's pods run (the local task image tag; prefixed with the manifest's registry). */
  taskImage: (task: HarborTask) => string;
  harnessFrom?: HarnessSource;
  startupSlackSec?: number;
  ttlSecondsAfterFinished?: number;
}

export function target(manifest: BatchManifest, kubeconfig?: string): ClusterTarget & { namespace: string } {
  if (!manifest.k8s) throw new ClusterError(`batch ${manifest.batch_id} has no k8s target (backend ${manifest.backend})`);
  return { ...(kubeconfig ? { kubeconfig } : {}), context: manifest.k8s.context, namespace: manifest.k8s.namespace };
}

export function engineAndModel(manifest: BatchManifest): { engineUrl: string; model: string } {
  if (!manifest.engine_url)
    throw new ClusterError(
      'a cluster batch needs --engine-url: an inference engine the in-cluster proxy can reach (the embedded engine runs only on this machine)',
    );
  if (!manifest.model) throw new ClusterError('a cluster batch needs --model: the model name the in-cluster proxy serves');
  return { engineUrl: manifest.engine_url, model: manifest.model };
}

export interface Prepared {
  tasks: Map<string, HarborTask>;
  configMaps: Map<string, k8s.KubernetesObject & Record<string, unknown>>;
}

export function prepareTasks(manifest: BatchManifest, namespace: string): Prepared {
  const tasks = new Map<string, HarborTask>();
  const configMaps = new Map<string, k8s.KubernetesObject & Record<string, unknown>>();
  for (const ref of manifest.tasks) {
    const task = loadTask(ref.dir);
    tasks.set(ref.name, task);
    configMaps.set(ref.name, testsConfigMap(namespace, manifest.batch_id, task));
  }
  return { tasks, configMaps };
}

export function buildJob(
  opts: JobOptions,
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

export type Outcome =
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

export function podOutcome(pod: k8s.V1Pod): Outcome | undefined {
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

export function finishedCondition(job: k8s.V1Job): k8s.V1JobCondition | undefined {
  return (job.status?.conditions ?? []).find((c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True');
}

export function rewardOf(json: string, txt: string): Reward | null {
  try {
    if (json) return parseRewardJson(Buffer.from(json, 'base64').toString('utf8'));
    if (txt) return parseRewardTxt(Buffer.from(txt, 'base64').toString('utf8'));
  } catch {
    return null;
  }
  return null;
}

/** Splits a pod log at the entry script's phase markers into the agent's and the verifier's output. */
export function splitLog(log: string): { agent: string; verifier: string } {
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
