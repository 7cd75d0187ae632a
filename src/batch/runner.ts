// Runs a planned batch to its end: one capture per batch, a global concurrency cap over every
// task x group, one attempt at a time per rollout, each attempt a fresh capture session carrying the
// batch's metadata and pinned sampling, facts from the backend classified by classify.ts, and every
// change written to the rollout's state file before anything else happens. The same function
// submits and resumes: a rollout left `running` by a dead lab is re-queued (its attempt kept as
// 'interrupted', never trainable) and the batch's leftover sandboxes are removed first.
import { join, resolve } from 'node:path';
import type { AttemptFacts, BackendModule } from './backend.js';
import { backendModule } from './backends/index.js';
import { classify } from './classify.js';
import { acquireLock, cancelRequested, clearCancel } from './lock.js';
import { attemptSessionId } from './plan.js';
import { batchPaths, readManifest, readRolloutStates, writeJsonAtomic, writeRolloutState, type BatchManifest, type RolloutState } from './state.js';

/** Upper bound on model calls per attempt: a runaway loop ends with the proxy's budget stop. */
export const MAX_MODEL_CALLS_PER_ROLLOUT = 100;

export interface BatchRunOptions {
  dir: string;
  log?: (line: string) => void;
  /** The backend module; default by the manifest's backend (tests pass a double). */
  module?: BackendModule;
  /** Stop on SIGINT/SIGTERM: running attempts are stopped and re-queued (default false; the CLI sets it). */
  handleSignals?: boolean;
  cancelPollMs?: number;
  /** Credential for the batch's --engine-url (not stored in the batch: give it again on resume). */
  engineApiKey?: string;
}

export interface BatchRunSummary {
  batchId: string;
  total: number;
  done: number;
  discarded: number;
  queued: number;
  /** Ended by `batch cancel` or a signal: rollouts left are queued, `batch resume` continues. */
  stopped: 'cancelled' | 'interrupted' | null;
  /** Rollouts a dead lab left running, re-queued at start. */
  requeued: string[];
  /** Sandboxes of this batch a dead lab left, removed at start. */
  removed: string[];
}

export const attemptDir = (batchDir: string, rolloutId: string, attempt: number) => join(batchPaths(batchDir).runs, rolloutId, String(attempt));

export function sessionMetadata(manifest: BatchManifest, s: RolloutState, attempt: number): Record<string, unknown> {
  return {
    batch_id: manifest.batch_id,
    group_id: s.group_id,
    rollout_id: s.rollout_id,
    member: s.member,
    attempt,
    task: s.task,
    harness: s.harness,
    backend: manifest.backend,
    batch_sampling: manifest.sampling,
    policy_version: manifest.policy_version,
  };
}

function counts(states: Iterable<RolloutState>) {
  const c = { queued: 0, running: 0, done: 0, discarded: 0 };
  for (const s of states) c[s.state]++;
  return c;
}

export async function runBatch(opts: BatchRunOptions): Promise<BatchRunSummary> {
  const dir = resolve(opts.dir);
  const log = opts.log ?? (() => {});
  const manifest = readManifest(dir);
  const lock = acquireLock(dir, `batch ${process.argv.slice(2).join(' ')}`.trim());
  const cleanups: (() => void)[] = [];
  try {
    if (lock.previous) log(`taking over from lab pid ${lock.previous.pid}, which is gone`);
    clearCancel(dir);
    const states = readRolloutStates(dir, manifest);
    const byId = new Map(states.map((s) => [s.rollout_id, s]));
    const save = (s: RolloutState) => writeRolloutState(dir, s);

    const requeued: string[] = [];
    for (const s of states) {
      if (s.state !== 'running') continue;
      const last = s.attempts[s.attempts.length - 1];
      if (last && last.outcome === 'running') Object.assign(last, { outcome: 'interrupted', ended_at: new Date().toISOString(), trainable: false });
      Object.assign(s, { state: 'queued', error: 'the lab stopped mid-rollout (killed or crashed); re-queued, the partial session is kept for debugging' });
      save(s);
      requeued.push(s.rollout_id);
    }
    if (requeued.length) log(`re-queued ${requeued.length} rollout(s) a previous lab left running: ${requeued.join(', ')}`);

    const mod = opts.module ?? (await backendModule(manifest.backend));
    const { backend, capture } = await mod.open({ batchDir: dir, manifest, log, engineApiKey: opts.engineApiKey });
    try {
      const removed = await backend.cleanupBatch(manifest.batch_id);
      if (removed.length) log(`removed ${removed.length} sandbox(es) of this batch left by a previous lab: ${removed.join(', ')}`);

      const queue = states.filter((s) => s.state === 'queued');
      const running = new Map<string, AbortController>();
      let stopped: BatchRunSummary['stopped'] = null;
      const stop = (why: 'cancelled' | 'interrupted') => {
        if (stopped) return;
        stopped = why;
        log(why === 'cancelled' ? 'cancel requested: stopping running rollouts' : 'stopping: running rollouts are stopped and re-queued');
        for (const c of running.values()) c.abort();
      };
      const poll = setInterval(() => cancelRequested(dir) && stop('cancelled'), opts.cancelPollMs ?? 500);
      cleanups.push(() => clearInterval(poll));
      if (opts.handleSignals) {
        const onSignal = (sig: NodeJS.Signals) => {
          if (stopped) process.exit(sig === 'SIGINT' ? 130 : 143);
          stop('interrupted');
        };
        process.on('SIGINT', onSignal);
        process.on('SIGTERM', onSignal);
        cleanups.push(() => {
          process.off('SIGINT', onSignal);
          process.off('SIGTERM', onSignal);
        });
      }

      const total = states.length;
      const line = () => {
        const c = counts(byId.values());
        return `running ${c.running}/${manifest.parallel}, queued ${c.queued}, done ${c.done}, discarded ${c.discarded} of ${total}`;
      };

      const runOne = async (s: RolloutState) => {
        const n = s.attempts.length;
        const sessionId = attemptSessionId(manifest.batch_id, s.rollout_id, n);
        const outDir = attemptDir(dir, s.rollout_id, n);
        await capture.createSession({ sessionId, metadata: sessionMetadata(manifest, s, n), sampling: manifest.sampling, maxModelCalls: MAX_MODEL_CALLS_PER_ROLLOUT });
        const startedAt = Date.now();
        s.attempts.push({ attempt: n, session_id: sessionId, started_at: new Date(startedAt).toISOString(), ended_at: null, out_dir: join('runs', s.rollout_id, String(n)), outcome: 'running', trainable: false });
        Object.assign(s, { state: 'running', session_id: sessionId, started_at: new Date(startedAt).toISOString(), ended_at: null, error: null, backend_ref: null });
        save(s);
        log(`start ${s.rollout_id}${n ? ` (attempt ${n})` : ''}: ${line()}`);
        const ctrl = new AbortController();
        running.set(s.rollout_id, ctrl);
        // Stopped while this attempt was being set up: the backend sees the abort at once and the attempt is recorded as stopped.
        if (stopped) ctrl.abort();
        let facts: AttemptFacts;
        try {
          facts = await backend.run({
            batchDir: dir,
            manifest,
            rollout: s,
            attempt: n,
            sessionId,
            outDir,
            signal: ctrl.signal,
            log: (l) => log(`  ${s.rollout_id}: ${l}`),
            setBackendRef: (ref) => {
              s.backend_ref = ref;
              save(s);
            },
          });
        } catch (err) {
          facts = { backendRef: null, agent: { exitCode: null, timedOut: false, ms: 0 }, verifier: null, reward: null, infraError: `the ${backend.kind} backend failed: ${err instanceof Error ? err.message : String(err)}`, cancelled: ctrl.signal.aborted };
        } finally {
          running.delete(s.rollout_id);
        }
        const endedAt = new Date();
        const attempt = s.attempts[n]!;
        attempt.ended_at = endedAt.toISOString();
        s.backend_ref = facts.backendRef ?? s.backend_ref;
        if (facts.cancelled) {
          attempt.outcome = stopped === 'cancelled' ? 'cancelled' : 'interrupted';
          Object.assign(s, { state: 'queued', error: stopped === 'cancelled' ? 'stopped by batch cancel; queued again for batch resume' : 'the lab was stopped; queued again for batch resume' });
          writeJsonAtomic(join(outDir, 'result.json'), { facts, capture: null, verdict: null });
          save(s);
          return;
        }
        const seen = await capture.sessionFacts(sessionId);
        const v = classify(facts, seen, manifest.on_timeout);
        writeJsonAtomic(join(outDir, 'result.json'), { facts, capture: seen, verdict: v });
        attempt.outcome = 'finished';
        attempt.trainable = v.trainable;
        Object.assign(s, { state: v.state, class: v.class, reward: v.reward, rewards: v.rewards, trainable: v.trainable, error: v.error, ended_at: endedAt.toISOString(), duration_ms: endedAt.getTime() - startedAt, n_calls: seen.nCalls });
        save(s);
        const reward = v.reward === null ? 'null' : String(Math.round(v.reward * 1000) / 1000);
        log(`${v.state === 'done' ? 'done' : 'discarded'} ${s.rollout_id}: ${v.class} reward=${reward} ${((endedAt.getTime() - startedAt) / 1000).toFixed(1)}s${v.error && v.state === 'discarded' ? ` (${v.error})` : ''}; ${line()}`);
      };

      let failure: unknown;
      const worker = async () => {
        for (let s = queue.shift(); s && !stopped; s = queue.shift()) {
          try {
            await runOne(s);
          } catch (err) {
            // The lab itself failed (the capture refused a session, a state file could not be written):
            // stop the others cleanly, leave what is left queued for `batch resume`, and say why.
            failure ??= err;
            stop('interrupted');
          }
        }
      };
      log(`batch ${manifest.batch_id}: ${queue.length} of ${total} rollout(s) to run, ${manifest.parallel} at a time`);
      await Promise.all(Array.from({ length: Math.max(1, Math.min(manifest.parallel, queue.length)) }, worker));
      if (failure) throw failure;
      if (!stopped && cancelRequested(dir)) stopped = 'cancelled';
      const c = counts(byId.values());
      return { batchId: manifest.batch_id, total, done: c.done, discarded: c.discarded, queued: c.queued + c.running, stopped, requeued, removed };
    } finally {
      await backend.close().catch((err: unknown) => log(`closing the backend: ${String(err)}`));
      await capture.close().catch((err: unknown) => log(`closing the capture: ${String(err)}`));
    }
  } finally {
    for (const c of cleanups) c();
    lock.release();
  }
}
