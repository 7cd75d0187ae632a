// Token-count side routes (docs/capture-protocol.md §8.5): answered before session routing and never recorded,
// so they cannot become bogus roots. The estimate is ~4 characters per token unless a counter is given;
// no tokenizer is loaded here on purpose.
import { isObject } from './common.js';

export interface TokenCountAnswer {
  status: number;
  body: unknown;
}

// Long opaque strings (base64 images, signatures) are not prompt text; counting them would overstate.
const OPAQUE_KEYS = new Set(['data', 'signature', 'thoughtSignature', 'thought_signature', 'encrypted_content']);

/** Which count route a path is, if any. The query (claude-code sends `?beta=true`) is ignored. */
export function tokenCountRoute(path: string): 'anthropic' | 'gemini' | null {
  const bare = path.split('?')[0]!;
  if (bare.endsWith('/v1/messages/count_tokens')) return 'anthropic';
  if (bare.toLowerCase().endsWith(':counttokens')) return 'gemini';
  return null;
}

/** Answer a count route, or null when `path` is not one (the caller then handles a model call). */
export function answerTokenCount(path: string, body: unknown, countTokens?: (text: string) => number): TokenCountAnswer | null {
  const route = tokenCountRoute(path);
  if (!route) return null;
  const text = promptText(isObject(body) ? body : {});
  const estimate = countTokens ? countTokens(text) : Math.ceil(text.length / 4);
  const n = Math.max(1, Math.round(Number.isFinite(estimate) ? estimate : 1));
  if (route === 'anthropic') return { status: 200, body: { input_tokens: n } };
  return {
    status: 200,
    body: { totalTokens: n, totalBillableCharacters: n * 4, promptTokensDetails: [{ modality: 'TEXT', tokenCount: n }] },
  };
}

/** The text a count covers: messages, system, Gemini contents and systemInstruction, and the tool list. */
export function promptText(body: Record<string, unknown>): string {
  // gemini-cli may wrap the request: {generateContentRequest: {contents, systemInstruction, tools}}.
  const inner = isObject(body.generateContentRequest) ? body.generateContentRequest : body;
  const pieces: string[] = [];
  for (const key of ['system', 'systemInstruction', 'system_instruction', 'instructions', 'messages', 'contents', 'input']) {
    collectStrings(inner[key], pieces);
  }
  const tools = inner.tools;
  if (tools !== undefined && tools !== null) pieces.push(JSON.stringify(tools));
  return pieces.join('\n');
}

function collectStrings(value: unknown, out: string[]): void {
  if (typeof value === 'string') {
    if (!value.startsWith('data:')) out.push(value);
  } else if (Array.isArray(value)) {
    for (const item of value) collectStrings(item, out);
  } else if (isObject(value)) {
    for (const [key, item] of Object.entries(value)) {
      if (OPAQUE_KEYS.has(key)) continue;
      // Tool-call inputs are objects; count them as the JSON the model would see.
      if ((key === 'input' || key === 'args') && isObject(item)) out.push(JSON.stringify(item));
      else if (key !== 'type' && key !== 'role' && key !== 'id' && key !== 'tool_use_id' && key !== 'media_type' && key !== 'mimeType')
        collectStrings(item, out);
    }
  }
}
