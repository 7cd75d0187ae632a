// Keys: a model call presents its session id as API key; control routes present the admin key.
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { isLoopbackName } from './request-guard.js';

/** First key present: Authorization Bearer, x-api-key, x-goog-api-key, then Gemini's ?key=. */
export function presentedKey(req: IncomingMessage, url: URL): string | undefined {
  const auth = req.headers.authorization;
  if (typeof auth === 'string') {
    const match = /^Bearer\s+(.+)$/i.exec(auth.trim());
    if (match?.[1]) return match[1].trim();
  }
  for (const name of ['x-api-key', 'x-goog-api-key', 'x-admin-key']) {
    const value = req.headers[name];
    if (typeof value === 'string' && value.trim()) return value.trim();
  }
  return url.searchParams.get('key') ?? undefined;
}

/**
 * Every admin key a request presents, from headers only: `Authorization: Bearer K`, `X-Admin-Key: K`,
 * and `Authorization: Basic` whose password is K (what httpx and websockets send for a URL's
 * `user:K@` user info, so TRL's unchanged client works). Never from the URL's query.
 */
export function adminKeyFromHeaders(req: IncomingMessage): string[] {
  const keys: string[] = [];
  const auth = typeof req.headers.authorization === 'string' ? req.headers.authorization.trim() : '';
  const [scheme = '', value = ''] = auth.split(/\s+/, 2);
  if (scheme.toLowerCase() === 'bearer' && value) keys.push(value);
  if (scheme.toLowerCase() === 'basic') {
    const decoded = Buffer.from(value, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon >= 0) keys.push(decoded.slice(colon + 1));
  }
  const header = req.headers['x-admin-key'];
  if (typeof header === 'string' && header.trim()) keys.push(header.trim());
  return keys;
}

/** A fresh admin key for one lab (run, validate, batch): it lives in the lab process only. */
export function mintAdminKey(): string {
  return `hla-${randomBytes(24).toString('base64url')}`;
}

/** Constant-time comparison of two secrets of any length (digests have equal length). */
export function secretsEqual(a: string, b: string): boolean {
  const da = createHash('sha256').update(a).digest();
  const db = createHash('sha256').update(b).digest();
  return timingSafeEqual(da, db);
}

export function isLoopbackHost(host: string): boolean {
  return isLoopbackName(host);
}

/** The harness's own session id, if it sends one (recorded, never used for routing). */
export function harnessSessionId(req: IncomingMessage, body: Record<string, unknown>): string | null {
  for (const name of ['x-session-id', 'proxy-x-session-id', 'session_id', 'x-claude-code-session-id']) {
    const value = req.headers[name];
    if (typeof value === 'string' && value) return value;
  }
  if (typeof body._session_id === 'string') return body._session_id;
  if (typeof body.user === 'string') return body.user;
  return null;
}
