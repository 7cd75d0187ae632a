// Synthetic reasoning signatures (docs/capture-protocol.md §7.5). The engine has no signatures; these only
// have to survive a round trip through the harness and let the proxy recover or check the text.
import { createHash } from 'node:crypto';

const ANTHROPIC_PREFIX = 'sg_oe_';
const ENCRYPTED_PREFIX = 'oe:';
// Polar's prefix for the same scheme; accepted on the way in so its traces replay too.
const LEGACY_ENCRYPTED_PREFIX = 'polar:';

/** Anthropic `thinking.signature`: "sg_oe_" + unpadded URL-safe base64 of SHA-256(text). */
export function anthropicSignature(text: string): string {
  if (!text) return '';
  return ANTHROPIC_PREFIX + createHash('sha256').update(text, 'utf8').digest('base64url');
}

/** Whether `signature` is the synthetic signature of exactly `text`. */
export function verifyAnthropicSignature(text: string, signature: unknown): boolean {
  return typeof signature === 'string' && signature !== '' && signature === anthropicSignature(text);
}

/** Gemini `thoughtSignature`: standard padded base64 of the Anthropic-style signature. */
export function geminiThoughtSignature(text: string): string {
  const marker = anthropicSignature(text);
  return marker ? Buffer.from(marker, 'ascii').toString('base64') : '';
}

/** The Anthropic-style marker inside a Gemini thoughtSignature, or null if it is not one of ours. */
export function decodeGeminiThoughtSignature(signature: unknown): string | null {
  if (typeof signature !== 'string' || signature === '') return null;
  const decoded = Buffer.from(signature, 'base64').toString('latin1');
  return decoded.startsWith(ANTHROPIC_PREFIX) ? decoded : null;
}

/** Responses `encrypted_content`: "oe:" + unpadded URL-safe base64 of the text (decodable). */
export function encryptReasoning(text: string): string {
  if (!text) return '';
  return ENCRYPTED_PREFIX + Buffer.from(text, 'utf8').toString('base64url');
}

/** Reverse of `encryptReasoning`; '' for anything that is not one of ours (e.g. real OpenAI blobs). */
export function decryptReasoning(encrypted: unknown): string {
  if (typeof encrypted !== 'string') return '';
  for (const prefix of [ENCRYPTED_PREFIX, LEGACY_ENCRYPTED_PREFIX]) {
    if (!encrypted.startsWith(prefix)) continue;
    const body = encrypted.slice(prefix.length);
    if (!/^[A-Za-z0-9_\-+/]*={0,2}$/.test(body)) return '';
    return Buffer.from(body, body.includes('+') || body.includes('/') ? 'base64' : 'base64url').toString('utf8');
  }
  return '';
}

/** Reasoning text of a Responses `reasoning` input item: `content`, else `summary`, else our `encrypted_content`. */
export function readReasoningItem(item: Record<string, unknown>): string {
  for (const key of ['content', 'summary']) {
    const list = item[key];
    if (!Array.isArray(list)) continue;
    const text = list
      .map((part: unknown) =>
        typeof part === 'object' && part !== null && typeof (part as { text?: unknown }).text === 'string'
          ? (part as { text: string }).text
          : '',
      )
      .filter(Boolean)
      .join('\n');
    if (text) return text;
  }
  return decryptReasoning(item.encrypted_content);
}
