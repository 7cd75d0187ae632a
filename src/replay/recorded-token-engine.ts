// The replay of a rollout captured in token-in mode (the proxy rendered every prompt with the model's
// tokenizer and chat template, and the engine took token ids; docs/token-in.md). The replay's proxy
// runs in the same mode: each call the harness makes goes through the bridge again, and the prompt
// ids it builds reach the record on the token route instead of an engine. The call is matched on the
// ladder as a chat replay is (match.ts: the messages and tools), and then on the ids:
//   - the same messages must give the same prompt ids, token for token; where they do not (another
//     tokenizer, chat template or bridge than the capture's), the replay halts naming the first
//     differing position, with the text of both sides around it;
//   - tolerated messages (a harness's own ids, timestamps) give other ids where they differ: the call
//     stays tolerated, its differences listed by field as usual.
// The answer is the recorded sampled ids with their logprobs, in the route's answer shape, so the
// proxy parses, records and streams them exactly as it did the first time. A fork sends its calls
// from its turn on to the live engine's token route with the prompt ids the bridge built, so the fork
// and the original share their context token for token.
import type { EngineReply } from '../capture/engine-client.js';
import type { CallSource } from '../capture/render/bridge.js';
import { InThreadRenderer, type Renderer } from '../capture/render/renderer.js';
import { TokenInEngine, type TokenInOptions, type TokenInReply, type TokenRoute } from '../capture/render/token-engine.js';
import type { ChatRequest } from '../capture/types.js';
import type { FieldDifference } from './match.js';
import { RecordedEngine, type ForkTarget } from './recorded-engine.js';
import type { ReplayCall, ReplaySource } from './source.js';

/** Tokens shown on each side of the first differing prompt position. */
const ID_WINDOW = 6;

/** The prompt ids of a token-route request body (vLLM `prompt`, SGLang `input_ids`). */
function sentPromptIds(route: TokenRoute, body: unknown): number[] | null {
  const b = body as { prompt?: unknown; input_ids?: unknown } | null;
  const ids = route === '/generate' ? b?.input_ids : b?.prompt;
  return Array.isArray(ids) && ids.every((v) => Number.isInteger(v)) ? (ids as number[]) : null;
}

/** The first position where two id lists differ (a length difference counts), or -1. */
export function firstIdDifference(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

/** The recorded sampled ids and logprobs in the answer shape of `route`, as an engine would give them. */
export function recordedTokenAnswer(route: TokenRoute, call: ReplayCall, prompt: number[], model: string): unknown {
  const ids = call.completion_token_ids ?? [];
  const lps = call.logprobs && call.logprobs.length === ids.length ? call.logprobs : null;
  const top = call.top_logprobs && call.top_logprobs.length === ids.length ? call.top_logprobs : null;
  const finish = call.finish_reason === 'length' ? 'length' : 'stop';
  if (route === '/generate')
    return {
      text: '',
      output_ids: ids,
      meta_info: {
        finish_reason: { type: finish },
        prompt_tokens: prompt.length,
        completion_tokens: ids.length,
        ...(lps ? { output_token_logprobs: ids.map((id, i) => [lps[i], id, null]) } : {}),
        ...(top ? { output_top_logprobs: top.map((row) => row.map((t) => [t.logprob, t.token_id, null])) } : {}),
      },
    };
  return {
    object: 'text_completion',
    model,
    choices: [
      {
        index: 0,
        text: '',
        token_ids: ids,
        prompt_token_ids: prompt,
        finish_reason: finish,
        logprobs: lps
          ? {
              tokens: ids.map((id) => `token_id:${id}`),
              token_logprobs: lps,
              top_logprobs: top ? top.map((row) => Object.fromEntries(row.map((t) => [`token_id:${t.token_id}`, t.logprob]))) : null,
            }
          : null,
      },
    ],
    usage: { prompt_tokens: prompt.length, completion_tokens: ids.length, total_tokens: prompt.length + ids.length },
  };
}

/** A recorded engine that also answers the token route, matching the prompt ids the bridge built. */
export class RecordedTokenEngine extends RecordedEngine {
  /** The chat request each in-flight token-route call renders, keyed by the call's own abort signal. */
  private readonly inFlight = new WeakMap<AbortSignal, ChatRequest>();

  constructor(
    source: ReplaySource,
    private readonly renderer: Renderer,
    fork?: ForkTarget,
  ) {
    super(source, fork);
  }

  /** Ties the token-route post that `signal` will carry to the chat request it renders. */
  expect(signal: AbortSignal, request: ChatRequest): void {
    this.inFlight.set(signal, request);
  }

  forget(signal: AbortSignal): void {
    this.inFlight.delete(signal);
  }

  override async post(route: string, body: unknown, signal?: AbortSignal): Promise<EngineReply> {
    const request = signal ? this.inFlight.get(signal) : undefined;
    if (!request || (route !== '/v1/completions' && route !== '/generate')) return super.post(route, body, signal);
    const position = this.calls.length;
    const live = this.liveAt(position);
    if (live) return live.post(route, body, signal);
    if (this.halt) return this.refuse(`the replay halted at call ${this.halt.position}; no further answers`);
    const prompt = sentPromptIds(route, body);
    if (!prompt) return { status: 400, body: { error: { message: `replay: the ${route} request carries no prompt ids` } } };
    const chosen = this.choose(request, position);
    if ('refused' in chosen) return chosen.refused;
    const { call, match } = chosen;
    const recordedIds = call.prompt_token_ids ?? null;
    if (!recordedIds && !call.error)
      return this.haltAt(
        position,
        call.index,
        { path: 'prompt_token_ids', recorded: null, replayed: `${prompt.length} ids` },
        `replay: recorded call ${call.index} kept no prompt ids, so the token-in replay cannot compare call ${position}`,
      );
    const at = recordedIds ? firstIdDifference(recordedIds, prompt) : -1;
    // The same messages rendered to other ids: the renderer or the bridge is not the capture's.
    if (at >= 0 && match.level === 'exact') {
      const difference = this.idDifference(recordedIds!, prompt, at);
      return this.haltAt(
        position,
        call.index,
        difference,
        `replay: call ${position} has the messages of recorded call ${call.index} but other prompt ids, first at position ${at}`,
      );
    }
    this.take(position, call, match);
    return this.recordedError(call) ?? { status: 200, body: recordedTokenAnswer(route, call, prompt, this.source.model ?? '') };
  }

  /** A prompt-id difference as the report shows it: the differing token first, then the text around it. */
  private idDifference(recorded: readonly number[], replayed: readonly number[], at: number): FieldDifference {
    const side = (ids: readonly number[]) => {
      const id = ids[at];
      const token = id === undefined ? '(the prompt ends)' : `token ${id} ${JSON.stringify(this.renderer.decode([id]))}`;
      return `${token} in ${JSON.stringify(this.renderer.decode(ids.slice(Math.max(0, at - ID_WINDOW), at + ID_WINDOW)))}`;
    };
    return { path: `prompt_token_ids[${at}]`, recorded: side(recorded), replayed: side(replayed) };
  }
}

/** The proxy's token-in engine for a replay: the bridge as in capture, the record (or a fork's engine) behind it. */
export class ReplayTokenInEngine extends TokenInEngine {
  constructor(
    private readonly recorded: RecordedTokenEngine,
    renderer: Renderer,
    options: TokenInOptions,
  ) {
    // The replay tokenizes in this thread: one rollout, and the record's own decode needs the Renderer.
    super(recorded, new InThreadRenderer(renderer), options);
  }

  override async complete(owner: object, calls: CallSource, request: ChatRequest, signal?: AbortSignal): Promise<TokenInReply> {
    // The record is matched on the chat request too; the token route sees only ids, so the request
    // travels with the call's own abort signal (one per call, passed through to the post).
    const own = signal ?? new AbortController().signal;
    this.recorded.expect(own, request);
    try {
      return await super.complete(owner, calls, request, own);
    } finally {
      this.recorded.forget(own);
    }
  }
}
