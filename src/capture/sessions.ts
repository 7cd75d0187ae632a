// One capture session: identity, budget counters, the calls recorded so far, its live graph and its
// rollout document. The registry (session-registry.ts) holds them and makes them durable.
//
// A stored session's calls and graph are resident only while someone reads them: the counters stay
// (they are what the budget, the listing and the next call's index need), the calls load from the
// store on first use and leave again when the registry evicts the session (`unload`).
import { createHash, randomBytes } from 'node:crypto';
import { z } from 'zod';
import { RolloutGraph } from './graph.js';
import { buildRollout, type RolloutDocument, type RolloutOptions } from './rollout.js';
import { SESSION_ID_PATTERN, type LoadedSession, type SessionTally } from './store.js';
import type { CallRecord, CaptureLevel, JsonObject, PINNABLE_SAMPLING_KEYS, SessionInfo } from './types.js';

/** What a reader of a rollout chooses; everything else comes from the session. */
export type RolloutReadOptions = Pick<RolloutOptions, 'purpose' | 'includeDiscarded' | 'includeMessages' | 'includeTraces'>;

export { SESSION_ID_PATTERN };

const RESERVED_METADATA_KEYS = ['session_id', 'upstream', 'capture_level', 'max_model_calls', 'sampling', 'purpose', 'eval_sampling'];

export const CreateSessionSchema = z
  .object({
    session_id: z.string().regex(SESSION_ID_PATTERN, 'session_id must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$').optional(),
    model: z.string().min(1).optional(),
    /** The session's own secret key (then its id is an identifier only, never a credential). */
    api_key: z
      .string()
      .min(16, 'api_key must be at least 16 characters')
      .max(512)
      .regex(/^[A-Za-z0-9._~+/=-]+$/, 'api_key may hold only letters, digits and ._~+/=-')
      .optional(),
    /** Mint a secret key for the session; the creator's answer carries it once. */
    mint_key: z.boolean().optional(),
    max_model_calls: z.number().int().nonnegative().optional(),
    /** Pinned on every call (a batch's training sampling): temperature finite and > 0, the rest at chosen values. */
    sampling: z
      .object({
        temperature: z.number().finite().positive().optional(),
        top_p: z.number().finite().gt(0).max(1).optional(),
        top_k: z.number().int().min(-1).optional(),
        min_p: z.number().finite().min(0).max(1).optional(),
        frequency_penalty: z.number().finite().optional(),
        presence_penalty: z.number().finite().optional(),
        repetition_penalty: z.number().finite().positive().optional(),
        seed: z.number().int().optional(),
      } satisfies Record<(typeof PINNABLE_SAMPLING_KEYS)[number], z.ZodType>)
      .strict()
      .optional(),
    metadata: z
      .record(z.string(), z.unknown())
      .refine((m) => !RESERVED_METADATA_KEYS.some((k) => k in m), {
        message: `metadata must not use the reserved keys ${RESERVED_METADATA_KEYS.join(', ')}`,
      })
      .optional(),
  })
  .loose()
  .refine((r) => !(r.api_key !== undefined && r.mint_key), { message: 'give api_key or mint_key, not both', path: ['mint_key'] });
export type CreateSessionRequest = z.infer<typeof CreateSessionSchema>;

export function mintSessionId(): string {
  return `s${randomBytes(12).toString('hex')}`;
}

/** A fresh secret session key (192 random bits); only its SHA-256 is ever stored. */
export function mintSessionKey(): string {
  return `hlk-${randomBytes(24).toString('base64url')}`;
}

export function sessionKeyHash(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

/** Reads a stored session's calls (in arrival order) when they are first needed. */
export type CallLoader = (session: CaptureSession) => CallRecord[];

export class CaptureSession {
  /** The calls while resident; undefined while they live only in the store (see `calls`). */
  private resident: CallRecord[] | undefined = [];
  /** Ids of the resident calls: a load may already hold a call whose addCall is still to come. */
  private residentIds: Set<string> | undefined;
  private loader: CallLoader | undefined;
  private nCalls = 0;
  private okCalls = 0;
  private promptTokens = 0;
  private completionTokens = 0;
  private forwarded = 0;
  private arrivals = 0;
  private budgetStops = 0;
  private engineErrors = 0;
  private lastActivity = Date.now();
  /** Restored by a restart and not used since: the registry may forget it without waiting. */
  private restoredIdle = false;
  /** Forwarded calls whose record is not settled yet (stored, or failed to store). */
  private inFlight = 0;
  /** Session-level findings, e.g. a context-window overflow answered with the stop message. */
  private readonly sessionFindings: string[] = [];

  private liveGraph: RolloutGraph | undefined;

  constructor(readonly info: SessionInfo) {}

  /** A session as the store holds it: what a restart, or a reader of a data dir, gets back. */
  static fromStore(loaded: LoadedSession): CaptureSession {
    const session = new CaptureSession(loaded.info);
    for (const call of loaded.calls) session.addCall(call);
    session.budgetStops = loaded.budgetStops;
    session.forwarded = loaded.calls.length;
    session.arrivals = loaded.calls.reduce((n, c) => Math.max(n, c.index + 1), 0);
    return session;
  }

  /**
   * A stored session known by its tally only (a restart's index): its calls load through `loader`
   * on first use. A session created by a recording registry starts the same way with an empty tally.
   */
  static stored(info: SessionInfo, tally: SessionTally, loader: CallLoader): CaptureSession {
    const session = new CaptureSession(info);
    session.resident = undefined;
    session.loader = loader;
    session.nCalls = tally.n;
    session.okCalls = tally.ok;
    session.promptTokens = tally.pt;
    session.completionTokens = tally.ct;
    session.engineErrors = tally.ee;
    session.budgetStops = tally.bs;
    session.forwarded = tally.n;
    session.arrivals = tally.next;
    return session;
  }

  /** Every call recorded so far, in arrival order (read from the store if they are not resident). */
  get calls(): CallRecord[] {
    if (this.resident === undefined) {
      const loaded = this.loader!(this);
      this.resident = loaded;
      this.residentIds = new Set(loaded.map((c) => c.call_id));
    }
    return this.resident;
  }

  /** Calls recorded so far, counted without reading them from the store. */
  get callCount(): number {
    return this.nCalls;
  }

  /** Whether the calls are in memory. */
  get isResident(): boolean {
    return this.resident !== undefined;
  }

  /** Drops the calls and the graph (they stay in the store); a no-op for a session that has no store. */
  unload(): void {
    if (!this.loader) return;
    this.resident = undefined;
    this.residentIds = undefined;
    this.liveGraph = undefined;
  }

  get id(): string {
    return this.info.session_id;
  }

  /** Calls forwarded to the engine: what the budget counts. */
  get modelCalls(): number {
    return this.forwarded;
  }

  get budgetStopCount(): number {
    return this.budgetStops;
  }

  get upstreamErrors(): number {
    return this.engineErrors;
  }

  get findings(): readonly string[] {
    return this.sessionFindings;
  }

  /** The session's rollout graph, kept up to date call by call (rebuilt if the capture level changed). */
  graph(level: CaptureLevel): RolloutGraph {
    if (!this.liveGraph || this.liveGraph.captureLevel !== level)
      this.liveGraph = RolloutGraph.fromRecords(this.calls, { captureLevel: level });
    return this.liveGraph;
  }

  /** Adds a recorded call; linking it never fails the call (a failure becomes a session finding). */
  addCall(record: CallRecord): void {
    if (this.residentIds?.has(record.call_id)) return; // already read back from the store by a load
    this.nCalls++;
    if (record.error) {
      if (record.error.kind === 'engine') this.engineErrors++;
    } else {
      this.okCalls++;
      this.promptTokens += record.prompt_token_ids?.length ?? record.usage?.prompt_tokens ?? 0;
      this.completionTokens += record.completion_token_ids?.length ?? record.usage?.completion_tokens ?? 0;
    }
    // Not resident: the store has it, and the next read loads it with the rest.
    if (this.resident === undefined) return;
    this.resident.push(record);
    this.residentIds?.add(record.call_id);
    const level = this.info.capture_level;
    if (!level) return;
    try {
      this.graph(level).add(record);
    } catch (err) {
      this.sessionFindings.push(
        `[FATAL] capture_ingest_failed: call ${record.call_id}: ${err instanceof Error ? err.message : String(err)}`,
      );
      this.liveGraph = undefined;
    }
  }

  addFinding(finding: string): void {
    this.sessionFindings.push(finding);
  }

  /** A harness called with this session's key. */
  touch(): void {
    this.lastActivity = Date.now();
    this.restoredIdle = false;
  }

  /** A restart's session: idle until a harness uses it again. */
  markRestored(): void {
    this.restoredIdle = true;
  }

  /**
   * Whether the registry may forget this session, its file holding everything about it: stored,
   * calls not in memory, no call in flight, no finding that lives only in memory, idle long enough.
   */
  canGoDormant(idleMs: number, now = Date.now()): boolean {
    return (
      this.loader !== undefined &&
      this.resident === undefined &&
      this.inFlight === 0 &&
      this.sessionFindings.length === 0 &&
      (this.restoredIdle || now - this.lastActivity >= idleMs)
    );
  }

  /** Whether the capture level is still to be fixed at `engineLevel`: not fixed yet, or no call recorded and the engine graded again. */
  captureLevelOpen(engineLevel: CaptureLevel): boolean {
    const current = this.info.capture_level;
    return current === undefined || (this.nCalls === 0 && current !== engineLevel);
  }

  /** Fixes the capture level (the registry calls this once the level is on disk). */
  fixCaptureLevel(level: CaptureLevel): void {
    this.info.capture_level = level;
  }

  /** Reserves one forwarded call, or returns false when the budget is spent. Synchronous by design. */
  tryReserveCall(): boolean {
    const max = this.info.max_model_calls;
    if (max > 0 && this.forwarded >= max) return false;
    this.forwarded++;
    this.inFlight++;
    return true;
  }

  /** A forwarded call's record was stored (or failed to be): it is no longer in flight. */
  settleCall(): void {
    if (this.inFlight > 0) this.inFlight--;
  }

  /** A call answered with the budget stop instead of reaching the engine. */
  countBudgetStop(): void {
    this.budgetStops++;
  }

  /** The arrival index of the next forwarded call. */
  takeIndex(): number {
    return this.arrivals++;
  }

  /**
   * The session's rollout document, read from the session itself: its info, capture level, budget
   * stops, findings and live graph. `fallbackLevel` is for a session that never fixed its level.
   */
  rollout(opts: RolloutReadOptions = {}, fallbackLevel: CaptureLevel = 'tokens'): RolloutDocument {
    const captureLevel = this.info.capture_level ?? fallbackLevel;
    return buildRollout(this.info, this.calls, {
      ...opts,
      budgetStopCount: this.budgetStops,
      captureLevel,
      sessionFindings: this.sessionFindings,
      graph: this.graph(captureLevel),
    });
  }

  /** What the session's resident calls cost in memory, roughly (token arrays dominate). */
  get residentBytesEstimate(): number {
    return this.resident === undefined ? 0 : 8 * (this.promptTokens + this.completionTokens) + 2048 * this.nCalls;
  }

  /** The listing's view; `roots` is null while the graph is not built (the calls not resident). */
  summary(): JsonObject {
    const graph = this.liveGraph;
    return {
      session_id: this.id,
      created_at: this.info.created_at,
      model: this.info.model,
      n_calls: this.nCalls,
      turns: this.okCalls,
      roots: graph ? graph.roots().length : null,
      capture_level: this.info.capture_level ?? null,
      prompt_tokens: this.promptTokens,
      completion_tokens: this.completionTokens,
      model_calls: this.forwarded,
      max_model_calls: this.info.max_model_calls,
      budget_stop_count: this.budgetStops,
      upstream_errors: this.engineErrors,
      idle_s: Math.round((Date.now() - this.lastActivity) / 1000),
      metadata: this.info.metadata,
      ...(this.info.sampling ? { sampling: this.info.sampling } : {}),
      ...(this.info.key_sha256 ? { keyed: true } : {}),
    };
  }
}
