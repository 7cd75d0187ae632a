// The Training Runs tree without vscode: runs (from src/training/trainer-jobs listRuns) become nodes
// with trainer, phase and age; a run whose pods wait (an image that cannot be pulled, a pod that
// cannot be scheduled) shows as Pending with that reason; a run that deployed its rollout server has
// it as a child row (its health and what it has done, from the same status `train status` prints);
// a cluster that cannot be listed becomes one node saying why.
import { readFileSync } from 'node:fs';
import { byClass, serverStatusLine, type ServerStatus } from '../training/run-lifecycle.js';
import { parseTrainConfig, type RunPhase, type RunSummary, type TrainConfig } from '../training/trainer-jobs.js';
import type { LocalExport } from './export-batch-model.js';
import { shownPhase, type PodWaiting } from '../training/trainer-pods.js';

export interface TrainingRunNode {
  kind: 'run';
  id: string;
  name: string;
  label: string;
  description: string;
  tooltip: string;
  icon: string;
  phase: RunPhase;
  /** Why the run's pods wait, when they do. */
  waiting: PodWaiting | null;
  runKind: RunSummary['kind'];
  namespace: string;
  contextValue: 'harnessLab.trainingRun' | 'harnessLab.trainingRun.finished';
  /** The rollout server the run deployed beside its trainer (shown as the run's child), when it has one. */
  server: TrainingRunServerNode | null;
}

export interface TrainingRunServerNode {
  kind: 'server';
  id: string;
  /** The run's name. */
  run: string;
  label: string;
  description: string;
  tooltip: string;
  icon: string;
  state: ServerStatus['health']['state'];
}

export interface TrainingRunsMessage {
  kind: 'message';
  id: string;
  label: string;
  tooltip: string;
  icon: string;
}

export type TrainingRunsNode = TrainingRunNode | TrainingRunServerNode | TrainingRunsMessage;

/** "42s", "5m12s", "30m", "3h", "2d": kubectl's AGE column (seconds shown while under 10 minutes, so it ticks). */
export function age(created: string | undefined, now: number): string {
  if (!created) return '';
  const s = Math.max(0, Math.floor((now - Date.parse(created)) / 1000));
  if (s < 120) return `${s}s`;
  if (s < 600) return `${Math.floor(s / 60)}m${s % 60}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  if (s < 172_800) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86_400)}d`;
}

const ICONS: Record<RunPhase, string> = {
  Pending: 'clock',
  Running: 'sync~spin',
  Succeeded: 'pass',
  Failed: 'error',
  Stopped: 'circle-slash',
  Suspended: 'debug-pause',
  Unknown: 'question',
};
const FINISHED: ReadonlySet<RunPhase> = new Set(['Succeeded', 'Failed', 'Stopped']);

export function runNodes(
  runs: RunSummary[],
  now: number,
  where: { context: string; namespace: string },
  waiting: ReadonlyMap<string, PodWaiting | null> = new Map(),
  dataSources: ReadonlyMap<string, string> = new Map(),
  servers: ReadonlyMap<string, ServerStatus> = new Map(),
): TrainingRunsNode[] {
  if (!runs.length)
    return [
      {
        kind: 'message',
        id: 'none',
        label: `No training runs in ${where.namespace} (${where.context})`,
        tooltip: 'Start one with "Harness Lab: Start Training Run..." or `harness-lab train submit` (in the Harness Lab terminal).',
        icon: 'info',
      },
    ];
  return runs.map((r) => {
    const w = waiting.get(r.name) ?? null;
    const shown = shownPhase(r.phase, r.detail, w);
    const data = dataSources.get(r.name);
    const id = `${r.namespace}/${r.kind}/${r.name}`;
    const status = servers.get(r.name);
    const server = status ? serverNode(id, r.name, status) : null;
    return {
      kind: 'run',
      id,
      name: r.name,
      label: r.name,
      description: [r.trainer, w && shown.phase === 'Pending' ? `Pending: ${w.reason}` : shown.phase, age(r.created, now)]
        .filter(Boolean)
        .join(' · '),
      tooltip: [
        `${r.kind} ${r.namespace}/${r.name}`,
        `trainer: ${r.trainer}`,
        `phase: ${shown.phase}${shown.detail ? ` (${shown.detail})` : ''}`,
        ...(r.created ? [`created: ${r.created}`] : []),
        ...(data ? [`data: ${data}`] : []),
        ...(status ? [serverStatusLine(status)] : []),
      ].join('\n'),
      icon: w?.stuck && shown.phase === 'Pending' ? 'warning' : ICONS[shown.phase],
      phase: shown.phase,
      waiting: w,
      runKind: r.kind,
      namespace: r.namespace,
      contextValue: FINISHED.has(r.phase) ? 'harnessLab.trainingRun.finished' : 'harnessLab.trainingRun',
      server,
    };
  });
}

const SERVER_ICONS: Record<ServerStatus['health']['state'], string> = {
  Ready: 'server-process',
  Starting: 'loading~spin',
  Waiting: 'warning',
  Gone: 'circle-slash',
};

/**
 * The run's rollout server as a row under the run: its state, rollouts done (by class), the
 * infra-failed rate and the reward mean; the tooltip has all `train status` says (causes, breaker).
 */
export function serverNode(runId: string, run: string, s: ServerStatus): TrainingRunServerNode {
  const p = s.progress;
  const parts: string[] = [s.health.state];
  if (p) {
    const classes = byClass(p.rollouts);
    parts.push(
      `${p.done} done${classes ? ` (${classes})` : ''}`,
      `infra-failed ${(p.infraFailedRate * 100).toFixed(1)}%`,
      p.rewardMean === null ? 'no reward yet' : `reward ${p.rewardMean.toFixed(3)}`,
    );
    if (p.breaker !== 'closed' && p.breaker !== 'unknown') parts.push(`breaker ${p.breaker}`);
  } else if (s.error) parts.push('metrics unreadable');
  else if (s.health.state !== 'Ready') parts.push(s.health.detail);
  return {
    kind: 'server',
    id: `${runId}/server`,
    run,
    label: `rollout server ${s.name}`,
    description: parts.join(' · '),
    tooltip: serverStatusLine(s).split('; ').join('\n'),
    icon: SERVER_ICONS[s.health.state],
    state: s.health.state,
  };
}

/** What Show Logs says when the run has no log yet: the pods' waiting reason, or that none was made. */
export function noLogsYet(name: string, waiting: PodWaiting | null): string {
  if (!waiting) return `training run ${name} has no started pod yet (none created so far: the operator or the scheduler has not made one)`;
  const detail = waiting.message ? ` (${waiting.message})` : '';
  const stuck = waiting.stuck ? '; it will not start by itself' : '';
  return `training run ${name} has no log yet: pod ${waiting.pod} is waiting: ${waiting.reason}${detail}${stuck}`;
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

/** What a run trains on, in words, and the local export it matches (same file name), when there is one. */
export function describeData(data: TrainConfig['data'], exports: LocalExport[]): { text: string; match: LocalExport | null } {
  if (data.source === 'rollout-server') return { text: rolloutServerText(data), match: null };
  const volume = 'pvc' in data.volume ? `PVC ${data.volume.pvc.claimName}` : `hostPath ${data.volume.hostPath.path}`;
  const base = data.file.split('/').pop()!;
  const match = exports.find((e) => e.file.endsWith(`/${data.file}`)) ?? exports.find((e) => e.file.split('/').pop() === base) ?? null;
  const from = match ? ` (${match.format} export${match.batchId ? ` of batch ${match.batchId}` : ''}, ${match.rows} rows)` : '';
  return { text: `export ${data.file} on ${volume}${from}`, match };
}

/** The workspace files that are trainer configs (the schema accepts them), nothing else. */
export function trainingConfigs<F extends { path: string; rel: string }>(files: F[]): (F & { config: TrainConfig })[] {
  const out: (F & { config: TrainConfig })[] = [];
  for (const f of files) {
    let text: string;
    try {
      text = readFileSync(f.path, 'utf8');
    } catch {
      continue;
    }
    // Cheap first: a config names its image and its data source.
    if (!/\bimage\b/.test(text) || !/\bdata\b/.test(text)) continue;
    try {
      out.push({ ...f, config: parseTrainConfig(text, f.rel) });
    } catch {
      // not a trainer config
    }
  }
  return out.sort((a, b) => a.rel.localeCompare(b.rel));
}

/** "2 node(s) x 8 GPU(s), image X, data export Y": what a config asks for, said before and at submit. */
export function configSummary(c: TrainConfig): string {
  const gpus = c.gpusPerNode ? `${c.numNodes} node(s) x ${c.gpusPerNode} GPU(s)` : `${c.numNodes} node(s), no GPU`;
  const data =
    c.data.source === 'export' ? `export ${c.data.file}` : c.data.url ? `rollout server ${c.data.url}` : rolloutServerText(c.data);
  return `${gpus}, image ${c.image}, data ${data}`;
}

/** A run's rollout server in words: the one it was given, or the one it deploys (with the splits it serves). */
function rolloutServerText(data: Extract<TrainConfig['data'], { source: 'rollout-server' }>): string {
  if (data.url) return `the rollout server ${data.url}`;
  return `a rollout server deployed with the run (splits ${Object.keys(data.serve?.datasets ?? {}).join(', ')})`;
}
