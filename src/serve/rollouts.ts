// One served rollout, end to end, on the batch backends: the same backend module (sandbox, capture
// proxy, engine) and the same attempt lifecycle (src/batch/attempt.ts: session metadata, pinned
// sampling, classify.ts turning facts into a class) as a batch attempt; then the captured session
// is read back from the capture's data dir and answered as a HarborRolloutResult. A rollout that fails is a value (ok false, reward null),
// never an exception: the trainer on the other side must be able to score the rest of its group.
//
// Layout (one batch-shaped directory per engine the trainer names, so exports and the viewer read a
// served rollout like a batch's):
//   <state>/engines/<id>/serve.json            the in-memory manifest the backend runs with
//   <state>/engines/<id>/rollouts/<rid>.json    RolloutState (src/batch/state.ts), rewritten on every change
//   <state>/engines/<id>/capture/sessions/      the capture proxy's durable sessions
//   <state>/engines/<id>/attempts/<rid>/0/      the attempt's sandbox logs and results
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { BackendModule, BatchBackend, BatchCapture } from '../batch/backend.js';
import { backendModule } from '../batch/backends/index.js';
import { MAX_MODEL_CALLS_PER_ROLLOUT, runAttempt } from '../batch/attempt.js';
import { BreakerOpenError, CircuitBreaker } from '../batch/breaker.js';
import type { Verdict } from '../batch/classify.js';
import type { InfraCause } from '../batch/infra-cause.js';
import {
  BatchManifestSchema,
  DEFAULT_PACING,
  batchPaths,
  queuedRolloutState,
  readRolloutState,
  writeJsonAtomic,
  writeRolloutState,
  type BatchManifest,
  type RolloutClass,
  type RolloutState,
} from '../batch/state.js';
import { batchSessionFile } from '../batch/status.js';
import type { MetricsText } from '../capture/metrics.js';
import type { RolloutDocument } from '../capture/rollout.js';
import { readRolloutFile, RolloutFileError } from '../capture/rollout-file.js';
import { PINNABLE_SAMPLING_KEYS, type PinnedSampling } from '../capture/types.js';
import { harnessEntry, harnessNames } from '../harness/registry.js';
import { StartSemaphore } from '../sandbox/start-gate.js';
import type { ServedSplit } from './datasets.js';
import type { HarborRolloutResult, HarborTurn, RunRolloutArgs } from './protocol.js';

const DEFAULT_AGENT_TIMEOUT_SEC = 600;
const LOG_TAIL_CHARS = 4000;

interface OpenEngine {
  dir: string;
  manifest: BatchManifest;
  backend: BatchBackend;
  capture: BatchCapture;
}

export interface RolloutServiceOptions {
  stateDir: string;
  backend: 'docker' | 'k8s';
  splits: ReadonlyMap<string, ServedSplit>;
  log(line: string): void;
  /** The cluster target for --backend k8s (as `batch submit --context/--namespace/--registry/--queue`). */
  k8s?: { context: string | null; namespace: string; registry: string | null; queue_name: string | null };
  /** Sandboxes at once over every session; a session past it waits its turn (default 4). */
  parallel?: number;
  /** Tests pass a double; default by `backend`. */
  module?: BackendModule;
  /** Consecutive infra failures that pause new sandboxes (default 10; 0: off); trainers get FACTORY_ERROR meanwhile. */
  breakerAfter?: number;
  /** How often an open breaker probes the backend (tests shorten it). */
  breakerProbeMs?: number;
  /** Sandboxes starting at once, apart from `parallel` (default 4; 0: no cap). */
  maxStarting?: number;
  /** Wall budget of one sandbox start-up, seconds (default 300). */
  startTimeoutSec?: number;
}

/**
 * The environment of a rollout could not be made (OpenEnv's EnvironmentFactoryError, answered as
 * FACTORY_ERROR): the backend unreachable or refusing (Docker down, the cluster unreachable or a
 * permission denied), the engine's backend failing to open (task images, the in-cluster proxy), or
 * the sandbox never starting (the task image would not build, the container, Job or pod refused).
 * Not a rollout's outcome: nothing ran, so there is nothing to score, not even as a failure.
 */
export class EnvironmentFactoryError extends Error {
  constructor(
    readonly factoryName: string,
    message: string,
  ) {
    super(message);
    this.name = 'EnvironmentFactoryError';
  }
}

/** A backend that answered its preflight is not asked again for this long. */
const PREFLIGHT_OK_MS = 10_000;

export class RolloutService {
  private readonly engines = new Map<string, Promise<OpenEngine>>();
  private readonly running = new Set<AbortController>();
  private seq = 0;
  private closed = false;
  private active = 0;
  private readonly waiting: (() => void)[] = [];

  /** Every batch this state dir holds (from earlier servers and this one), for the reaper. */
  private readonly batches = new Map<string, BatchManifest>();
  private reaper: NodeJS.Timeout | undefined;
  private preflightOk = 0;
  private preflightRunning: Promise<void> | undefined;
  /** Pauses new sandboxes after a streak of infra failures; the backend's preflight is its probe. */
  readonly breaker: CircuitBreaker;
  readonly startGate: StartSemaphore;
  /** Every rollout's class and, for infra errors, cause, since this server started (/metrics). */
  readonly outcomes = {
    classes: {} as Partial<Record<RolloutClass, number>>,
    causes: {} as Partial<Record<InfraCause, number>>,
    /** Rewards of scored rollouts (a training run's status reports their mean). */
    rewardSum: 0,
    scored: 0,
  };

  constructor(private readonly opts: RolloutServiceOptions) {
    this.breaker = new CircuitBreaker({
      threshold: opts.breakerAfter ?? DEFAULT_PACING.breaker_after,
      ...(opts.breakerProbeMs !== undefined ? { probeMs: opts.breakerProbeMs } : {}),
      probe: async () => {
        const mod = await this.module();
        await mod.preflight?.(this.opts.backend === 'k8s' ? this.k8sTarget() : null);
      },
      log: opts.log,
    });
    const budget = opts.startTimeoutSec ?? DEFAULT_PACING.start_timeout_sec;
    this.startGate = new StartSemaphore(opts.maxStarting ?? DEFAULT_PACING.max_starting, budget === null ? undefined : budget * 1000);
  }

  /** The breaker's refusal as what OpenEnv's server answers when it cannot make an environment. */
  private admitOrFactoryError(): void {
    try {
      this.breaker.admitOrThrow();
    } catch (err) {
      if (err instanceof BreakerOpenError) throw new EnvironmentFactoryError(this.factoryName, err.message);
      throw err;
    }
  }

  /** What OpenEnv's FACTORY_ERROR names as the factory: this server's backend. */
  get factoryName(): string {
    return `harness-lab serve --backend ${this.opts.backend}`;
  }

  /**
   * Whether the backend can make sandboxes at all, asked when a session opens (where OpenEnv's
   * server creates a session's environment); throws EnvironmentFactoryError when it cannot. A recent
   * success is kept for a few seconds, so a group's connects share one check.
   */
  async preflight(): Promise<void> {
    const b = this.breaker.snapshot();
    if (b.state === 'open') throw new EnvironmentFactoryError(this.factoryName, new BreakerOpenError(b).message);
    if (Date.now() - this.preflightOk < PREFLIGHT_OK_MS) return;
    this.preflightRunning ??= (async () => {
      try {
        const mod = await this.module();
        await mod.preflight?.(this.opts.backend === 'k8s' ? this.k8sTarget() : null);
        this.preflightOk = Date.now();
      } catch (err) {
        throw new EnvironmentFactoryError(
          this.factoryName,
          `the ${this.opts.backend} backend cannot create sandboxes: ${err instanceof Error ? err.message : String(err)}`,
        );
      } finally {
        this.preflightRunning = undefined;
      }
    })();
    return this.preflightRunning;
  }

  private k8sTarget(): NonNullable<BatchManifest['k8s']> {
    return this.opts.k8s ?? { context: null, namespace: 'default', registry: null, queue_name: null };
  }

  get runningCount(): number {
    return this.running.size;
  }

  /** Rollouts waiting for a sandbox slot (their sessions are open; OpenEnv's capacity is the session cap). */
  get queuedCount(): number {
    return this.waiting.length;
  }

  private async slot(signal: AbortSignal): Promise<() => void> {
    const limit = this.opts.parallel ?? 4;
    if (this.active >= limit)
      await new Promise<void>((resolve, reject) => {
        const go = () => {
          signal.removeEventListener('abort', stop);
          resolve();
        };
        const stop = () => {
          const i = this.waiting.indexOf(go);
          if (i >= 0) this.waiting.splice(i, 1);
          reject(new Error('the session closed while its rollout waited for a sandbox slot'));
        };
        signal.addEventListener('abort', stop, { once: true });
        this.waiting.push(go);
      });
    this.active++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.active--;
      this.waiting.shift()?.();
    };
  }

  private enginesRoot(): string {
    return join(this.opts.stateDir, 'engines');
  }

  /**
   * A server killed mid-rollout left rollouts `running` and their sandboxes: the rollouts are marked
   * discarded (infra_error, their attempt 'interrupted'; the captured session stays on disk) and the
   * sandboxes removed. The trainer saw its connection drop, which it tells apart from a result.
   */
  async recover(): Promise<{ interrupted: string[]; removed: string[] }> {
    const interrupted: string[] = [];
    const removed: string[] = [];
    if (!existsSync(this.enginesRoot())) return { interrupted, removed };
    const mod = await this.module();
    for (const id of readdirSync(this.enginesRoot())) {
      const dir = join(this.enginesRoot(), id);
      const file = join(dir, 'serve.json');
      if (!existsSync(file)) continue;
      let raw: unknown;
      try {
        raw = JSON.parse(readFileSync(file, 'utf8'));
      } catch (err) {
        this.opts.log(`${file}: not JSON (${(err as Error).message}), skipped`);
        continue;
      }
      const parsed = BatchManifestSchema.safeParse(raw);
      if (!parsed.success) {
        this.opts.log(`${file}: not a serve manifest, skipped`);
        continue;
      }
      const rollouts = batchPaths(dir).rollouts;
      if (existsSync(rollouts))
        for (const name of readdirSync(rollouts).filter((n) => n.endsWith('.json'))) {
          let s: RolloutState;
          try {
            s = readRolloutState(dir, name.slice(0, -5));
          } catch (err) {
            this.opts.log(`${(err as Error).message}; skipped`);
            continue;
          }
          if (s.state !== 'running' && s.state !== 'queued') continue;
          const last = s.attempts[s.attempts.length - 1];
          const now = new Date().toISOString();
          if (last && last.outcome === 'running') Object.assign(last, { outcome: 'interrupted', ended_at: now, trainable: false });
          Object.assign(s, {
            state: 'discarded',
            class: 'infra_error',
            reward: null,
            trainable: false,
            ended_at: now,
            error:
              'the rollout server stopped mid-rollout (killed or restarted); the trainer was disconnected, the partial session is kept',
          });
          writeRolloutState(dir, s);
          interrupted.push(s.rollout_id);
        }
      this.batches.set(parsed.data.batch_id, parsed.data);
      removed.push(...(await mod.cleanup(parsed.data, this.opts.log)));
    }
    return { interrupted, removed };
  }

  /**
   * Keeps reaping, while the server runs, the sandboxes of its batches whose owning process is
   * gone. The start-up cleanup in recover() cannot be the last word: a create the daemon was still
   * finishing for a server killed with kill -9 lands after it, at a time nobody knows.
   */
  startReaper(intervalMs = 5000): void {
    if (this.reaper) return;
    let busy = false;
    this.reaper = setInterval(() => {
      if (busy || this.closed) return;
      busy = true;
      void this.reapOnce().finally(() => (busy = false));
    }, intervalMs);
    this.reaper.unref();
  }

  /** One reaper pass; returns what it removed (each logged). */
  async reapOnce(): Promise<string[]> {
    const mod = await this.module();
    if (!mod.reapStale) return [];
    const removed: string[] = [];
    for (const m of this.batches.values()) {
      const gone = await mod.reapStale(m).catch((err: unknown) => {
        this.opts.log(`reaping the sandboxes of ${m.batch_id}: ${err instanceof Error ? err.message : String(err)}`);
        return [];
      });
      if (gone.length) this.opts.log(`reaped ${gone.length} sandbox(es) of ${m.batch_id} whose server is gone: ${gone.join(', ')}`);
      removed.push(...gone);
    }
    return removed;
  }

  private async module(): Promise<BackendModule> {
    return this.opts.module ?? backendModule(this.opts.backend);
  }

  /** The backend for one engine (URL, model, key), opened on first use and kept for the server's life. */
  private engine(llmUrl: string | null, model: string | null, apiKey: string | undefined): Promise<OpenEngine> {
    const key = JSON.stringify([llmUrl, model, apiKey ? createHash('sha256').update(apiKey).digest('hex') : null]);
    let open = this.engines.get(key);
    if (!open) {
      open = this.openEngine(key, llmUrl, model, apiKey);
      open.catch(() => this.engines.delete(key));
      this.engines.set(key, open);
    }
    return open;
  }

  private async openEngine(key: string, llmUrl: string | null, model: string | null, apiKey: string | undefined): Promise<OpenEngine> {
    const id = createHash('sha256').update(`${this.opts.stateDir}\n${key}`).digest('hex').slice(0, 12);
    const dir = join(this.enginesRoot(), id);
    const tasks = [...this.opts.splits.values()].flatMap((s) => s.tasks.map((t, i) => ({ name: servedTaskName(s.name, i), dir: t.dir })));
    const manifest: BatchManifest = {
      schema_version: 1,
      batch_id: `serve-${id}`,
      created_at: new Date().toISOString(),
      backend: this.opts.backend,
      harnesses: harnessNames(),
      group_size: 2,
      tasks,
      // Groups are the trainer's (each request is one member): none is planned here.
      groups: [{ group_id: 'served', task: tasks[0]!.name, harness: 'react', rollout_ids: ['served-0', 'served-1'] }],
      sampling: { temperature: 1, top_p: 1, top_k: -1, min_p: 0 },
      policy_version: null,
      timeout_sec: DEFAULT_AGENT_TIMEOUT_SEC,
      on_timeout: 'keep',
      parallel: 1,
      engine_url: llmUrl,
      model,
      k8s: this.opts.backend === 'k8s' ? this.k8sTarget() : null,
    };
    writeJsonAtomic(join(dir, 'serve.json'), BatchManifestSchema.parse(manifest));
    this.batches.set(manifest.batch_id, manifest);
    const { backend, capture } = await (
      await this.module()
    ).open({ batchDir: dir, manifest, log: this.opts.log, ...(apiKey ? { engineApiKey: apiKey } : {}) });
    const left = await backend.cleanupBatch(manifest.batch_id);
    if (left.length) this.opts.log(`removed ${left.length} sandbox(es) a previous server left: ${left.join(', ')}`);
    return { dir, manifest, backend, capture };
  }

  /**
   * Runs one rollout; every failure of the rollout comes back as `ok: false`. The one throw is
   * EnvironmentFactoryError: its environment could not be made, so there is no rollout to report.
   */
  async run(args: RunRolloutArgs, signal: AbortSignal): Promise<HarborRolloutResult> {
    const started = Date.now();
    const split = this.opts.splits.get(args.split);
    const task = split?.tasks[args.task_index];
    const base = blankResult(args, split?.name ?? args.split, task ? { id: task.fullName, name: task.name } : null);
    const fail = (error: string, type: string): HarborRolloutResult => ({
      ...base,
      ok: false,
      error,
      exception_type: type,
      wall_s: (Date.now() - started) / 1000,
    });
    if (this.closed) return fail('the rollout server is shutting down', 'ServerShuttingDown');
    if (!split) return fail(`unknown split '${args.split}'; served splits: ${[...this.opts.splits.keys()].join(', ')}`, 'ValueError');
    if (!task)
      return fail(`split '${split.name}' has ${split.tasks.length} task(s); task_index ${args.task_index} is out of range`, 'IndexError');
    try {
      harnessEntry(args.harness);
    } catch (err) {
      return fail((err as Error).message, 'ValueError');
    }
    const rawSampling = args.purpose === 'eval' && args.eval_sampling ? args.eval_sampling : args.sampling;
    const pinned: PinnedSampling = {};
    for (const k of PINNABLE_SAMPLING_KEYS) {
      const v = rawSampling?.[k];
      if (typeof v === 'number' && Number.isFinite(v)) pinned[k] = v;
    }

    const ctrl = new AbortController();
    const onAbort = () => ctrl.abort();
    signal.addEventListener('abort', onAbort);
    let release: (() => void) | undefined;
    try {
      release = await this.slot(ctrl.signal);
      // Past a streak of infra failures no sandbox starts: the trainer is told at once, as for a backend that is down.
      this.admitOrFactoryError();
      this.running.add(ctrl);
      const queueS = (Date.now() - started) / 1000;
      let eng: OpenEngine;
      try {
        eng = await this.engine(args.llm_url ? args.llm_url : null, args.model ?? null, args.api_key ?? undefined);
      } catch (err) {
        throw new EnvironmentFactoryError(
          this.factoryName,
          `the ${this.opts.backend} backend could not be opened for engine ${args.llm_url || '(embedded)'}: ${err instanceof Error ? err.message : String(err)}`,
        );
      }
      const timeoutSec = args.agent_timeout_sec ?? task.agentTimeoutSec ?? DEFAULT_AGENT_TIMEOUT_SEC;
      const manifest: BatchManifest = {
        ...eng.manifest,
        timeout_sec: timeoutSec,
        policy_version: args.policy_version == null ? null : String(args.policy_version),
      };
      const rolloutId = `${slugPart(split.name)}.${args.task_index}.${Date.now().toString(36)}${(this.seq++).toString(36)}${randomBytes(2).toString('hex')}`;
      const now = new Date().toISOString();
      const s = queuedRolloutState({
        rollout_id: rolloutId,
        group_id: 'served',
        member: 0,
        task: servedTaskName(split.name, args.task_index),
        harness: args.harness,
        policy_version: manifest.policy_version,
        queued_at: now,
      });
      const extraMetadata = {
        served: { split: split.name, task_index: args.task_index, purpose: args.purpose ?? 'train', reward_key: args.reward_key ?? null },
      };
      const end = await runAttempt({
        batchDir: eng.dir,
        manifest,
        backend: eng.backend,
        capture: eng.capture,
        rollout: s,
        sampling: pinned,
        maxModelCalls: args.agent_step_limit ?? MAX_MODEL_CALLS_PER_ROLLOUT,
        extraMetadata,
        signal: ctrl.signal,
        log: this.opts.log,
        save: (r) => writeRolloutState(eng.dir, r),
        onStarted: () => this.opts.log(`start ${rolloutId} (${split.name}[${args.task_index}] ${task.name}, ${args.harness})`),
        stopped: () => ({
          requeue: false,
          error: this.closed ? 'the rollout server shut down mid-rollout' : 'the trainer closed the session mid-rollout',
        }),
        removeOnceRead: true,
        startGate: this.startGate,
      });
      const { sessionId, outDir, facts } = end;
      // A server's stopped attempt is discarded, never re-queued: it always has a verdict and the capture's facts.
      const verdict = end.verdict!;
      const seen = end.seen!;
      this.opts.log(`${verdict.state} ${rolloutId}: ${verdict.class} reward=${verdict.reward ?? 'null'}`);
      this.count(verdict);
      if (facts.setupFailure && !facts.cancelled)
        throw new EnvironmentFactoryError(
          this.factoryName,
          `the ${eng.backend.kind} backend could not create the sandbox of ${split.name}[${args.task_index}] (${task.name}, rollout ${rolloutId}): ${facts.setupFailure}`,
        );
      const doc = readCapturedSession(eng.dir, sessionId, this.opts.log);
      return resultOf({
        base,
        args,
        verdict,
        doc,
        findings: seen.findings,
        outDir,
        sessionId,
        rolloutId,
        started,
        facts,
        timeoutSec,
        queueS,
      });
    } catch (err) {
      if (err instanceof EnvironmentFactoryError) throw err;
      return fail(err instanceof Error ? err.message : String(err), err instanceof Error ? err.constructor.name : 'Error');
    } finally {
      signal.removeEventListener('abort', onAbort);
      this.running.delete(ctrl);
      release?.();
    }
  }

  /** This service's part of serve's `/metrics`: sandboxes by state, outcomes by class and cause, the breaker. */
  writeMetrics(out: MetricsText): void {
    out.metric(
      'harness_lab_serve_sandboxes',
      'gauge',
      'Rollouts by sandbox state: waiting for a slot (--parallel), waiting to start (--max-starting), starting, running',
      [
        [{ state: 'waiting_slot' }, this.queuedCount],
        [{ state: 'waiting_start' }, this.startGate.waiting],
        [{ state: 'starting' }, this.startGate.starting],
        [{ state: 'running' }, this.runningCount],
      ],
    );
    out.metric(
      'harness_lab_serve_rollouts_total',
      'counter',
      'Rollouts that reached a verdict, by class',
      Object.entries(this.outcomes.classes).map(([k, v]) => [{ class: k }, v]),
    );
    out.metric(
      'harness_lab_serve_infra_failures_total',
      'counter',
      'Rollouts discarded as infra_error, by cause',
      Object.entries(this.outcomes.causes).map(([k, v]) => [{ cause: k }, v]),
    );
    out.metric('harness_lab_serve_reward_sum', 'counter', 'Sum of the rewards of scored rollouts', this.outcomes.rewardSum);
    out.metric('harness_lab_serve_scored_total', 'counter', 'Rollouts that came back with a reward', this.outcomes.scored);
    const b = this.breaker.snapshot();
    out.metric(
      'harness_lab_serve_breaker_state',
      'gauge',
      'The sandbox circuit breaker: 1 for its current state',
      (['closed', 'half-open', 'open'] as const).map((st) => [{ state: st }, b.state === st ? 1 : 0]),
    );
    out.metric('harness_lab_serve_breaker_trips_total', 'counter', 'Times the breaker opened after a streak of infra failures', b.trips);
    out.metric('harness_lab_serve_infra_failure_streak', 'gauge', 'Infra failures in a row right now', b.streak);
  }

  private count(v: Verdict): void {
    this.outcomes.classes[v.class] = (this.outcomes.classes[v.class] ?? 0) + 1;
    if (v.state === 'done' && v.reward !== null && Number.isFinite(v.reward)) {
      this.outcomes.rewardSum += v.reward;
      this.outcomes.scored += 1;
    }
    if (v.class !== 'infra_error') return this.breaker.recordSuccess();
    const cause = v.cause ?? 'other';
    this.outcomes.causes[cause] = (this.outcomes.causes[cause] ?? 0) + 1;
    // A rollout the trainer stopped says nothing about the backend.
    if (cause !== 'stopped') this.breaker.recordFailure(cause, v.error ?? 'infra failure');
  }

  /**
   * Stops running rollouts (their sandboxes are removed), closes every backend, then removes what
   * only a running server needs (the k8s capture proxy: every session was mirrored when its rollout
   * ended, cancelled ones included). A restarted server creates it again.
   */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.reaper);
    this.breaker.dispose();
    for (const c of this.running) c.abort();
    // Aborted rollouts record their end and mirror their session before their backend goes (bounded:
    // one still opening its engine's backend does not see the abort).
    for (const end = Date.now() + 30_000; this.running.size && Date.now() < end;) await new Promise((r) => setTimeout(r, 50));
    const open = await Promise.allSettled(this.engines.values());
    const mod = await this.module();
    for (const o of open) {
      if (o.status !== 'fulfilled') continue;
      await o.value.backend.close().catch((err: unknown) => this.opts.log(`closing a backend: ${String(err)}`));
      await o.value.capture.close().catch((err: unknown) => this.opts.log(`closing a capture: ${String(err)}`));
      await mod
        .cleanup(o.value.manifest, this.opts.log, { finished: true })
        .catch((err: unknown) => this.opts.log(`removing the sandboxes of ${o.value.manifest.batch_id}: ${String(err)}`));
    }
  }
}

export function servedTaskName(split: string, index: number): string {
  return `${split}:${index}`;
}

function slugPart(text: string): string {
  return text.replace(/[^A-Za-z0-9_-]+/g, '-').slice(0, 40) || 'split';
}

function readCapturedSession(dir: string, sessionId: string, log: (line: string) => void): RolloutDocument | null {
  const file = batchSessionFile(dir, sessionId);
  if (!existsSync(file)) return null;
  try {
    return readRolloutFile(file, { includeMessages: true }).doc;
  } catch (err) {
    if (!(err instanceof RolloutFileError)) throw err;
    log(`  ${sessionId}: ${err.message}`);
    return null;
  }
}

function blankResult(args: RunRolloutArgs, dataset: string, task: { id: string; name: string } | null): HarborRolloutResult {
  return {
    task_id: task?.id ?? '',
    task_name: task?.name ?? '',
    dataset,
    harness: args.harness,
    sandbox: args.sandbox ?? 'docker',
    trial_name: '',
    session_id: '',
    reward: null,
    rewards: {},
    reward_key: args.reward_key ?? null,
    step_results: [],
    rollout_type: args.purpose === 'eval' ? 'eval' : 'train',
    capture_level: 'none',
    param_fixes: [],
    turns: [],
    conversations: [],
    n_turns: 0,
    n_roots: 0,
    budget_stop_count: 0,
    n_trainable_tokens: 0,
    multi_turn: false,
    atif: null,
    trace_source: 'proxy',
    findings: [],
    wall_s: 0,
    phase_timings: {},
    agent_log_tail: '',
    ok: false,
    error: null,
    exception_type: null,
    rollout_class: null,
    policy_version: args.policy_version == null ? null : String(args.policy_version),
  };
}

/**
 * The reward key, resolved on the server as OpenEnv does: the exact key, else the first of a
 * comma-separated preference list that exists, else the only key, else `reward`.
 */
export function resolveRewardKey(wanted: string | null | undefined, rewards: Record<string, number>): string | null {
  const keys = Object.keys(rewards);
  if (wanted) {
    if (wanted in rewards) return wanted;
    for (const k of wanted.split(',').map((x) => x.trim())) if (k && k in rewards) return k;
  }
  if (keys.length === 1) return keys[0]!;
  return 'reward' in rewards ? 'reward' : null;
}

interface ResultInput {
  base: HarborRolloutResult;
  args: RunRolloutArgs;
  verdict: Verdict;
  doc: RolloutDocument | null;
  findings: string[];
  outDir: string;
  sessionId: string;
  rolloutId: string;
  started: number;
  facts: { agent: { ms: number }; verifier: { ms: number } | null };
  timeoutSec: number;
  queueS: number;
}

function resultOf(r: ResultInput): HarborRolloutResult {
  const { verdict, doc } = r;
  const findings = [...new Set([...r.findings, ...(doc?.validation ?? [])])];
  const rewards: Record<string, number> = {};
  for (const [k, v] of Object.entries(verdict.rewards)) {
    if (Number.isFinite(v)) rewards[k] = v;
    else findings.push(`[WARN] non_finite_reward: score '${k}' was ${v}; dropped`);
  }
  if (verdict.reward !== null && Object.keys(rewards).length === 0) rewards.reward = verdict.reward;
  let ok = verdict.state === 'done';
  let reward: number | null = ok ? verdict.reward : null;
  let error = verdict.error && !ok ? verdict.error : null;
  let exceptionType = ok ? null : exceptionOf(verdict.class);
  const key = ok ? resolveRewardKey(r.args.reward_key, rewards) : (r.args.reward_key ?? null);
  if (ok && key === null) {
    ok = false;
    reward = null;
    error = `reward key '${r.args.reward_key ?? ''}' matches none of the verifier's scores (${Object.keys(rewards).join(', ') || 'none'})`;
    exceptionType = 'RewardKeyError';
  } else if (ok && key) reward = rewards[key] ?? reward;
  const turns = doc ? harborTurns(doc) : [];
  const agentTail = tail(join(r.outDir, 'agent'));
  return {
    ...r.base,
    trial_name: r.rolloutId,
    session_id: r.sessionId,
    reward,
    rewards,
    reward_key: key,
    step_results: Object.keys(rewards).length ? [{ name: 'verifier', rewards, passed: reward !== null && reward > 0 }] : [],
    capture_level: doc?.capture_level ?? 'none',
    // An eval rollout is never trained on, whatever its capture level (the client refuses its trace).
    rollout_type: r.args.purpose === 'eval' ? 'eval' : (doc?.rollout_type ?? r.base.rollout_type),
    turns: r.args.purpose === 'eval' ? turns.map((t) => ({ ...t, trainable: false })) : turns,
    conversations: doc ? conversations(doc) : [],
    n_turns: doc?.stats.n_turns ?? 0,
    n_roots: doc?.stats.n_roots ?? 0,
    budget_stop_count: doc?.budget_stop_count ?? 0,
    n_trainable_tokens: doc?.stats.n_trainable_tokens ?? 0,
    multi_turn: (doc?.stats.n_turns ?? 0) > 1,
    atif: readJsonOrNull(join(r.outDir, 'agent', 'trajectory.json')),
    findings,
    wall_s: (Date.now() - r.started) / 1000,
    phase_timings: { queue_s: r.queueS, agent_s: r.facts.agent.ms / 1000, verifier_s: (r.facts.verifier?.ms ?? 0) / 1000 },
    agent_log_tail: agentTail,
    ok,
    error,
    exception_type: exceptionType,
    rollout_class: verdict.class,
  };
}

function exceptionOf(cls: string): string {
  return cls === 'timeout' ? 'AgentTimeoutError' : cls === 'infra_error' ? 'InfraError' : 'RolloutError';
}

function harborTurns(doc: RolloutDocument): HarborTurn[] {
  const trained = new Map<string, { turn: RolloutDocument['traces'][number]['turns'][number]; role: string }>();
  for (const t of doc.traces)
    for (const turn of t.turns) if (!trained.has(turn.node_id) || t.role === 'agent') trained.set(turn.node_id, { turn, role: t.role });
  const calls = new Map(doc.calls.map((c) => [c.call_id, c]));
  return doc.turns.map((t) => {
    const tr = trained.get(t.node_id);
    const call = calls.get(t.node_id);
    const msg = (t.response_message ?? null) as {
      content?: unknown;
      tool_calls?: { function?: { name?: string; arguments?: unknown } }[];
    } | null;
    const completion = tr?.turn.completion_token_ids ?? call?.completion_token_ids ?? [];
    const role = tr?.role ?? (t.discarded ? 'discarded' : 'agent');
    return {
      turn: t.index,
      role,
      finish_reason: t.finish_reason,
      prompt_token_ids: tr?.turn.prompt_token_ids ?? call?.prompt_token_ids ?? [],
      completion_token_ids: completion,
      per_token_logps: tr?.turn.per_token_logps ?? call?.logprobs ?? [],
      loss_mask: tr?.turn.loss_mask ?? null,
      node_id: t.node_id,
      n_tools: t.n_tools,
      discarded: t.discarded,
      trainable:
        tr !== undefined && role === 'agent' && !t.discarded && completion.length > 0 && doc.trainable && doc.rollout_type === 'train',
      sampling_params: t.sampling_params,
      requested_sampling_params: t.requested_sampling_params,
      text: typeof msg?.content === 'string' ? msg.content : '',
      tool_calls: (msg?.tool_calls ?? []).map((c) => ({ name: c.function?.name ?? '', arguments: c.function?.arguments ?? null })),
      request_messages: [...(t.request_messages ?? [])],
      request_tools: t.request_tools ? [...t.request_tools] : null,
    };
  });
}

/** Each root-to-leaf path's messages: the last turn's request plus its answer. */
function conversations(doc: RolloutDocument): unknown[][] {
  const byId = new Map(doc.turns.map((t) => [t.node_id, t]));
  return doc.graph.leaves.map((leaf) => {
    const t = byId.get(leaf);
    return t ? [...(t.request_messages ?? []), ...(t.response_message ? [t.response_message] : [])] : [];
  });
}

function readJsonOrNull(file: string): unknown {
  try {
    return JSON.parse(readFileSync(file, 'utf8'));
  } catch {
    return null;
  }
}

/** The end of the harness's own log (whatever .log/.txt files the sandbox left under agent/). */
function tail(agentDir: string): string {
  if (!existsSync(agentDir)) return '';
  const files = readdirSync(agentDir)
    .filter((n) => /\.(log|txt)$/.test(n))
    .sort();
  const text = files.map((n) => readFileSync(join(agentDir, n), 'utf8')).join('\n');
  return text.slice(-LOG_TAIL_CHARS);
}
