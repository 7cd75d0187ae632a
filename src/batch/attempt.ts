// One attempt of one rollout, the one lifecycle the batch runner (runner.ts) and the rollout server
// (src/serve/rollouts.ts) share: create the capture session with the batch's metadata, record the
// attempt in the rollout's state, run it on the backend (a throw becomes infra facts), read what
// the capture saw, classify (classify.ts, the one place facts become a class) and write the
// attempt's result.json and the rollout's state. What differs is only how a stopped attempt ends:
// a batch queues it again for `batch resume`, a server discards it (its trainer is gone).
import { join } from 'node:path';
import type { StartGate } from '../sandbox/start-gate.js';
import type { AttemptFacts, BatchBackend, BatchCapture } from './backend.js';
import { classify, type Verdict } from './classify.js';
import { attemptSessionId, rolloutSeed } from './plan.js';
import { batchPaths, queueAgain, writeJsonAtomic, type BatchManifest, type RolloutState } from './state.js';

/** Upper bound on model calls per attempt: a runaway loop ends with the proxy's budget stop. */
export const MAX_MODEL_CALLS_PER_ROLLOUT = 100;
/** Attempts a rollout gets when infrastructure spoils them: the lab's own (facts.rerun), or a backend outage that opened the breaker (runner.ts). */
export const MAX_INFRA_ATTEMPTS = 3;

/** `<batch>/attempts/<rollout>/<attempt>`: the attempt's sandbox logs and result.json. */
export const attemptDir = (batchDir: string, rolloutId: string, attempt: number) =>
  join(batchPaths(batchDir).attempts, rolloutId, String(attempt));

/** What every attempt's capture session carries, so exports and views can group and filter sessions. */
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

/** The facts of an attempt whose backend threw instead of answering: an infra error, never the policy's. */
export function infraFacts(kind: BatchBackend['kind'], err: unknown, cancelled: boolean): AttemptFacts {
  const why = err instanceof Error ? err.message : String(err);
  return {
    backendRef: null,
    agent: { exitCode: null, timedOut: false, ms: 0 },
    verifier: null,
    reward: null,
    infraError: `the ${kind} backend failed: ${why}`,
    cancelled,
  };
}

/** How a stopped attempt (its signal aborted) ends. */
export type StoppedEnd =
  /** Queued again (a batch): the capture is not read, result.json has no verdict. */
  | { requeue: true; outcome: 'cancelled' | 'interrupted'; error: string }
  /** Discarded as infra_error (a server, whose trainer is gone): the capture is read as for a finished attempt. */
  | { requeue: false; error: string };

export interface AttemptSpec {
  batchDir: string;
  manifest: BatchManifest;
  backend: BatchBackend;
  capture: BatchCapture;
  /** The rollout, updated in place and handed to `save` on every change. */
  rollout: RolloutState;
  sampling: Record<string, number>;
  maxModelCalls: number;
  /** Added to sessionMetadata() (the server's split and purpose). */
  extraMetadata?: Record<string, unknown>;
  signal: AbortSignal;
  log(line: string): void;
  save(s: RolloutState): void;
  /** Called once the attempt is recorded as running, before the backend starts. */
  onStarted?(): void;
  stopped(): StoppedEnd;
  /** Remove what the attempt left (a k8s Job) once its facts are read: a server has no batch end. */
  removeOnceRead?: boolean;
  /**
   * An attempt the lab's own infrastructure spoiled (facts.rerun: the cluster's capture proxy
   * restarted under it) is recorded as an infra error and the rollout left queued for another
   * attempt (at most MAX_INFRA_ATTEMPTS); the caller runs it again (`requeued` in the outcome).
   */
  rerunOnInfra?: boolean;
  /** Handed to the backend: the cap on sandboxes starting at once and the start-up budget. */
  startGate?: StartGate;
}

export interface AttemptOutcome {
  sessionId: string;
  outDir: string;
  facts: AttemptFacts;
  /** What the capture saw; null for a re-queued attempt. */
  seen: Awaited<ReturnType<BatchCapture['sessionFacts']>> | null;
  /** Null for a re-queued attempt. */
  verdict: Verdict | null;
  startedAt: number;
  endedAt: number;
  /** Queued again for another attempt (rerunOnInfra). */
  requeued?: boolean;
}

/**
 * Runs the rollout's next attempt to its end. Throws only when the lab itself fails (the capture
 * refused the session, a state file could not be written); everything the sandbox did is a fact.
 */
export async function runAttempt(a: AttemptSpec): Promise<AttemptOutcome> {
  const s = a.rollout;
  const n = s.attempts.length;
  const sessionId = attemptSessionId(a.manifest.batch_id, s.rollout_id, n);
  const outDir = attemptDir(a.batchDir, s.rollout_id, n);
  const metadata = { ...sessionMetadata(a.manifest, s, n), ...a.extraMetadata };
  // On the lab's own embedded engine (no engine URL) each rollout pins its own seed: a sampling
  // policy's draws then differ by member and repeat across batches (rolloutSeed). A real engine keeps
  // the batch's sampling as it is; a seed the caller pinned (a trainer through serve) wins.
  const sampling = a.manifest.engine_url ? a.sampling : { seed: rolloutSeed(s.rollout_id), ...a.sampling };
  await a.capture.createSession({ sessionId, metadata, sampling, maxModelCalls: a.maxModelCalls });
  const startedAt = Date.now();
  const started = new Date(startedAt).toISOString();
  s.attempts.push({
    attempt: n,
    session_id: sessionId,
    started_at: started,
    ended_at: null,
    out_dir: join('attempts', s.rollout_id, String(n)),
    outcome: 'running',
    trainable: false,
  });
  Object.assign(s, { state: 'running', session_id: sessionId, started_at: started, ended_at: null, error: null, backend_ref: null });
  a.save(s);
  a.onStarted?.();
  let facts: AttemptFacts;
  try {
    facts = await a.backend.run({
      batchDir: a.batchDir,
      manifest: a.manifest,
      rollout: s,
      attempt: n,
      sessionId,
      outDir,
      signal: a.signal,
      startGate: a.startGate,
      log: (l) => a.log(`  ${s.rollout_id}: ${l}`),
      setBackendRef: (ref) => {
        s.backend_ref = ref;
        a.save(s);
      },
    });
  } catch (err) {
    facts = infraFacts(a.backend.kind, err, a.signal.aborted);
  }
  const endedAt = Date.now();
  const attempt = s.attempts[n]!;
  attempt.ended_at = new Date(endedAt).toISOString();
  s.backend_ref = facts.backendRef ?? s.backend_ref;
  const stopped = facts.cancelled ? a.stopped() : null;
  if (stopped?.requeue) {
    attempt.outcome = stopped.outcome;
    Object.assign(s, { state: 'queued', error: stopped.error });
    writeJsonAtomic(join(outDir, 'result.json'), { facts, capture: null, verdict: null });
    a.save(s);
    return { sessionId, outDir, facts, seen: null, verdict: null, startedAt, endedAt };
  }
  const seen = await a.capture.sessionFacts(sessionId);
  if (a.removeOnceRead && facts.backendRef && a.backend.removeAttempt)
    await a.backend
      .removeAttempt(facts.backendRef)
      .catch((err: unknown) => a.log(`  ${s.rollout_id}: ${err instanceof Error ? err.message : String(err)}`));
  let verdict: Verdict;
  if (stopped) {
    attempt.outcome = 'cancelled';
    verdict = {
      state: 'discarded',
      class: 'infra_error',
      reward: null,
      rewards: {},
      trainable: false,
      error: stopped.error,
      cause: 'stopped',
    };
  } else {
    verdict = classify(facts, seen, a.manifest.on_timeout);
    attempt.outcome = 'finished';
    attempt.trainable = verdict.trainable;
    attempt.class = verdict.class;
    attempt.infra_cause = verdict.class === 'infra_error' ? (verdict.cause ?? 'other') : null;
  }
  writeJsonAtomic(join(outDir, 'result.json'), { facts, capture: seen, verdict });
  if (
    !stopped &&
    facts.rerun &&
    a.rerunOnInfra &&
    requeueAfterInfra(s, `${verdict.error ?? 'infrastructure failure'}; queued for attempt ${s.attempts.length}`)
  ) {
    a.save(s);
    return { sessionId, outDir, facts, seen, verdict, startedAt, endedAt, requeued: true };
  }
  const { state, class: cls, reward, rewards, trainable, error } = verdict;
  const infra_cause = cls === 'infra_error' ? (verdict.cause ?? 'other') : null;
  Object.assign(s, {
    state,
    class: cls,
    reward,
    rewards,
    trainable,
    error,
    infra_cause,
    ended_at: attempt.ended_at,
    duration_ms: endedAt - startedAt,
    n_calls: seen.nCalls,
  });
  a.save(s);
  return { sessionId, outDir, facts, seen, verdict, startedAt, endedAt };
}

/**
 * The one way a rollout spoiled by infrastructure runs again, whoever saw it: the lab's own
 * (facts.rerun, above) or an outage that opened the breaker (runner.ts). Its failed attempts stay
 * (never trainable); it is queued with its verdict cleared, unless it has had MAX_INFRA_ATTEMPTS
 * (false: it keeps its verdict). The caller saves it and queues it.
 */
export function requeueAfterInfra(s: RolloutState, error: string): boolean {
  if (s.attempts.length >= MAX_INFRA_ATTEMPTS) return false;
  queueAgain(s, error);
  return true;
}
