// Runs a planned batch to its end: one capture per batch, a global concurrency cap over every
// task x group, one attempt at a time per rollout, each attempt a fresh capture session carrying the
// batch's metadata and pinned sampling, run by attempt.ts (the lifecycle `harness-lab serve` shares),
// and every change written to the rollout's state file before anything else happens. The same function
// submits and resumes: a rollout left `running` by a dead lab is re-queued (its attempt kept as
// 'interrupted', never trainable) and the batch's leftover sandboxes are removed first.
import { resolve } from 'node:path';
import { StartSemaphore } from '../sandbox/start-gate.js';
import { MAX_MODEL_CALLS_PER_ROLLOUT, requeueAfterInfra, runAttempt } from './attempt.js';
import type { BackendModule } from './backend.js';
import { backendModule } from './backends/index.js';
import { CircuitBreaker, type BreakerSnapshot } from './breaker.js';
import { acquireLock, cancelRequested, clearCancel } from './lock.js';
import { pacingOf, readManifest, readRolloutStates, writeRolloutState, type RolloutState } from './state.js';

export interface RunBatchOptions {
  dir: string;
  log?: (line: string) => void;
  /** The backend module; default by the manifest's backend (tests pass a double). */
  module?: BackendModule;
  /** Stop on SIGINT/SIGTERM: running attempts are stopped and re-queued (default false; the CLI sets it). */
  handleSignals?: boolean;
  cancelPollMs?: number;
  /** Credential for the batch's --engine-url (not stored in the batch: give it again on resume). */
  engineApiKey?: string;
  /** How often an open breaker probes the backend (tests shorten it). */
  breakerProbeMs?: number;
  /** Told of every breaker change (the CLI's watch and tests). */
  onBreaker?: (s: BreakerSnapshot) => void;
}

export interface RunBatchSummary {
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
  /** Times the breaker opened, and the rollouts run again because an outage had failed them. */
  breakerTrips: number;
  rerunAfterOutage: string[];
}

function counts(states: Iterable<RolloutState>) {
  const c = { queued: 0, running: 0, done: 0, discarded: 0 };
  for (const s of states) c[s.state]++;
  return c;
}

export async function runBatch(opts: RunBatchOptions): Promise<RunBatchSummary> {
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
      if (last && last.outcome === 'running')
        Object.assign(last, { outcome: 'interrupted', ended_at: new Date().toISOString(), trainable: false });
      Object.assign(s, {
        state: 'queued',
        error: 'the lab stopped mid-rollout (killed or crashed); re-queued, the partial session is kept for debugging',
      });
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
      const halt = new AbortController();
      let stopped: RunBatchSummary['stopped'] = null;
      const stop = (why: 'cancelled' | 'interrupted') => {
        if (stopped) return;
        stopped = why;
        halt.abort();
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

      const pacing = pacingOf(manifest);
      const startGate = new StartSemaphore(
        pacing.max_starting,
        pacing.start_timeout_sec === null ? undefined : pacing.start_timeout_sec * 1000,
      );
      const breaker = new CircuitBreaker({
        threshold: pacing.breaker_after,
        probe: () => (mod.preflight ? mod.preflight(manifest.k8s) : Promise.resolve()),
        ...(opts.breakerProbeMs !== undefined ? { probeMs: opts.breakerProbeMs } : {}),
        log,
      });
      cleanups.push(() => breaker.dispose());
      if (opts.onBreaker) breaker.onDidChange(opts.onBreaker);
      // The infra failures since the last attempt that reached its verdict: when they open the
      // breaker, each runs again once the backend is back (their failed attempts stay, never trainable).
      let streak: RolloutState[] = [];
      const rerunAfterOutage: string[] = [];

      const total = states.length;
      const line = () => {
        const c = counts(byId.values());
        return `running ${c.running}/${manifest.parallel}, queued ${c.queued}, done ${c.done}, discarded ${c.discarded} of ${total}`;
      };

      const requeueAfterOutage = (s: RolloutState, why: string) => {
        if (!requeueAfterInfra(s, `run again after a backend outage (${why})`)) return;
        save(s);
        queue.push(s);
        rerunAfterOutage.push(s.rollout_id);
      };

      const runOne = async (s: RolloutState) => {
        const ctrl = new AbortController();
        running.set(s.rollout_id, ctrl);
        let end;
        try {
          end = await runAttempt({
            batchDir: dir,
            manifest,
            backend,
            capture,
            rollout: s,
            sampling: manifest.sampling,
            maxModelCalls: MAX_MODEL_CALLS_PER_ROLLOUT,
            signal: ctrl.signal,
            startGate,
            log,
            save,
            rerunOnInfra: true,
            onStarted: () => {
              log(`start ${s.rollout_id}${s.attempts.length > 1 ? ` (attempt ${s.attempts.length - 1})` : ''}: ${line()}`);
              // Stopped while this attempt was being set up: the backend sees the abort at once and the attempt is recorded as stopped.
              if (stopped) ctrl.abort();
            },
            stopped: () =>
              stopped === 'cancelled'
                ? { requeue: true, outcome: 'cancelled', error: 'stopped by batch cancel; queued again for batch resume' }
                : { requeue: true, outcome: 'interrupted', error: 'the lab was stopped; queued again for batch resume' },
          });
        } finally {
          running.delete(s.rollout_id);
        }
        const v = end.verdict;
        if (!v) return;
        if (end.requeued) {
          // Spoiled by the lab's own infrastructure (k8s: the capture proxy restarted under it): run it again.
          queue.push(s);
          log(`re-queued ${s.rollout_id}: ${v.error}; ${line()}`);
          return;
        }
        const reward = v.reward === null ? 'null' : String(Math.round(v.reward * 1000) / 1000);
        const secs = ((end.endedAt - end.startedAt) / 1000).toFixed(1);
        log(
          `${v.state === 'done' ? 'done' : 'discarded'} ${s.rollout_id}: ${v.class} reward=${reward} ${secs}s${v.error && v.state === 'discarded' ? ` (${v.error})` : ''}; ${line()}`,
        );
        if (v.class === 'infra_error') {
          streak.push(s);
          const tripped = breaker.recordFailure(v.cause ?? 'other', v.error ?? 'infra failure');
          // The streak that opened it, and any attempt still in flight that failed while it was open, is the outage's.
          if (tripped || breaker.snapshot().state !== 'closed') {
            const why = `${v.cause ?? 'other'}: ${v.error}`;
            for (const r of streak) requeueAfterOutage(r, why);
            streak = [];
          }
        } else {
          streak = [];
          breaker.recordSuccess();
        }
      };

      let failure: unknown;
      // Workers wait for work while others run: a rollout re-queued after an outage is picked up by any.
      let wake: () => void = () => {};
      let changed = new Promise<void>((r) => (wake = r));
      const pulse = () => {
        wake();
        changed = new Promise<void>((r) => (wake = r));
      };
      const worker = async () => {
        while (!stopped) {
          const s = queue.shift();
          if (!s) {
            if (running.size === 0) break;
            await changed;
            continue;
          }
          if (!(await breaker.admit(halt.signal))) {
            queue.unshift(s);
            break;
          }
          try {
            await runOne(s);
          } catch (err) {
            // The lab itself failed (the capture refused a session, a state file could not be written):
            // stop the others cleanly, leave what is left queued for `batch resume`, and say why.
            failure ??= err;
            stop('interrupted');
          } finally {
            pulse();
          }
        }
        pulse();
      };
      log(`batch ${manifest.batch_id}: ${queue.length} of ${total} rollout(s) to run, ${manifest.parallel} at a time`);
      await Promise.all(Array.from({ length: Math.max(1, Math.min(manifest.parallel, queue.length)) }, worker));
      if (failure) throw failure;
      if (!stopped && cancelRequested(dir)) stopped = 'cancelled';
      const c = counts(byId.values());
      return {
        batchId: manifest.batch_id,
        total,
        done: c.done,
        discarded: c.discarded,
        queued: c.queued + c.running,
        stopped,
        requeued,
        removed,
        breakerTrips: breaker.snapshot().trips,
        rerunAfterOutage,
      };
    } finally {
      await backend.close().catch((err: unknown) => log(`closing the backend: ${String(err)}`));
      await capture.close().catch((err: unknown) => log(`closing the capture: ${String(err)}`));
    }
  } finally {
    for (const c of cleanups) c();
    lock.release();
  }
}
