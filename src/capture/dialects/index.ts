// Dialect registry and detection (docs/capture-protocol.md §6). The token-count routes are matched before this.
import type { Dialect, DialectName, JsonObject } from '../types.js';
import { AnthropicMessagesDialect } from './anthropic-messages.js';
import { GoogleGeminiDialect } from './google-gemini.js';
import { OpenAIChatDialect } from './openai-chat.js';
import { OpenAIResponsesDialect } from './openai-responses.js';

export { AnthropicMessagesDialect } from './anthropic-messages.js';
export { GoogleGeminiDialect, geminiModelFromPath } from './google-gemini.js';
export { OpenAIChatDialect } from './openai-chat.js';
export { OpenAIResponsesDialect } from './openai-responses.js';
export { fillUsageDetails, normalizeChatRequest } from './common.js';
export { STOP_ANSWER_TEXT, renderStopAnswer, stopAnswer } from './stop-answer.js';
export { answerTokenCount, tokenCountRoute } from './token-count.js';

export const DIALECTS: Readonly<Record<DialectName, Dialect>> = Object.freeze({
  openai_chat: new OpenAIChatDialect(),
  openai_responses: new OpenAIResponsesDialect(),
  anthropic_messages: new AnthropicMessagesDialect(),
  google_gemini: new GoogleGeminiDialect(),
});

export function dialectByName(name: DialectName): Dialect {
  const dialect = DIALECTS[name];
  if (!dialect) throw new Error(`unknown dialect '${String(name)}'`);
  return dialect;
}

export type HeaderBag = Record<string, string | string[] | undefined>;

/** Strongest signal first: the path, then the `anthropic-version` header, then the body's shape. */
export function detectDialectName(path: string, headers: HeaderBag = {}, body?: JsonObject): DialectName {
  const bare = path.split('?')[0]!;
  if (bare.includes('/v1/messages')) return 'anthropic_messages';
  if (bare.includes('/v1/chat/completions')) return 'openai_chat';
  if (bare.includes('/v1/responses')) return 'openai_responses';
  if (bare.toLowerCase().includes('generatecontent')) return 'google_gemini';
  if (Object.keys(headers).some((h) => h.toLowerCase() === 'anthropic-version')) return 'anthropic_messages';
  if (body && 'contents' in body) return 'google_gemini';
  if (body && 'input' in body && 'instructions' in body) return 'openai_responses';
  return 'openai_chat';
}

export function detectDialect(path: string, headers: HeaderBag = {}, body?: JsonObject): Dialect {
  return DIALECTS[detectDialectName(path, headers, body)];
}
