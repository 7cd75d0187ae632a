// Helpers shared by the dialect converters, plus the §7.0 normalisation every converted request gets.
import { createHash } from 'node:crypto';
import {
  DialectError,
  type ChatChoice,
  type ChatMessage,
  type ChatRequest,
  type ChatResponse,
  type ChatToolCall,
  type ChatUsage,
  type JsonObject,
} from '../types.js';

export function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The model a client named, where OpenAI and Anthropic bodies carry it. */
export function bodyModel(body: JsonObject): string | undefined {
  return typeof body.model === 'string' ? body.model : undefined;
}

/** Whether a client asked for a stream, as OpenAI and Anthropic bodies say it. */
export function bodyStream(body: JsonObject): boolean {
  return body.stream === true;
}

export function requireArray(value: unknown, what: string): unknown[] {
  if (!Array.isArray(value)) throw new DialectError(`${what} must be an array`);
  return value;
}

export function requireObjects(value: unknown, what: string): JsonObject[] {
  const items = requireArray(value, what);
  items.forEach((item, i) => {
    if (!isObject(item)) throw new DialectError(`${what}[${i}] must be an object`);
  });
  return items as JsonObject[];
}

/** Text of a chat content value when it is text only (string, or text parts only); otherwise null. */
export function textOnly(content: unknown): string | null {
  if (content === null || content === undefined) return '';
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return null;
  const texts: string[] = [];
  for (const part of content) {
    if (typeof part === 'string') texts.push(part);
    else if (isObject(part) && typeof part.text === 'string' && (part.type === 'text' || part.type === undefined)) texts.push(part.text);
    else return null;
  }
  return texts.join('\n');
}

/** All text in a chat content value, ignoring non-text parts. */
export function contentText(content: unknown, separator = '\n'): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((part) => (typeof part === 'string' ? part : isObject(part) && typeof part.text === 'string' ? part.text : null))
    .filter((t): t is string => t !== null)
    .join(separator);
}

export function dataUrl(mediaType: string, base64: string): string {
  return `data:${mediaType};base64,${base64}`;
}

export function parseDataUrl(url: string): { mediaType: string; data: string } | null {
  const match = /^data:([^;,]+)(?:;[^;,]*)*;base64,(.*)$/s.exec(url);
  return match ? { mediaType: match[1]!, data: match[2]! } : null;
}

/**
 * §7.0: drop internal marker fields, rename `developer` to `system`, merge all text system messages
 * into one at the top, and default Qwen3.5's `enable_thinking` to false. Returns a new object.
 */
export function normalizeChatRequest(request: ChatRequest, servedModel?: string): ChatRequest {
  const marker = typeof request._served_model === 'string' ? request._served_model : undefined;
  const out: ChatRequest = { ...request, messages: [] };
  for (const key of Object.keys(out)) if (key.startsWith('_')) delete out[key];

  const systemTexts: string[] = [];
  const rest: ChatMessage[] = [];
  for (const message of request.messages) {
    const role = message.role === 'developer' ? 'system' : message.role;
    if (role === 'system') {
      const text = textOnly(message.content);
      if (text !== null) {
        if (text !== '') systemTexts.push(text);
        continue;
      }
    }
    rest.push(role === message.role ? message : { ...message, role });
  }
  out.messages = systemTexts.length ? [{ role: 'system', content: systemTexts.join('\n\n') }, ...rest] : rest;

  const model = servedModel ?? marker ?? (typeof request.model === 'string' ? request.model : '');
  if (/qwen3\.5/i.test(model)) {
    const kwargs = isObject(out.chat_template_kwargs) ? out.chat_template_kwargs : {};
    if (kwargs.enable_thinking === undefined) out.chat_template_kwargs = { ...kwargs, enable_thinking: false };
  }
  return out;
}

/** Set `chat_template_kwargs.enable_thinking` without dropping other template kwargs. */
export function enableThinking(request: ChatRequest): void {
  const kwargs = isObject(request.chat_template_kwargs) ? request.chat_template_kwargs : {};
  request.chat_template_kwargs = { ...kwargs, enable_thinking: true };
}

/** Usage with the detail objects filled with zeros (trae-agent reads `.cached_tokens` off them). */
export function fillUsageDetails(usage: ChatUsage | null | undefined): ChatUsage {
  const u = usage ?? { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
  const prompt = num(u.prompt_tokens);
  const completion = num(u.completion_tokens);
  return {
    ...u,
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: u.total_tokens === undefined || u.total_tokens === null ? prompt + completion : num(u.total_tokens),
    prompt_tokens_details: isObject(u.prompt_tokens_details)
      ? { cached_tokens: 0, audio_tokens: 0, ...u.prompt_tokens_details }
      : { cached_tokens: 0, audio_tokens: 0 },
    completion_tokens_details: isObject(u.completion_tokens_details)
      ? { ...ZERO_COMPLETION_DETAILS, ...u.completion_tokens_details }
      : { ...ZERO_COMPLETION_DETAILS },
  };
}

const ZERO_COMPLETION_DETAILS = {
  reasoning_tokens: 0,
  audio_tokens: 0,
  accepted_prediction_tokens: 0,
  rejected_prediction_tokens: 0,
};

function num(value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) ? value : 0;
}

export function cachedTokens(usage: ChatUsage | null | undefined): number {
  if (!usage) return 0;
  const details = usage.prompt_tokens_details;
  if (isObject(details) && typeof details.cached_tokens === 'number') return details.cached_tokens;
  return typeof usage.cached_tokens === 'number' ? usage.cached_tokens : 0;
}

export function reasoningTokens(usage: ChatUsage | null | undefined): number {
  const details = usage?.completion_tokens_details;
  return isObject(details) && typeof details.reasoning_tokens === 'number' ? details.reasoning_tokens : 0;
}

/** The first choice, or an empty assistant message when the engine returned none. */
export function firstChoice(response: ChatResponse): ChatChoice {
  return response.choices?.[0] ?? { index: 0, message: { role: 'assistant', content: '' }, finish_reason: 'stop' };
}

/** Reasoning text of an engine message (`reasoning_content`, or vLLM's `reasoning`). */
export function reasoningText(message: ChatMessage): string {
  if (typeof message.reasoning_content === 'string') return message.reasoning_content;
  return typeof message.reasoning === 'string' ? message.reasoning : '';
}

export function toolCallsOf(message: ChatMessage): ChatToolCall[] {
  return Array.isArray(message.tool_calls) ? message.tool_calls.filter((c) => isObject(c) && isObject(c.function)) : [];
}

/** Parse tool-call arguments; `undefined` when they are not JSON. */
export function parseArguments(args: unknown): unknown {
  if (isObject(args)) return args;
  if (typeof args !== 'string') return undefined;
  if (args.trim() === '') return {};
  try {
    return JSON.parse(args) as unknown;
  } catch {
    return undefined;
  }
}

export { randomHex } from '../random-hex.js';

/** Deterministic hex derived from a seed, so a JSON answer and its SSE replay share ids. */
export function stableHex(seed: string, length: number): string {
  return createHash('sha256').update(seed, 'utf8').digest('hex').slice(0, length);
}

/** OpenAI-style error body (Chat Completions and Responses). */
export function openAIErrorBody(
  status: number,
  message: string,
): { error: { message: string; type: string; param: null; code: string | null } } {
  const type = status >= 500 ? 'server_error' : status === 429 ? 'rate_limit_error' : 'invalid_request_error';
  return { error: { message, type, param: null, code: status >= 500 ? 'server_error' : null } };
}
