// The Training Runs tree without vscode: runs (from src/training/trainer-jobs listRuns) become nodes
// with trainer, phase and age; a cluster that cannot be listed becomes one node saying why.
import type { RunPhase, RunSummary } from '../training/trainer-jobs.js';

export interface TrainingRunNode {
  kind: 'run';
  id: string;
  name: string;
  label: string;
  description: string;
  tooltip: string;
  icon: string;
  phase: RunPhase;
  runKind: RunSummary['kind'];
  namespace: string;
  contextValue: 'harnessLab.trainingRun' | 'harnessLab.trainingRun.finished';
}

export interface TrainingRunsMessage {
  kind: 'message';
  id: string;
  label: string;
  tooltip: string;
  icon: string;
}

export type TrainingRunsNode = TrainingRunNode | TrainingRunsMessage;

/** "42s", "5m", "3h", "2d": kubectl's AGE column, coarse. */
export function age(created: string | undefined, now: number): string {
  if (!created) return '';
  const s = Math.max(0, Math.floor((now - Date.parse(created)) / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  if (s < 172_800) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86_400)}d`;
}

const ICONS: Record<RunPhase, string> = { Pending: 'clock', Running: 'sync~spin', Succeeded: 'pass', Failed: 'error', Stopped: 'circle-slash', Suspended: 'debug-pause', Unknown: 'question' };
const FINISHED: ReadonlySet<RunPhase> = new Set(['Succeeded', 'Failed', 'Stopped']);

export function runNodes(runs: RunSummary[], now: number, where: { context: string; namespace: string }): TrainingRunsNode[] {
  if (!runs.length) return [{ kind: 'message', id: 'none', label: `No training runs in ${where.namespace} (${where.context})`, tooltip: 'Start one with "Harness Lab: Start Training Run..." or `harness-lab train submit`.', icon: 'info' }];
  return runs.map((r) => ({
    kind: 'run',
    id: `${r.namespace}/${r.kind}/${r.name}`,
    name: r.name,
    label: r.name,
    description: [r.trainer, r.phase, age(r.created, now)].filter(Boolean).join(' · '),
    tooltip: `${r.kind} ${r.namespace}/${r.name}\ntrainer: ${r.trainer}\nphase: ${r.phase}${r.detail ? ` (${r.detail})` : ''}${r.created ? `\ncreated: ${r.created}` : ''}`,
    icon: ICONS[r.phase],
    phase: r.phase,
    runKind: r.kind,
    namespace: r.namespace,
    contextValue: FINISHED.has(r.phase) ? 'harnessLab.trainingRun.finished' : 'harnessLab.trainingRun',
  }));
}

export function errorNode(message: string): TrainingRunsMessage {
  return { kind: 'message', id: 'error', label: 'Cannot list training runs', tooltip: message, icon: 'warning' };
}

/** The status bar text while runs are followed: the one run, or a count with how many are running. */
export function statusText(active: { name: string; phase: RunPhase }[]): string | undefined {
  if (!active.length) return undefined;
  if (active.length === 1) return `$(${ICONS[active[0]!.phase].replace('~spin', '')}) ${active[0]!.name}: ${active[0]!.phase}`;
  return `$(sync) ${active.length} training runs (${active.filter((a) => a.phase === 'Running').length} running)`;
}
