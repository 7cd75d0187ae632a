// What the Training Runs view does on the cluster, without vscode (so it is tested against the API
// server double): Start Training Run and Cancel go through src/training/run-lifecycle.ts, the same
// functions `train submit` and `train cancel` call (a config with `data.serve` deploys the run's
// rollout server first, and cancelling removes both); the rows' rollout server status is the one
// `train status` prints.
import type { Cluster } from '../cluster/kube.js';
import {
  rolloutServerStatus,
  startRun,
  stopRun,
  type Log,
  type ServerStatus,
  type StartedRun,
  type StoppedRun,
} from '../training/run-lifecycle.js';
import {
  loadTrainConfig,
  type RunKind,
  type RunRecord,
  type RunSummary,
  type TrainConfig,
  type Trainer,
} from '../training/trainer-jobs.js';
import { configSummary } from './training-runs-model.js';

export interface EditorStart {
  trainer: Trainer;
  configFile: string;
  recordsDir?: string;
  serverReadyTimeoutMs?: number;
}

/** Start Training Run after its three picks: the run (and its rollout server), and what to tell the user. */
export async function startFromEditor(
  cluster: Cluster,
  pick: EditorStart,
  log: Log,
): Promise<{ started: StartedRun; config: TrainConfig; message: string }> {
  const config = loadTrainConfig(pick.configFile);
  const started = await startRun(
    cluster,
    {
      trainer: pick.trainer,
      config,
      configFile: pick.configFile,
      operator: 'auto',
      ...(pick.recordsDir ? { recordsDir: pick.recordsDir } : {}),
      ...(pick.serverReadyTimeoutMs ? { serverReadyTimeoutMs: pick.serverReadyTimeoutMs } : {}),
    },
    log,
  );
  const { record, why, server } = started;
  const fallback = record.kind === 'Job' ? ' (a plain batch/v1 Job: no trainer operator)' : '';
  const deployed = server ? ` with its rollout server ${server.name} (${server.url}; splits ${server.splits.join(', ')})` : '';
  return {
    started,
    config,
    message: `Training run ${record.name} created as ${record.kind}${fallback}${deployed} in ${record.namespace} (${record.context}): ${configSummary(config)}; ${why}.`,
  };
}

/** Cancel Training Run: the trainer and, when the run has one, its rollout server; what to tell the user. */
export async function cancelFromEditor(
  cluster: Cluster,
  run: { kind: RunKind; name: string },
  log: Log,
  recordsDir?: string,
): Promise<{ stopped: StoppedRun; message: string }> {
  const stopped = await stopRun(cluster, run.kind, run.name, log, recordsDir);
  const trainer = stopped.trainer === 'deleted' ? `deleted ${run.kind} ${run.name}` : `${run.kind} ${run.name} was already gone`;
  const server = stopped.server
    ? `; rollout server: ${stopped.server.length ? `removed ${stopped.server.join(', ')}` : 'nothing left to remove'}`
    : '';
  return { stopped, message: `Training run ${run.name}: ${trainer}${server}.` };
}

/**
 * The rollout server of each listed run that has one (its local record says so; a run without a
 * record is asked by its Deployment), read in parallel; a server that cannot be read is left out
 * and the reason logged.
 */
export async function serverStatuses(
  cluster: Cluster,
  runs: readonly RunSummary[],
  records: readonly RunRecord[],
  log: Log,
): Promise<Map<string, ServerStatus>> {
  const byName = new Map(records.map((r) => [r.name, r] as const));
  const out = new Map<string, ServerStatus>();
  await Promise.all(
    runs.map(async (r) => {
      const record = byName.get(r.name);
      // A record of another cluster's run of the same name says nothing about this one.
      const mine = record && record.context === cluster.context && record.namespace === cluster.namespace ? record : undefined;
      try {
        const s = await rolloutServerStatus(cluster, r.name);
        if (s.health.state !== 'Gone' || mine?.rollout_server) out.set(r.name, s);
      } catch (err) {
        log(`the rollout server of training run ${r.name}: ${(err as Error).message}`);
      }
    }),
  );
  return out;
}
