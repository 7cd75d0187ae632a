// Small HTTP helpers for the proxy's node:http server.
import type { IncomingMessage, ServerResponse } from 'node:http';

export const DEFAULT_BODY_LIMIT = 32 * 1024 * 1024;

export class BodyTooLargeError extends Error {
  constructor(readonly limit: number) {
    super(`request body exceeds the limit of ${limit} bytes`);
  }
}

/** Reads the whole body, refusing (without buffering the rest) once it passes `limit` bytes. */
export async function readBody(req: IncomingMessage, limit = DEFAULT_BODY_LIMIT): Promise<Buffer> {
  const parts = await readBodyParts(req, limit);
  return parts.length === 1 ? parts[0]! : Buffer.concat(parts);
}

/**
 * The whole body as the chunks it arrived in, not joined (byte-parts.ts reads them): a model call's
 * body is 0.55 MB at a 128k-token context, and joining it copied it into fresh memory every turn.
 */
export function readBodyParts(req: IncomingMessage, limit = DEFAULT_BODY_LIMIT): Promise<Buffer[]> {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length']);
    if (Number.isFinite(declared) && declared > limit) {
      req.resume();
      reject(new BodyTooLargeError(limit));
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    req.on('data', (chunk: Buffer) => {
      if (done) return;
      size += chunk.length;
      if (size > limit) {
        done = true;
        req.resume();
        reject(new BodyTooLargeError(limit));
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (!done) resolve(chunks);
    });
    req.on('error', (err) => {
      if (!done) reject(err);
      done = true;
    });
  });
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)), ...headers });
  res.end(text);
}

const SECRET_HEADERS = new Set(['authorization', 'x-api-key', 'x-goog-api-key', 'api-key', 'x-admin-key', 'proxy-authorization', 'cookie']);

/** Request headers as a plain object with credentials replaced, for records and logs. */
export function redactHeaders(headers: IncomingMessage['headers']): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    out[name] = SECRET_HEADERS.has(name) ? '[redacted]' : Array.isArray(value) ? value.join(', ') : value;
  }
  return out;
}

/** `value` with every occurrence of `secret` in its strings (keys and values, at any depth) replaced; the input is not changed. */
export function scrubSecret<T>(value: T, secret: string): T {
  const scrub = (v: unknown): unknown => {
    if (typeof v === 'string') return v.includes(secret) ? v.split(secret).join('[redacted]') : v;
    if (Array.isArray(v)) return v.map(scrub);
    if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [scrub(k) as string, scrub(x)]));
    return v;
  };
  return scrub(value) as T;
}

/** A request target for a log line, with a Gemini-style `?key=` credential replaced. */
export function loggableTarget(target: string | undefined): string {
  return (target ?? '/').replace(/([?&]key=)[^&#]*/gi, '$1[redacted]');
}

/**
 * The request target as a URL, or undefined when it cannot be one. The raw target is taken as a path
 * (`//x` stays the path `//x`, not a host), so no request line can make the router throw.
 */
export function parseRequestTarget(target: string | undefined): URL | undefined {
  const raw = target ?? '/';
  try {
    return raw.startsWith('/') ? new URL(`http://proxy.invalid${raw}`) : new URL(raw);
  } catch {
    return undefined;
  }
}

/** A percent-decoded path segment, or undefined for a malformed escape (`%zz`, a lone `%`). */
export function decodePathSegment(segment: string): string | undefined {
  try {
    return decodeURIComponent(segment);
  } catch {
    return undefined;
  }
}
