// Live capture sessions: identity, budget counters and the calls recorded so far.
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { RolloutGraph } from './graph.js';
import type { CallRecord, CaptureLevel, JsonObject, SessionInfo } from './types.js';

export const SESSION_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

const RESERVED_METADATA_KEYS = ['session_id', 'upstream', 'capture_level', 'max_model_calls', 'sampling', 'purpose', 'eval_sampling'];

export const CreateSessionSchema = z
  .object({
    session_id: z.string().regex(SESSION_ID_PATTERN, 'session_id must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$').optional(),
    model: z.string().min(1).optional(),
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
      })
      .strict()
      .optional(),
    metadata: z
      .record(z.string(), z.unknown())
      .refine((m) => !RESERVED_METADATA_KEYS.some((k) => k in m), { message: `metadata must not use the reserved keys ${RESERVED_METADATA_KEYS.join(', ')}` })
      .optional(),
  })
  .loose();
export type CreateSessionRequest = z.infer<typeof CreateSessionSchema>;

export function mintSessionId(): string {
  return `s${randomBytes(12).toString('hex')}`;
}

export class CaptureSession {
  readonly calls: CallRecord[] = [];
  /** Calls forwarded to the engine: what the budget counts. */
  modelCalls = 0;
  /** Arrival order of the next forwarded call. */
  nextIndex = 0;
  budgetStopCount = 0;
  upstreamErrors = 0;
  lastActivity = Date.now();
  /** Session-level findings, e.g. a context-window overflow answered with the stop message. */
  readonly findings: string[] = [];

  private liveGraph: RolloutGraph | undefined;

  constructor(readonly info: SessionInfo) {}

  /** The session's rollout graph, kept up to date call by call (rebuilt if the capture level changed). */
  graph(level: CaptureLevel): RolloutGraph {
    if (!this.liveGraph || this.liveGraph.captureLevel !== level) this.liveGraph = RolloutGraph.fromRecords(this.calls, { captureLevel: level });
    return this.liveGraph;
  }

  /** Adds an answered call; linking it never fails the call (a failure becomes a session finding). */
  addCall(record: CallRecord): void {
    this.calls.push(record);
    const level = this.info.capture_level;
    if (!level) return;
    try {
      this.graph(level).add(record);
    } catch (err) {
      this.findings.push(`[FATAL] capture_ingest_failed: call ${record.call_id}: ${err instanceof Error ? err.message : String(err)}`);
      this.liveGraph = undefined;
    }
  }

  get id(): string {
    return this.info.session_id;
  }

  /** Reserves one forwarded call, or returns false when the budget is spent. Synchronous by design. */
  tryReserveCall(): boolean {
    const max = this.info.max_model_calls;
    if (max > 0 && this.modelCalls >= max) return false;
    this.modelCalls++;
    return true;
  }

  summary(): JsonObject {
    const ok = this.calls.filter((c) => !c.error);
    const graph = this.liveGraph;
    return {
      session_id: this.id,
      created_at: this.info.created_at,
      model: this.info.model,
      n_calls: this.calls.length,
      turns: ok.length,
      roots: graph ? graph.roots().length : null,
      capture_level: this.info.capture_level ?? null,
      prompt_tokens: ok.reduce((n, c) => n + (c.prompt_token_ids?.length ?? c.usage?.prompt_tokens ?? 0), 0),
      completion_tokens: ok.reduce((n, c) => n + (c.completion_token_ids?.length ?? c.usage?.completion_tokens ?? 0), 0),
      model_calls: this.modelCalls,
      max_model_calls: this.info.max_model_calls,
      budget_stop_count: this.budgetStopCount,
      upstream_errors: this.upstreamErrors,
      idle_s: Math.round((Date.now() - this.lastActivity) / 1000),
      metadata: this.info.metadata,
      ...(this.info.sampling ? { sampling: this.info.sampling } : {}),
    };
  }
}
