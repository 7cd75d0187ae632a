// Token in, token out: the adapter between the proxy and an engine that takes token ids. It takes the
// internal chat request (already pinned and capped by buildEngineRequest), builds the prompt ids with
// the bridge, calls the engine's token route (vLLM `/v1/completions` with a token-id prompt, SGLang
// `/generate` with `input_ids`), parses the sampled ids into an assistant message, and answers in the
// vLLM chat shape (top-level prompt_token_ids, choices[0].token_ids, logprobs.content with
// `token_id:N`), so dialects, streaming replay, recording, the graph and sequences work unchanged.
import { createHash, type Hash } from 'node:crypto';
import type { ChatEngine, EngineClient, EngineReply } from '../engine-client.js';
import {
  PINNABLE_SAMPLING_KEYS,
  type CallRecord,
  type ChatMessage,
  type ChatRequest,
  type ChatResponse,
  type ChatTool,
  type LogprobEntry,
} from '../types.js';
import { randomHex } from '../random-hex.js';
import { ByteParts } from '../byte-parts.js';
import { allTokenIds, isTokenId, sameIds } from '../token-ids.js';
import { Bridge, type BridgeOptions, type BridgePlan, type CallSource, type RenderInfo } from './bridge.js';
import { hashIds, tokensDigest } from './digest.js';
import { UnsupportedFamilyError } from './families.js';
import type { TokenRenderer } from './renderer.js';

export type TokenRoute = '/v1/completions' | '/generate';

/** What one token-in call gives the proxy: an engine reply in chat shape, plus how the prompt was made. */
export interface TokenInReply extends EngineReply {
  render: RenderInfo;
  findings: string[];
}

interface Sampled {
  ids: number[];
  logprobs: (number | null)[] | null;
  top: { id: number; logprob: number }[][] | null;
  finish: string | null;
  echoedPrompt: number[] | null;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const TOKEN_ID = /^token_id:(\d+)$/;

/**
 * Ids as the text of a JSON array's elements (`1,2,3`). JSON.stringify writes 108k ids in about
 * 1.5 ms; Array.prototype.join took 5-7 ms for the same list (a new root's whole prompt).
 */
function idsText(ids: readonly number[]): string {
  return JSON.stringify(ids).slice(1, -1);
}

export class TokenInEngineError extends Error {}

const ECHO_KEY = Buffer.from('"prompt_token_ids":');
const NULL_TEXT = 'null';
const CLOSE_BRACKET = Buffer.from(']');

/**
 * An answer's bytes with its prompt-id echo (`"prompt_token_ids":[…]`, the first one) cut out: a
 * 128k-token echo is compared with the ids the proxy sent as bytes (one memcmp), never decoded or
 * parsed into numbers; only the rest of the answer becomes text. `echo` is null when there is none
 * to cut (the answer is then decoded whole); it is the echo's own text when it differs from `expected`.
 * (Inside a JSON string a quote is escaped, so the key cannot match there.)
 */
export function cutPromptEcho(bytes: Buffer | readonly Buffer[], expected?: Buffer): { rest: string; echo: Buffer | string | null } {
  // The answer as the chunks it arrived in: only the text around the echo is joined (byte-parts.ts).
  const body = ByteParts.of(bytes);
  const at = body.indexOf(ECHO_KEY);
  const whole = () => ({ rest: body.toString('utf8'), echo: null });
  if (at < 0) return whole();
  let i = at + ECHO_KEY.length;
  while (body.byteAt(i) === 0x20) i++;
  if (body.byteAt(i) !== 0x5b /* [ */) return whole();
  const cut = (end: number) => `${body.toString('utf8', 0, i)}${NULL_TEXT}${body.toString('utf8', end + 1)}`;
  // The usual case, the ids exactly as sent: one comparison, no scan of the echo.
  if (expected !== undefined && body.byteAt(i + 1 + expected.length) === 0x5d /* ] */ && body.equalsAt(i + 1, expected))
    return { rest: cut(i + 1 + expected.length), echo: expected };
  const close = body.indexOf(CLOSE_BRACKET, i);
  if (close < 0) return whole();
  const echo = body.toString('latin1', i + 1, close);
  if (!/^[\d,\s]*$/.test(echo)) return whole();
  return { rest: cut(close), echo };
}

/** vLLM `/v1/completions` answer -> sampled ids and logprobs; defensive about every field. */
export function readCompletionsAnswer(body: unknown): Sampled {
  if (!isObject(body) || !Array.isArray(body.choices) || !isObject(body.choices[0]))
    throw new TokenInEngineError('completions answer has no choices[0]');
  const c = body.choices[0];
  if (!Array.isArray(c.token_ids) || !allTokenIds(c.token_ids))
    throw new TokenInEngineError('completions answer has no choices[0].token_ids (an engine without return_token_ids?)');
  const ids = c.token_ids as number[];
  let logprobs: (number | null)[] | null = null;
  let top: { id: number; logprob: number }[][] | null = null;
  const lp = c.logprobs;
  if (isObject(lp) && Array.isArray(lp.token_logprobs)) {
    logprobs = lp.token_logprobs.map((v) => (typeof v === 'number' ? v : null));
    const tokens = Array.isArray(lp.tokens) ? lp.tokens : [];
    // A token that names a different id than the one sampled makes the whole turn's logprobs unusable.
    for (let i = 0; i < tokens.length && logprobs; i++) {
      const m = typeof tokens[i] === 'string' ? TOKEN_ID.exec(tokens[i] as string) : null;
      if (m && Number(m[1]) !== ids[i]) logprobs = null;
    }
    if (Array.isArray(lp.top_logprobs)) {
      top = lp.top_logprobs.map((entry) =>
        isObject(entry)
          ? Object.entries(entry)
              .map(([k, v]) => ({ id: Number(TOKEN_ID.exec(k)?.[1] ?? NaN), logprob: typeof v === 'number' ? v : NaN }))
              .filter((a) => Number.isInteger(a.id) && Number.isFinite(a.logprob))
          : [],
      );
    }
  }
  const echoed = Array.isArray(c.prompt_token_ids) && allTokenIds(c.prompt_token_ids) ? (c.prompt_token_ids as number[]) : null;
  return { ids, logprobs, top, finish: typeof c.finish_reason === 'string' ? c.finish_reason : null, echoedPrompt: echoed };
}

/** SGLang `/generate` answer -> sampled ids and logprobs (`meta_info.output_token_logprobs` tuples). */
export function readGenerateAnswer(body: unknown): Sampled {
  const one = Array.isArray(body) ? body[0] : body;
  if (!isObject(one)) throw new TokenInEngineError('generate answer is not an object');
  if (!Array.isArray(one.output_ids) || !allTokenIds(one.output_ids)) throw new TokenInEngineError('generate answer has no output_ids');
  const ids = one.output_ids as number[];
  const meta = isObject(one.meta_info) ? one.meta_info : {};
  let logprobs: (number | null)[] | null = null;
  if (Array.isArray(meta.output_token_logprobs)) {
    const entries = meta.output_token_logprobs as unknown[];
    logprobs = entries.map((e) => (Array.isArray(e) && typeof e[0] === 'number' ? e[0] : null));
    if (entries.some((e, i) => Array.isArray(e) && isTokenId(e[1]) && e[1] !== ids[i])) logprobs = null;
  }
  let top: { id: number; logprob: number }[][] | null = null;
  if (Array.isArray(meta.output_top_logprobs)) {
    top = (meta.output_top_logprobs as unknown[]).map((row) =>
      Array.isArray(row)
        ? row
            .filter((e): e is [number, number] => Array.isArray(e) && typeof e[0] === 'number' && isTokenId(e[1]))
            .map((e) => ({ id: e[1], logprob: e[0] }))
        : [],
    );
  }
  const fr = meta.finish_reason;
  const finish = isObject(fr) && typeof fr.type === 'string' ? fr.type : typeof fr === 'string' ? fr : null;
  return { ids, logprobs, top, finish: finish === 'abort' ? 'stop' : finish, echoedPrompt: null };
}

export interface TokenInOptions extends BridgeOptions {
  route: TokenRoute;
  /** The engine's context window (from /v1/models), when it says. */
  maxModelLen: number | null;
}

/** Prompts this long (their ids' text, bytes) are sent without being copied into one request buffer. */
const SPLICE_PROMPT_BYTES = 64 * 1024;

/** A prompt as sent: the JSON text of its ids (bytes) and the SHA-256 state over them (hashIds). */
interface SentPrompt {
  /** A view of `store`'s first bytes. */
  bytes: Buffer;
  state: Hash;
  store: BytesStore;
}

/**
 * The serialised ids of a branch of turns: a buffer each turn that bridges on the newest extends in
 * place (a view's bytes never change: only the turn extending the last view writes, beyond it). At
 * 108k tokens this saves each turn a 0.6 MB allocation and copy; a retry or fork copies.
 */
interface BytesStore {
  buf: Buffer;
  used: number;
}

/**
 * A new store holding `parts`, with room for a few more turns. A string part is id text (digits and
 * commas, so latin1) and is written straight in: a Buffer of it first was one more 0.7 MB copy for a
 * new root at 108k tokens.
 */
function newBytesStore(parts: readonly (Buffer | string)[]): BytesStore {
  const size = parts.reduce((n, p) => n + p.length, 0);
  const buf = Buffer.allocUnsafe(size + (size >> 3) + 1024);
  let at = 0;
  for (const p of parts) at += typeof p === 'string' ? buf.write(p, at, 'latin1') : p.copy(buf, at);
  return { buf, used: size };
}

export class TokenInEngine {
  readonly bridge: Bridge;
  /**
   * Each prompt this engine sent, by its ids array: the JSON text of the ids as bytes, and the SHA-256
   * state over them (digest.ts hashIds). A bridge's prompt starts with its anchor's, so both go on
   * from the anchor's: a turn serialises and hashes only its new ids, never the context.
   */
  private readonly sentPrompts = new WeakMap<readonly number[], SentPrompt>();

  constructor(
    // Any source of answers on the token route: an HTTP engine, or a replay's record (src/replay).
    readonly client: ChatEngine,
    readonly renderer: TokenRenderer,
    readonly options: TokenInOptions,
    /** Lets go of the renderer (its tokenizer threads) when the proxy is done with this engine. */
    private readonly releaseRenderer: () => Promise<void> = async () => undefined,
  ) {
    if (!renderer.family.supported) throw new UnsupportedFamilyError(renderer.family, renderer.source);
    this.bridge = new Bridge(renderer, options);
  }

  /** The proxy's last use of this adapter (it closes, or was pointed at another engine). */
  close(): Promise<void> {
    return this.releaseRenderer();
  }

  /** A call of `owner` was recorded (stored, or answered with an error): the bridge takes it in. */
  callRecorded(owner: object, record: CallRecord): void {
    this.bridge.observe(owner, record);
  }

  /**
   * One model call of a session (`owner` keys the session's turn index; `calls` are its records so
   * far, or the session, which reads them only if the bridge missed some). `request` is the engine
   * request buildEngineRequest made: its sampling is what is sent.
   */
  async complete(owner: object, calls: CallSource, request: ChatRequest, signal?: AbortSignal): Promise<TokenInReply> {
    const tools = Array.isArray(request.tools) && request.tools.length ? (request.tools as ChatTool[]) : undefined;
    const kwargs = (request.chat_template_kwargs ?? undefined) as Record<string, unknown> | undefined;
    const plan = await this.bridge.plan(owner, calls, { messages: request.messages, tools, kwargs });
    const prompt = plan.promptIds;
    const route = this.options.route;
    const render: RenderInfo = { ...plan.info, engine_route: route };
    const limit = this.options.maxModelLen;
    // SGLang refuses prompt + max_new_tokens >= context; vLLM allows equality.
    const room = limit === null ? Infinity : limit - prompt.length - (route === '/generate' ? 1 : 0);
    if (prompt.length === 0 || room < 1) {
      const message = `This model's maximum context length is ${limit} tokens. However, your prompt has ${prompt.length} tokens (context_length_exceeded), so no token can be generated.`;
      return {
        status: 400,
        body: { error: { message, type: 'BadRequestError', code: 'context_length_exceeded' } },
        render,
        findings: plan.findings,
      };
    }
    const asked = typeof request.max_tokens === 'number' && request.max_tokens > 0 ? request.max_tokens : Infinity;
    const maxTokens = Math.min(asked, room);
    const stopIds = [...this.renderer.stopIds];
    const promptBytes = this.sentPrompt(plan).bytes;
    const idsKey = route === '/generate' ? 'input_ids' : 'prompt';
    const rest = route === '/generate' ? this.generateBody(request, maxTokens, stopIds) : this.completionsBody(request, maxTokens, stopIds);
    // A long prompt's bytes go out as they are kept, between the body's head and tail; a short one is
    // joined (one buffer is the cheaper write when the copy is small).
    const parts = [Buffer.from(`{"${idsKey}":[`), promptBytes, Buffer.from(`],${JSON.stringify(rest).slice(1)}`)];
    const requestBody = promptBytes.length >= SPLICE_PROMPT_BYTES ? parts : [Buffer.concat(parts)];
    const sent = await this.client.postBytes(route, requestBody, signal);
    const { rest: answerText, echo } = cutPromptEcho(sent.parts, promptBytes);
    let answerBody: unknown = answerText;
    try {
      answerBody = JSON.parse(answerText);
    } catch {
      // an error page: kept as text
    }
    const reply: EngineReply = { status: sent.status, body: answerBody };
    if (reply.status !== 200) return { ...reply, render, findings: plan.findings };
    let sampled: Sampled;
    try {
      sampled = route === '/generate' ? readGenerateAnswer(reply.body) : readCompletionsAnswer(reply.body);
      // A Buffer echo is the bytes sent (cutPromptEcho found them unchanged); text is what differed.
      if (echo !== null) sampled.echoedPrompt = typeof echo === 'string' ? echo.split(',').map((v) => Number(v.trim())) : prompt;
    } catch (err) {
      return {
        status: 502,
        body: { error: { message: `engine answer on ${route}: ${(err as Error).message}` } },
        render,
        findings: plan.findings,
      };
    }
    const findings = [...plan.findings];
    if (sampled.echoedPrompt && sampled.echoedPrompt !== prompt && !sameIds(sampled.echoedPrompt, prompt)) {
      findings.push(
        `[FATAL] prompt_ids_mismatch: the engine echoed ${sampled.echoedPrompt.length} prompt ids that differ from the ${prompt.length} the proxy sent`,
      );
    }
    const parseToolCalls = !!tools && request.tool_choice !== 'none';
    const parsed = await this.renderer.parseAnswer(sampled.ids, { tools, parseToolCalls });
    render.tool_call_parse = parsed.toolCallParse;
    render.tool_call_statuses = parsed.toolCallStatuses;
    if (parsed.toolCallParse === 'failed')
      findings.push(
        `[WARN] tool_call_unparsed: a tool-call block did not parse (${parsed.toolCallStatuses.join(', ')}); the answer went to the harness as text, as vLLM does`,
      );
    const finish = !parsed.stopped ? 'length' : parsed.toolCalls.length ? 'tool_calls' : 'stop';
    const message: ChatMessage = { role: 'assistant', content: parsed.content, reasoning: parsed.reasoning };
    if (parsed.toolCalls.length) message.tool_calls = parsed.toolCalls;
    const content: LogprobEntry[] | null = sampled.logprobs
      ? sampled.ids.map((id, i) => ({
          token: `token_id:${id}`,
          logprob: sampled.logprobs![i] ?? null,
          top_logprobs: (sampled.top?.[i] ?? []).map((a) => ({ token: `token_id:${a.id}`, logprob: a.logprob })),
        }))
      : null;
    const body: ChatResponse = {
      id: `chatcmpl-${randomHex(24)}`,
      object: 'chat.completion',
      created: Math.floor(Date.now() / 1000),
      model:
        typeof (reply.body as { model?: unknown }).model === 'string'
          ? (reply.body as { model: string }).model
          : String(request.model ?? ''),
      prompt_token_ids: prompt,
      choices: [
        {
          index: 0,
          message,
          finish_reason: sampled.finish === 'length' ? 'length' : finish,
          logprobs: content ? { content } : null,
          token_ids: sampled.ids,
          stop_reason: null,
        },
      ],
      usage: { prompt_tokens: prompt.length, completion_tokens: sampled.ids.length, total_tokens: prompt.length + sampled.ids.length },
    };
    return { status: 200, body, render, findings };
  }

  /** The v2 tokens digest of a call this engine answered (its prompt's hash state is kept; see sentPrompts). */
  tokensDigest(promptIds: readonly number[] | null, sampledIds: readonly number[] | null, logprobs: readonly number[] | null): string {
    return tokensDigest(promptIds, sampledIds, logprobs, promptIds ? this.sentPrompts.get(promptIds)?.state : undefined);
  }

  /**
   * A prompt's serialised ids and hash state, kept for the turns that bridge on it. A bridge's are its
   * anchor's (kept from its call) and the new ids: one copy of the context's bytes per turn, never a
   * serialisation, an encoding or a hash of it. Without the anchor's (a retry of an older turn), they
   * are made from the whole prompt.
   */
  private sentPrompt(plan: { promptIds: number[]; parts?: BridgePlan['parts'] }): SentPrompt {
    const p = plan.parts;
    const anchor = p && this.sentPrompts.get(p.anchorPrompt);
    let sent: SentPrompt;
    if (p && anchor) {
      const tail = [p.anchorSampled, p.bridge]
        .filter((list) => list.length)
        .map(idsText)
        .join(',');
      const state = hashIds(hashIds(anchor.state.copy(), p.anchorSampled), p.bridge);
      if (!tail) sent = { bytes: anchor.bytes, state, store: anchor.store };
      else {
        const added = Buffer.from(anchor.bytes.length ? `,${tail}` : tail, 'latin1');
        const own = anchor.store;
        let store: BytesStore;
        if (own.used === anchor.bytes.length && own.buf.length - own.used >= added.length) {
          added.copy(own.buf, own.used);
          own.used += added.length;
          store = own;
        } else store = newBytesStore([anchor.bytes, added]);
        sent = { bytes: store.buf.subarray(0, store.used), state, store };
      }
    } else {
      const store = newBytesStore([idsText(plan.promptIds)]);
      sent = { bytes: store.buf.subarray(0, store.used), state: hashIds(createHash('sha256'), plan.promptIds), store };
    }
    this.sentPrompts.set(plan.promptIds, sent);
    return sent;
  }

  /** The completions body without its prompt (the ids are written in as text). */
  private completionsBody(request: ChatRequest, maxTokens: number, stopIds: number[]): Record<string, unknown> {
    const body: Record<string, unknown> = {
      model: request.model,
      max_tokens: maxTokens,
      logprobs: typeof request.top_logprobs === 'number' ? request.top_logprobs : 0,
      return_token_ids: true,
      return_tokens_as_token_ids: true,
      stop_token_ids: stopIds,
      skip_special_tokens: false,
      stream: false,
    };
    for (const key of [...PINNABLE_SAMPLING_KEYS, 'stop', 'logprobs_mode'] as const) {
      if (request[key] !== undefined && request[key] !== null) body[key] = request[key];
    }
    return body;
  }

  /** The SGLang /generate body without its input_ids (written in as text). */
  private generateBody(request: ChatRequest, maxTokens: number, stopIds: number[]): Record<string, unknown> {
    const sampling: Record<string, unknown> = {
      max_new_tokens: maxTokens,
      stop_token_ids: stopIds,
      skip_special_tokens: false,
      no_stop_trim: true,
    };
    // SGLang names the seed `sampling_seed` (below); the other pinnable keys keep their names.
    for (const key of [...PINNABLE_SAMPLING_KEYS.filter((k) => k !== 'seed'), 'stop'] as const) {
      if (request[key] !== undefined && request[key] !== null) sampling[key] = request[key];
    }
    const body: Record<string, unknown> = {
      sampling_params: sampling,
      return_logprob: true,
      logprob_start_len: -1,
      top_logprobs_num: typeof request.top_logprobs === 'number' ? request.top_logprobs : 0,
      stream: false,
    };
    if (typeof request.seed === 'number') sampling.sampling_seed = request.seed;
    return body;
  }
}

export interface TokenInProbe {
  route: TokenRoute | null;
  maxModelLen: number | null;
  /** Why the engine cannot take token ids (null when it can). */
  problem: string | null;
  /** The engine could not be reached: ask again later rather than settle on chat mode. */
  unreachable?: boolean;
}

/**
 * Whether the engine takes token-id prompts, and on which route: SGLang answers `/get_model_info`;
 * vLLM and the lab's engines answer `/v1/completions` with a token-id prompt and `return_token_ids`.
 * One token is generated from `probeIds`.
 */
export async function probeTokenIn(client: EngineClient, model: string, probeIds: number[], signal?: AbortSignal): Promise<TokenInProbe> {
  let maxModelLen: number | null = null;
  try {
    const models = await client.get('/v1/models', signal);
    const data = (models.body as { data?: unknown } | null)?.data;
    if (Array.isArray(data)) {
      const entry = (data.find((m: { id?: unknown } | null) => m?.id === model) ?? data[0]) as { max_model_len?: unknown } | undefined;
      if (entry && isTokenId(entry.max_model_len)) maxModelLen = entry.max_model_len;
    }
  } catch (err) {
    return { route: null, maxModelLen, problem: `the engine did not list its models: ${(err as Error).message}`, unreachable: true };
  }
  let route: TokenRoute = '/v1/completions';
  try {
    const info = await client.get('/get_model_info', signal);
    if (info.status === 200 && isObject(info.body) && 'model_path' in info.body) route = '/generate';
  } catch {
    // not SGLang
  }
  const body =
    route === '/generate'
      ? { input_ids: probeIds, sampling_params: { max_new_tokens: 1, temperature: 0 }, return_logprob: true, logprob_start_len: -1 }
      : { model, prompt: probeIds, max_tokens: 1, temperature: 0, logprobs: 0, return_token_ids: true, return_tokens_as_token_ids: true };
  try {
    const reply = await client.post(route, body, signal);
    if (reply.status !== 200) return { route: null, maxModelLen, problem: `${route} with a token-id prompt answered ${reply.status}` };
    const sampled = route === '/generate' ? readGenerateAnswer(reply.body) : readCompletionsAnswer(reply.body);
    if (sampled.ids.length === 0) return { route: null, maxModelLen, problem: `${route} returned no sampled ids` };
    if (!sampled.logprobs) return { route: null, maxModelLen, problem: `${route} returned no logprobs for the sampled ids` };
  } catch (err) {
    return {
      route: null,
      maxModelLen,
      problem: `${route} with a token-id prompt failed: ${(err as Error).message}`,
      unreachable: !(err instanceof TokenInEngineError),
    };
  }
  return { route, maxModelLen, problem: null };
}
