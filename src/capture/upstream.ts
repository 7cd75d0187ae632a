// What the proxy sends to the engine and how it reads the answer back (docs/capture-protocol.md §9).
import { allTokenIds } from './token-ids.js';
import {
  PINNABLE_SAMPLING_KEYS,
  type CaptureLevel,
  type ChatMessage,
  type ChatRequest,
  type ChatResponse,
  type JsonObject,
  type LogprobEntry,
  type PinnedSampling,
  type TokenCapture,
} from './types.js';

export const DEFAULT_MAX_OUTPUT_TOKENS = 8192;

const SAMPLING_KEYS = [...PINNABLE_SAMPLING_KEYS, 'max_tokens', 'max_completion_tokens', 'stop'] as const;

/** Knobs forced to no-ops at `tokens` level, so processed logprobs match a full-vocabulary recompute. */
const NEUTRAL_SAMPLING: JsonObject = { top_p: 1, top_k: -1, min_p: 0, frequency_penalty: 0, presence_penalty: 0, repetition_penalty: 1 };

export interface EngineRequestPlan {
  request: ChatRequest;
  requestedSampling: JsonObject;
  sampling: JsonObject;
}

function pickSampling(source: JsonObject): JsonObject {
  const out: JsonObject = {};
  for (const key of SAMPLING_KEYS) if (source[key] !== undefined) out[key] = source[key];
  return out;
}

/**
 * On a session with pinned sampling (a batch's or a served rollout's), request fields that change the
 * distribution the tokens are sampled from, so the recorded logprobs would not be the policy's:
 * refused with a 400 instead of silently trained on (docs/trainer-contracts.md §3).
 */
export function distributionChangingField(chat: ChatRequest): string | undefined {
  if (
    chat.logit_bias !== undefined &&
    chat.logit_bias !== null &&
    !(typeof chat.logit_bias === 'object' && Object.keys(chat.logit_bias).length === 0)
  )
    return 'logit_bias';
  const format = chat.response_format as { type?: unknown } | undefined;
  if (chat.json_schema !== undefined || chat.guided_json !== undefined || (format && format.type === 'json_schema')) return 'json_schema';
  if (chat.tool_choice === 'required') return 'tool_choice=required';
  if (typeof chat.min_tokens === 'number' && chat.min_tokens > 0) return 'min_tokens';
  if (chat.allowed_token_ids !== undefined && chat.allowed_token_ids !== null) return 'allowed_token_ids';
  return undefined;
}

/**
 * Chat request from a dialect -> the exact request the engine gets. Never mutates its input: only
 * top-level keys change and `messages` is a new array, so a shallow copy is enough (a deep clone of
 * the whole history on every call showed in profiles).
 */
export function buildEngineRequest(
  chat: ChatRequest,
  options: { model: string; captureLevel: CaptureLevel; maxOutputTokens?: number; pinnedSampling?: PinnedSampling },
): EngineRequestPlan {
  const request: ChatRequest = { ...chat };
  const requestedSampling = pickSampling(request);
  request.model = options.model;
  request.stream = false;
  delete request.stream_options;
  for (const key of ['tools', 'functions'] as const) {
    const list = request[key];
    if (Array.isArray(list) && list.length === 0) delete request[key];
  }
  if (request.tools === undefined && request.functions === undefined) {
    delete request.tool_choice;
    delete request.parallel_tool_calls;
  }
  if (request.max_tokens === undefined && typeof request.max_completion_tokens === 'number')
    request.max_tokens = request.max_completion_tokens;
  delete request.max_completion_tokens;
  const cap = options.maxOutputTokens ?? DEFAULT_MAX_OUTPUT_TOKENS;
  request.max_tokens = typeof request.max_tokens === 'number' && request.max_tokens > 0 ? Math.min(request.max_tokens, cap) : cap;
  const keepReasoning = options.captureLevel !== 'text';
  request.messages = request.messages.map((message) => renameReasoning(message, keepReasoning));
  if (options.captureLevel === 'tokens' || options.captureLevel === 'logprobs') {
    request.logprobs = true;
    if (typeof request.top_logprobs !== 'number') request.top_logprobs = 0;
  }
  if (options.captureLevel === 'tokens') {
    Object.assign(request, NEUTRAL_SAMPLING);
    request.return_token_ids = true;
    request.return_tokens_as_token_ids = true;
  }
  // The session's pinned sampling (a batch's) overrides whatever the harness asked for; both are recorded.
  if (options.pinnedSampling) Object.assign(request, options.pinnedSampling);
  return { request, requestedSampling, sampling: pickSampling(request) };
}

/** vLLM reads earlier-turn thinking from `reasoning`; without it the prompt stops extending the last call. */
function renameReasoning(message: ChatMessage, keep: boolean): ChatMessage {
  if (message.reasoning_content === undefined) return message;
  const { reasoning_content: reasoning, ...rest } = message;
  if (keep && reasoning != null) return { ...rest, reasoning };
  return rest;
}

export class EngineResponseError extends Error {}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The shape checks an engine answer must pass. Hand-written rather than zod on purpose: this runs on
 * every call, and validating (copying) token arrays of tens of thousands of entries shows in profiles.
 */
function engineShapeError(body: unknown): string | undefined {
  if (!isObject(body)) return 'not a JSON object';
  if (!Array.isArray(body.choices)) return 'choices: expected an array';
  for (const [i, choice] of body.choices.entries()) {
    if (!isObject(choice)) return `choices.${i}: expected an object`;
    if (!isObject(choice.message)) return `choices.${i}.message: expected an object`;
    for (const key of ['token_ids', 'prompt_token_ids'] as const)
      if (choice[key] != null && !Array.isArray(choice[key])) return `choices.${i}.${key}: expected an array`;
    if (
      choice.logprobs != null &&
      (!isObject(choice.logprobs) || (choice.logprobs.content != null && !Array.isArray(choice.logprobs.content)))
    )
      return `choices.${i}.logprobs: expected {content: [...]}`;
  }
  if (body.prompt_token_ids != null && !Array.isArray(body.prompt_token_ids)) return 'prompt_token_ids: expected an array';
  if (body.usage != null && !isObject(body.usage)) return 'usage: expected an object';
  return undefined;
}

/**
 * A client-facing copy that shares the token arrays with `body` but owns every object it edits.
 * Logprobs are copied (entry by entry, so each can carry its token id) only for a client that asked
 * for them; most do not, and the copy was one object per sampled token on every call.
 */
function clientCopy(body: ChatResponse, withLogprobs: boolean): ChatResponse {
  return {
    ...body,
    usage: body.usage ? { ...body.usage } : body.usage,
    choices: body.choices.map((c) => {
      if (withLogprobs)
        return {
          ...c,
          message: { ...c.message },
          logprobs: c.logprobs ? { ...c.logprobs, content: c.logprobs.content?.map((e) => ({ ...e })) } : c.logprobs,
        };
      const { logprobs: _dropped, ...rest } = c;
      return { ...rest, message: { ...c.message } };
    }),
  };
}

const TOKEN_ID_PREFIX = 'token_id:';

/** N of a vLLM `token_id:N` token string, else null (a loop, not a regex: it runs once per sampled token and alternative). */
function tokenIdOf(token: unknown): number | null {
  if (typeof token !== 'string' || token.length <= TOKEN_ID_PREFIX.length || !token.startsWith(TOKEN_ID_PREFIX)) return null;
  for (let i = TOKEN_ID_PREFIX.length; i < token.length; i++) {
    const c = token.charCodeAt(i);
    if (c < 48 || c > 57) return null;
  }
  return Number(token.slice(TOKEN_ID_PREFIX.length));
}

export interface NormalisedAnswer {
  /** The answer as clients may see it: no token fields, reasoning as `reasoning_content`, usage details filled. */
  response: ChatResponse;
  capture: TokenCapture;
  findings: string[];
}

/**
 * Reads ids and logprobs out of an engine answer, checking them position by position. The client's
 * copy keeps the logprobs only with `clientLogprobs` (the request asked for them; default true).
 */
export function normaliseEngineResponse(body: unknown, options: { clientLogprobs?: boolean } = {}): NormalisedAnswer {
  const shapeError = engineShapeError(body);
  if (shapeError) throw new EngineResponseError(`engine answer is not a chat completion: ${shapeError}`);
  if ((body as ChatResponse).choices.length === 0) throw new EngineResponseError('engine answered with no choices');
  const clientLogprobs = options.clientLogprobs ?? true;
  const raw = clientCopy(body as ChatResponse, clientLogprobs);
  const choice = raw.choices[0]!;
  const engineChoice = (body as ChatResponse).choices[0]!;
  const findings: string[] = [];

  const promptIdsRaw = raw.prompt_token_ids ?? (choice.prompt_token_ids as unknown[] | null | undefined) ?? null;
  let promptIds: number[] | null = null;
  if (Array.isArray(promptIdsRaw)) {
    if (allTokenIds(promptIdsRaw)) promptIds = promptIdsRaw;
    else findings.push('[FATAL] invalid_token_id: prompt_token_ids holds a value that is not a non-negative integer');
  }
  let sampledIds: number[] | null = null;
  if (Array.isArray(choice.token_ids)) {
    if (allTokenIds(choice.token_ids)) sampledIds = choice.token_ids;
    else findings.push('[FATAL] invalid_token_id: token_ids holds a value that is not a non-negative integer');
  }

  // Read from the engine's own entries; the client's copies (if it asked) get each token's id.
  const entries = (engineChoice.logprobs?.content ?? null) as (LogprobEntry | null)[] | null;
  let logprobs: number[] | null = null;
  let top: TokenCapture['top_logprobs'] = null;
  let bytes: TokenCapture['token_bytes'] = null;
  if (Array.isArray(entries) && entries.length > 0) {
    const n = entries.length;
    const values: number[] = new Array<number>(n);
    top = new Array<NonNullable<TokenCapture['top_logprobs']>[number]>(n);
    bytes = new Array<NonNullable<TokenCapture['token_bytes']>[number]>(n);
    let bad = -1;
    let positive = false;
    // One pass: each entry's logprob, alternatives and bytes (an entry that is not an object has none).
    for (let i = 0; i < n; i++) {
      const e = entries[i];
      const entry = e !== null && typeof e === 'object' ? e : undefined;
      const v = entry?.logprob as unknown;
      if (typeof v !== 'number' || !Number.isFinite(v)) {
        if (bad < 0) bad = i;
      } else if (v > 0) positive = true;
      values[i] = v as number;
      const alts = entry?.top_logprobs ?? [];
      const row = new Array<{ token_id: number | null; token: string; logprob: number }>(alts.length);
      for (let j = 0; j < alts.length; j++) {
        const alt = alts[j]!;
        row[j] = { token_id: tokenIdOf(alt.token), token: alt.token, logprob: alt.logprob };
      }
      top[i] = row;
      bytes[i] = Array.isArray(entry?.bytes) ? entry.bytes : null;
    }
    if (bad >= 0) findings.push(`[FATAL] invalid_logprob: logprob at position ${bad} is ${JSON.stringify(values[bad] ?? null)}`);
    else if (positive) findings.push('[FATAL] positive_logprob: a sampled token has a logprob above 0');
    else logprobs = values;
    if (sampledIds && logprobs) {
      if (sampledIds.length !== n) {
        findings.push(`[FATAL] logprob_misalign: ${sampledIds.length} sampled ids but ${n} logprob entries`);
        logprobs = null;
      } else {
        let mismatch = -1;
        for (let i = 0; i < n && mismatch < 0; i++) {
          const id = tokenIdOf(entries[i]!.token);
          if (id !== null && id !== sampledIds[i]) mismatch = i;
        }
        if (mismatch >= 0) {
          findings.push(
            `[FATAL] logprob_misalign: logprob entry ${mismatch} is for ${entries[mismatch]!.token}, sampled id is ${sampledIds[mismatch]}`,
          );
          logprobs = null;
        } else if (clientLogprobs) {
          const copies = (choice.logprobs?.content ?? []) as LogprobEntry[];
          for (let i = 0; i < copies.length; i++) copies[i]!.token_id = sampledIds[i]!;
        }
      }
      if (!entries[0]?.token?.startsWith(TOKEN_ID_PREFIX))
        findings.push(
          '[WARN] token_strings: logprob entries carry text, not token_id:N (engine started without --return-tokens-as-token-ids)',
        );
    }
  }
  if (sampledIds && sampledIds.length > 0 && logprobs === null && !findings.some((f) => f.startsWith('[FATAL]')))
    findings.push('[FATAL] no_logprobs: sampled tokens came back without logprobs');
  if (promptIds === null && sampledIds !== null)
    findings.push('[FATAL] no_prompt_ids: the engine returned sampled ids but no prompt_token_ids');
  if (choice.finish_reason === 'length') findings.push('[WARN] truncated_turn: finish reason is length');

  // The client-facing copy: no token data, vLLM's `reasoning` renamed, null usage details zeroed.
  const message = choice.message;
  if (message.reasoning !== undefined) {
    if (message.reasoning_content == null && message.reasoning != null) message.reasoning_content = message.reasoning as string;
    delete message.reasoning;
  }
  delete raw.prompt_token_ids;
  delete choice.token_ids;
  delete choice.prompt_token_ids;
  if (raw.usage) {
    raw.usage.prompt_tokens_details ??= { cached_tokens: 0, audio_tokens: 0 };
    raw.usage.completion_tokens_details ??= {
      reasoning_tokens: 0,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0,
    };
  } else {
    const promptTokens = promptIds?.length ?? 0;
    const completionTokens = sampledIds?.length ?? 0;
    raw.usage = {
      prompt_tokens: promptTokens,
      completion_tokens: completionTokens,
      total_tokens: promptTokens + completionTokens,
      prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
    };
  }
  raw.id ??= `chatcmpl-${Date.now().toString(16)}`;
  raw.object = 'chat.completion';
  raw.created ??= Math.floor(Date.now() / 1000);
  return {
    response: raw,
    capture: { prompt_token_ids: promptIds, completion_token_ids: sampledIds, logprobs, top_logprobs: top, token_bytes: bytes },
    findings,
  };
}

/** Whether an engine 400 means the prompt no longer fits the model's context window. */
export function isContextOverflow(status: number, body: unknown): boolean {
  if (status !== 400) return false;
  const text = typeof body === 'string' ? body : JSON.stringify(body ?? '');
  return /context_length_exceeded|maximum context length/i.test(text);
}

/** Where a stored engine answer's token data went; see `storedEngineResponse`. */
export const TOKEN_DATA_NOTE =
  'token data moved to the record: prompt_token_ids, completion_token_ids, logprobs, top_logprobs, token_bytes';

/**
 * The engine answer as stored in a call record: everything the engine sent except the token arrays,
 * which the record already holds position by position (ids, logprobs, alternatives, bytes). Storing
 * them twice doubled each record and was the largest single cost of a durable append.
 */
export function storedEngineResponse(body: ChatResponse): ChatResponse {
  const { prompt_token_ids: _prompt, ...rest } = body;
  return {
    ...rest,
    _token_data: TOKEN_DATA_NOTE,
    choices: body.choices.map(({ token_ids: _ids, prompt_token_ids: _p, logprobs, ...choice }) => ({
      ...choice,
      logprobs: logprobs ? { content_length: logprobs.content?.length ?? 0 } : logprobs,
    })),
  } as ChatResponse;
}
