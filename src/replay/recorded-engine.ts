// The engine of a replay: answers each chat completion from a recorded rollout instead of a model.
// Each call the proxy forwards is matched against the recorded calls not yet answered (harnesses may
// send two calls at once, e.g. a title and the first turn, so the first that matches wins), and the
// recorded engine answer is given back with its token data, so the proxy records and streams it in
// the harness's dialect exactly as it did the first time. A call no recorded one matches halts the
// replay: it and every later call get an error the proxy hands the harness in its dialect.
// A fork answers from the record only before a given turn, and from a live engine from there on.
import type { ChatEngine, EngineReply } from '../capture/engine-client.js';
import type { ChatRequest } from '../capture/types.js';
import { matchCall, type CallMatch, type FieldDifference } from './match.js';
import { recordedEngineBody, type ReplayCall, type ReplaySource } from './source.js';

/** One call the harness made during the replay, and how it was answered. */
export interface ReplayedCall {
  /** Arrival position in the replay (0 = the first call). */
  position: number;
  /** The recorded call that answered it (its index in the original), or null. */
  recorded_index: number | null;
  recorded_call_id: string | null;
  /** `live` for a fork's calls from its turn on. */
  level: CallMatch['level'] | 'live';
  tolerated: FieldDifference[];
  tool_outputs: FieldDifference[];
  first_difference: FieldDifference | null;
}

export interface ReplayHalt {
  position: number;
  /** The recorded call it was compared with (the first not yet answered), or null when none was left. */
  expected_index: number | null;
  difference: FieldDifference | null;
  message: string;
}

export interface ForkTarget {
  /** Calls from this arrival position on go to `engine`. */
  fromTurn: number;
  engine: ChatEngine;
}

function answerable(c: ReplayCall): boolean {
  return c.engine_request !== null && (c.engine_response !== null || Boolean(c.error));
}

export class RecordedEngine implements ChatEngine {
  readonly baseUrl: string;
  readonly calls: ReplayedCall[] = [];
  private readonly pending: ReplayCall[];
  private halted: ReplayHalt | null = null;
  private readonly haltListeners: ((halt: ReplayHalt) => void)[] = [];
  private readonly callListeners: ((call: ReplayedCall) => void)[] = [];

  constructor(
    protected readonly source: ReplaySource,
    protected readonly fork?: ForkTarget,
  ) {
    this.baseUrl = fork ? fork.engine.baseUrl : `replay://${source.session_id}`;
    this.pending = source.calls.filter(answerable);
  }

  get halt(): ReplayHalt | null {
    return this.halted;
  }

  /** Recorded calls no replayed call asked for (by their original index). */
  get unasked(): number[] {
    return this.pending.map((c) => c.index);
  }

  onHalt(listener: (halt: ReplayHalt) => void): void {
    this.haltListeners.push(listener);
  }

  onCall(listener: (call: ReplayedCall) => void): void {
    this.callListeners.push(listener);
  }

  protected note(call: ReplayedCall): void {
    this.calls.push(call);
    for (const l of this.callListeners) l(call);
  }

  /** A fork's engine, noted as answering the call at `position`, when the fork has reached its turn. */
  protected liveAt(position: number): ChatEngine | null {
    if (!this.fork || position < this.fork.fromTurn) return null;
    this.note({
      position,
      recorded_index: null,
      recorded_call_id: null,
      level: 'live',
      tolerated: [],
      tool_outputs: [],
      first_difference: null,
    });
    return this.fork.engine;
  }

  async chatCompletion(request: ChatRequest, signal?: AbortSignal): Promise<EngineReply> {
    const position = this.calls.length;
    const live = this.liveAt(position);
    if (live) return live.chatCompletion(request, signal);
    if (this.halted) return this.refuse(`the replay halted at call ${this.halted.position}; no further answers`);
    const chosen = this.choose(request, position);
    if ('refused' in chosen) return chosen.refused;
    const { call, match } = chosen;
    this.take(position, call, match);
    return this.recordedError(call) ?? { status: 200, body: recordedEngineBody(call) };
  }

  /**
   * The first recorded call not yet answered that this request matches, or the halt (noted, listeners
   * told) when none does. Sampling is the proxy's (neutral or pinned) in both requests, so it is not
   * compared (match.ts).
   */
  protected choose(request: ChatRequest, position: number): { call: ReplayCall; match: CallMatch } | { refused: EngineReply } {
    const replayed = { request };
    let firstMismatch: CallMatch | undefined;
    for (const call of this.pending) {
      const match = matchCall({ request: call.engine_request as unknown as ChatRequest }, replayed);
      if (match.level !== 'none') return { call, match };
      firstMismatch ??= match;
    }
    const expected = this.pending[0] ?? null;
    const difference = firstMismatch?.firstDifference ?? null;
    const message = expected
      ? `replay: call ${position} matches no recorded call; against recorded call ${expected.index} the first difference is ${difference?.path ?? '(none)'}`
      : `replay: call ${position} has no recorded counterpart: the original made only ${this.source.calls.length} call(s)`;
    return { refused: this.haltAt(position, expected?.index ?? null, difference, message) };
  }

  /** Stops the replay at `position`: this call and every later one get `message` as an error. */
  protected haltAt(position: number, expectedIndex: number | null, difference: FieldDifference | null, message: string): EngineReply {
    this.halted = { position, expected_index: expectedIndex, difference, message };
    this.note({
      position,
      recorded_index: null,
      recorded_call_id: null,
      level: 'none',
      tolerated: [],
      tool_outputs: [],
      first_difference: difference,
    });
    for (const l of this.haltListeners) l(this.halted);
    return this.refuse(message);
  }

  /** `call` answers the request at `position`: it leaves the pending list and the match is noted. */
  protected take(position: number, call: ReplayCall, match: CallMatch): void {
    this.pending.splice(this.pending.indexOf(call), 1);
    this.note({
      position,
      recorded_index: call.index,
      recorded_call_id: call.call_id,
      level: match.level,
      tolerated: match.tolerated,
      tool_outputs: match.toolOutputs,
      first_difference: null,
    });
  }

  /** The engine error the original got on this call, given back the same way (null: it was answered). */
  protected recordedError(call: ReplayCall): EngineReply | null {
    if (!call.error || call.engine_response) return null;
    const status = call.error.status >= 400 && call.error.status < 600 ? call.error.status : 502;
    return { status, body: { error: { message: `recorded: ${call.error.message}` } } };
  }

  protected refuse(message: string): EngineReply {
    // 400 is passed through to the harness as a permanent error (no retry loop against a halted replay).
    return { status: 400, body: { error: { message, type: 'replay_mismatch' } } };
  }

  async post(route: string, body: unknown, signal?: AbortSignal): Promise<EngineReply> {
    if (this.fork) return this.fork.engine.post(route, body, signal);
    return { status: 404, body: { error: { message: `a replay answers chat completions only, not ${route}` } } };
  }

  /** The token route's serialised form (a token-in prompt arrives spliced as bytes): answered as `post` answers it. */
  async postBytes(route: string, body: readonly Buffer[], signal?: AbortSignal): Promise<{ status: number; parts: Buffer[] }> {
    const reply = await this.post(route, JSON.parse(Buffer.concat(body).toString('utf8')) as unknown, signal);
    return { status: reply.status, parts: [Buffer.from(JSON.stringify(reply.body))] };
  }

  async get(route: string, signal?: AbortSignal): Promise<EngineReply> {
    if (this.fork) return this.fork.engine.get(route, signal);
    if (route === '/v1/models')
      return {
        status: 200,
        body: { object: 'list', data: [{ id: this.source.model ?? 'replay', object: 'model', owned_by: 'harness-lab-replay' }] },
      };
    return { status: 404, body: { error: { message: `a replay has no route ${route}` } } };
  }

  async close(): Promise<void> {
    await this.fork?.engine.close();
  }
}
