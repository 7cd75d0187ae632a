// A shared report must not hand out a credential: the session id is the harness's API key for that
// session (docs/capture-protocol.md §3.1), so every occurrence of it in the report's data is replaced by a
// stable alias that still tells sessions apart but cannot be presented to a proxy.
import { createHash } from 'node:crypto';

export function sessionAlias(sessionId: string): string {
  return `session-${createHash('sha256').update(sessionId).digest('hex').slice(0, 12)}`;
}

/** A deep copy of `value` with `sessionId` replaced by its alias in every string, keys included. */
export function withoutSessionKey<T>(value: T, sessionId: string): T {
  if (!sessionId) return value;
  const alias = sessionAlias(sessionId);
  const scrub = (v: unknown): unknown => {
    if (typeof v === 'string') return v.includes(sessionId) ? v.split(sessionId).join(alias) : v;
    if (Array.isArray(v)) return v.map(scrub);
    if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [scrub(k) as string, scrub(x)]));
    return v;
  };
  return scrub(value) as T;
}
