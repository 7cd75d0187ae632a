// What a training run's pods say that its object does not: why a pod waits (an image that cannot be
// pulled, a pod the scheduler cannot place, a container still being created), read from the pods'
// status, so a run stuck in ImagePullBackOff is shown as waiting with that reason instead of
// "Running"; and the run's log read once (for its curves). Pods are read with one list per namespace.
import { Writable } from 'node:stream';
import type * as k8s from '@kubernetes/client-node';
import { clusterError, type Cluster } from '../cluster/kube.js';
import { RUN_LABEL, streamRunLogs, type RunKind, type RunPhase } from './trainer-jobs.js';

export interface PodWaiting {
  pod: string;
  /** ImagePullBackOff, ErrImagePull, Unschedulable, ContainerCreating, Pending, ... */
  reason: string;
  message: string;
  /** True for a reason that will not clear by itself (a bad image, a pod that cannot be scheduled). */
  stuck: boolean;
}

const STUCK = new Set([
  'ImagePullBackOff',
  'ErrImagePull',
  'InvalidImageName',
  'ErrImageNeverPull',
  'CreateContainerConfigError',
  'CreateContainerError',
  'CrashLoopBackOff',
  'Unschedulable',
]);

/**
 * Why the run's pods are not running yet, most telling first (a stuck reason before a transient one);
 * null when a pod runs or has ended, or there is no pod.
 */
export function podWaiting(pods: k8s.V1Pod[]): PodWaiting | null {
  const found: PodWaiting[] = [];
  for (const p of pods) {
    const name = p.metadata?.name ?? '?';
    const phase = p.status?.phase ?? 'Pending';
    const statuses = [...(p.status?.initContainerStatuses ?? []), ...(p.status?.containerStatuses ?? [])];
    if (phase === 'Running' && statuses.some((c) => c.state?.running)) return null;
    if (phase === 'Succeeded' || phase === 'Failed') continue;
    const waiting =
      statuses.find((c) => c.state?.waiting?.reason && STUCK.has(c.state.waiting.reason)) ?? statuses.find((c) => c.state?.waiting?.reason);
    if (waiting?.state?.waiting?.reason) {
      const w = waiting.state.waiting;
      found.push({ pod: name, reason: w.reason!, message: w.message ?? '', stuck: STUCK.has(w.reason!) });
      continue;
    }
    const unscheduled = (p.status?.conditions ?? []).find((c) => c.type === 'PodScheduled' && c.status === 'False');
    if (unscheduled) {
      found.push({
        pod: name,
        reason: unscheduled.reason ?? 'Unschedulable',
        message: unscheduled.message ?? '',
        stuck: (unscheduled.reason ?? 'Unschedulable') === 'Unschedulable',
      });
      continue;
    }
    if (phase === 'Pending') found.push({ pod: name, reason: 'Pending', message: p.status?.message ?? '', stuck: false });
  }
  return found.sort((a, b) => Number(b.stuck) - Number(a.stuck))[0] ?? null;
}

/** The phase and detail to show: a run whose pods wait is Pending, with the reason as its detail. */
export function shownPhase(phase: RunPhase, detail: string, waiting: PodWaiting | null): { phase: RunPhase; detail: string } {
  if (!waiting || (phase !== 'Running' && phase !== 'Pending')) return { phase, detail };
  return { phase: 'Pending', detail: `${waiting.reason}${waiting.message ? `: ${waiting.message}` : ''} (pod ${waiting.pod})` };
}

/** Pods of every harness-lab run in the namespace, by run name (one list call). */
export async function listRunPods(cluster: Cluster): Promise<Map<string, k8s.V1Pod[]>> {
  let items: k8s.V1Pod[];
  try {
    items = (await cluster.core.listNamespacedPod({ namespace: cluster.namespace, labelSelector: RUN_LABEL })).items;
  } catch (err) {
    throw clusterError(cluster, `listing the pods of training runs in ${cluster.namespace}`, err);
  }
  const out = new Map<string, k8s.V1Pod[]>();
  for (const p of items) {
    const run = p.metadata?.labels?.[RUN_LABEL];
    if (run) out.set(run, [...(out.get(run) ?? []), p]);
  }
  return out;
}

/** The run's main pod's log as it is now (no follow); empty when no pod has started. */
export async function readRunLog(
  cluster: Cluster,
  kind: RunKind,
  name: string,
  signal?: AbortSignal,
): Promise<{ pod: string | null; text: string }> {
  const chunks: Buffer[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      chunks.push(Buffer.from(chunk));
      done();
    },
  });
  try {
    const { pod } = await streamRunLogs(cluster, kind, name, sink, { follow: false, ...(signal ? { signal } : {}) });
    return { pod, text: Buffer.concat(chunks).toString('utf8') };
  } catch (err) {
    if (/has no started pod/.test((err as Error).message)) return { pod: null, text: '' };
    throw err;
  }
}
