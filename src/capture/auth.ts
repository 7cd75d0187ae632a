// Keys: a model call presents its session id as API key; control routes present the admin key.
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

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
  return host === '127.0.0.1' || host === '::1' || host === 'localhost' || /^127\./.test(host);
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
