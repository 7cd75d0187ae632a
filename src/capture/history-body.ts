// Parsing a resent history once. A harness sends its whole conversation with every call: at a
// 128k-token context the body is 0.55 MB, and decoding and parsing it cost about 1.1 ms a call
// (toString 0.45, JSON.parse 0.7), the largest item of a token-in turn that grew with the context
// (bench/token-in-cost.ts). This keeps, per API key, the last large body's bytes, the byte offset at
// which each element of its history array (`messages`, `input` or `contents`) ends, and the parsed
// values. The next body from the same key is compared with it byte for byte (memcmp); the elements
// that lie wholly in the common prefix are taken as parsed, and only the rest of the body is decoded
// and parsed, as `{"<key>":[` + rest, which JSON.parse checks as it would the whole body.
//
// Why the result is JSON.parse's: bytes up to an element's end fix that element and everything before
// it (JSON's structure is decided by its prefix), so the kept values are what a parse of the new body
// gives for them; the rest is parsed in the same context (inside the history array, inside the
// top-level object). Members before the history key are kept too (same bytes); a member after it that
// repeats one of them wins, as JSON.parse lets the last duplicate win. A rest that names a history
// key again, a `__proto__` member anywhere at the top, or a top-level key written with escapes (which
// could spell either) is parsed whole. Anything unexpected (the
// rest does not continue the array, a parse error) falls back to JSON.parse of the whole body, which
// then also gives the error. The kept values are frozen: they are shared by the calls that resent them
// (which also lets the store's and the bridge's comparisons of those messages stop at identity), and
// nothing may change a request's parsed body in place.

import { ByteParts } from './byte-parts.js';

/** The request-body keys that hold a dialect's history (chat/messages, Responses, Gemini). */
export const BODY_HISTORY_KEYS = ['messages', 'input', 'contents'] as const;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const COLON = 0x3a;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;

const isWs = (c: number | undefined): boolean => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

function skipWs(buf: Buffer, i: number): number {
  while (i < buf.length && isWs(buf[i])) i++;
  return i;
}

/** `i` at a string's opening quote: the offset after its closing quote, or -1. */
function skipString(buf: Buffer, i: number): number {
  let from = i + 1;
  for (;;) {
    const q = buf.indexOf(QUOTE, from);
    if (q < 0) return -1;
    let k = q - 1;
    while (buf[k] === BACKSLASH) k--;
    if ((q - 1 - k) % 2 === 0) return q + 1;
    from = q + 1;
  }
}

/** `i` at a value's first byte: the offset after it, or -1. Does not validate (JSON.parse does). */
function skipValue(buf: Buffer, i: number): number {
  const c = buf[i];
  if (c === QUOTE) return skipString(buf, i);
  if (c === OPEN_BRACE || c === OPEN_BRACKET) {
    let depth = 0;
    while (i < buf.length) {
      const b = buf[i]!;
      if (b === QUOTE) {
        i = skipString(buf, i);
        if (i < 0) return -1;
        continue;
      }
      if (b === OPEN_BRACE || b === OPEN_BRACKET) depth++;
      else if (b === CLOSE_BRACE || b === CLOSE_BRACKET) {
        depth--;
        if (depth === 0) return i + 1;
      }
      i++;
    }
    return -1;
  }
  // A number or a literal: up to the next delimiter.
  const start = i;
  while (i < buf.length) {
    const b = buf[i]!;
    if (b === COMMA || b === CLOSE_BRACE || b === CLOSE_BRACKET || isWs(b)) break;
    i++;
  }
  return i > start ? i : -1;
}

/**
 * From inside an array (just after its `[` or after an element), the end offset of each further
 * element, appended to `ends`; returns the offset after the closing `]`, or -1.
 */
function scanElements(buf: Buffer, i: number, ends: number[]): number {
  for (;;) {
    i = skipWs(buf, i);
    const c = buf[i];
    if (c === undefined) return -1;
    if (c === CLOSE_BRACKET) return i + 1;
    if (c === COMMA) {
      i++;
      continue;
    }
    i = skipValue(buf, i);
    if (i < 0) return -1;
    ends.push(i);
  }
}

interface HistoryLayout {
  key: string;
  /** Offset after each element of the history array. */
  ends: number[];
}

/**
 * Where a body's history array and its elements lie, or null: no such array, a key with escapes or
 * `__proto__`, two history arrays, or a member after the history that repeats one before it (the
 * kept members before the history are then exactly what the parse gave for them).
 */
export function scanHistory(buf: Buffer): HistoryLayout | null {
  let i = skipWs(buf, 0);
  if (buf[i] !== OPEN_BRACE) return null;
  i++;
  let found: HistoryLayout | null = null;
  const before = new Set<string>();
  for (;;) {
    i = skipWs(buf, i);
    const c = buf[i];
    if (c === CLOSE_BRACE) return found;
    if (c === COMMA) {
      i++;
      continue;
    }
    if (c !== QUOTE) return null;
    const keyEnd = skipString(buf, i);
    if (keyEnd < 0 || keyEnd - i > 258) return null;
    const key = buf.toString('utf8', i + 1, keyEnd - 1);
    if (key.includes('\\') || key === '__proto__') return null;
    i = skipWs(buf, keyEnd);
    if (buf[i] !== COLON) return null;
    i = skipWs(buf, i + 1);
    if (found && before.has(key)) return null;
    if ((BODY_HISTORY_KEYS as readonly string[]).includes(key) && buf[i] === OPEN_BRACKET) {
      if (found || before.has(key)) return null;
      found = { key, ends: [] };
      i = scanElements(buf, i + 1, found.ends);
    } else {
      if (!found) before.add(key);
      i = skipValue(buf, i);
    }
    if (i < 0) return null;
  }
}

/**
 * From just after the history array, whether the top-level members left have plain keys: none with
 * escapes, none that is a history key or `__proto__`. Does not validate (JSON.parse does).
 */
function plainMembersFrom(buf: Buffer, i: number): boolean {
  for (;;) {
    i = skipWs(buf, i);
    const c = buf[i];
    if (c === CLOSE_BRACE || c === undefined) return true;
    if (c === COMMA) {
      i++;
      continue;
    }
    if (c !== QUOTE) return false;
    const keyEnd = skipString(buf, i);
    if (keyEnd < 0) return false;
    const key = buf.toString('latin1', i + 1, keyEnd - 1);
    if (key.includes('\\') || key === '__proto__' || (BODY_HISTORY_KEYS as readonly string[]).includes(key)) return false;
    i = skipWs(buf, keyEnd);
    if (buf[i] !== COLON) return false;
    i = skipValue(buf, skipWs(buf, i + 1));
    if (i < 0) return false;
  }
}

/** Length of the common prefix of two buffers (ByteParts.commonPrefix: memcmp over halving ranges). */
export function commonBytes(a: Buffer, b: Buffer): number {
  return ByteParts.of(a).commonPrefix(ByteParts.of(b));
}

function deepFreeze(v: unknown): void {
  if (v === null || typeof v !== 'object' || Object.isFrozen(v)) return;
  Object.freeze(v);
  for (const x of Object.values(v as object)) deepFreeze(x);
}

interface Kept {
  /** The body as it arrived (its chunks; never joined for keeping). */
  bytes: ByteParts;
  layout: HistoryLayout;
  /** The members before the history key, in order (their values frozen). */
  head: [string, unknown][];
  /** The parsed history elements (frozen). */
  items: unknown[];
}

export interface HistoryBodiesOptions {
  /** Bodies smaller than this are parsed whole and not kept (default 64 KB). */
  minBytes?: number;
  /** Keys whose last body is kept (default 64). */
  maxKeys?: number;
  /** Bytes of bodies kept, all keys together (default 64 MB). */
  maxBytes?: number;
}

export interface HistoryBodiesStats {
  /** Bodies parsed from a kept prefix. */
  reused: number;
  /** Large bodies parsed whole (no kept body, or it could not be used). */
  whole: number;
  keys: number;
  bytes: number;
}

/** Parses request bodies (JSON.parse's result), reusing the history of a key's last large body. */
export class HistoryBodies {
  private readonly kept = new Map<string, Kept>();
  private bytes = 0;
  private readonly counts = { reused: 0, whole: 0 };
  private readonly minBytes: number;
  private readonly maxKeys: number;
  private readonly maxBytes: number;

  constructor(options: HistoryBodiesOptions = {}) {
    this.minBytes = options.minBytes ?? 64 * 1024;
    this.maxKeys = options.maxKeys ?? 64;
    this.maxBytes = options.maxBytes ?? 64 * 1024 * 1024;
  }

  get stats(): HistoryBodiesStats {
    return { ...this.counts, keys: this.kept.size, bytes: this.bytes };
  }

  /**
   * JSON.parse(raw as UTF-8), or its SyntaxError. `raw`: the body, whole or as the chunks it arrived
   * in. `key`: who sent it (undefined: nothing is kept).
   */
  parse(raw: Buffer | ByteParts, key: string | undefined): unknown {
    const body = raw instanceof ByteParts ? raw : ByteParts.of(raw);
    if (key === undefined || body.length < this.minBytes) return JSON.parse(body.toString('utf8'));
    const before = this.kept.get(key);
    if (before) {
      this.drop(key);
      const reused = this.reuse(key, before, body);
      if (reused !== undefined) {
        this.counts.reused++;
        return reused;
      }
    }
    this.counts.whole++;
    const whole = body.whole();
    const parsed: unknown = JSON.parse(whole.toString('utf8'));
    const layout = scanHistory(whole);
    if (layout && parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) {
      const obj = parsed as Record<string, unknown>;
      const items = obj[layout.key];
      if (Array.isArray(items) && items.length === layout.ends.length) {
        const head: [string, unknown][] = [];
        for (const [k, v] of Object.entries(obj)) {
          if (k === layout.key) break;
          head.push([k, v]);
        }
        this.keep(key, { bytes: body, layout, head, items: items.slice() });
      }
    }
    return parsed;
  }

  private reuse(key: string, before: Kept, raw: ByteParts): Record<string, unknown> | undefined {
    const { layout } = before;
    const same = before.bytes.commonPrefix(raw);
    // The elements wholly inside the common prefix (their end offset at most `same`).
    let lo = 0;
    let hi = layout.ends.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (layout.ends[mid]! <= same) lo = mid + 1;
      else hi = mid;
    }
    const k = lo;
    if (k === 0) return undefined;
    const cut = layout.ends[k - 1]!;
    // The rest is read from the bytes after the kept elements only (joined if they span chunks).
    const tail = raw.slice(cut);
    let i = skipWs(tail, 0);
    const next = tail[i];
    if (next === COMMA) {
      i++;
      // `[a, ]` is not JSON, though `[` + ` ]` would be.
      if (tail[skipWs(tail, i)] === CLOSE_BRACKET) return undefined;
    } else if (next !== CLOSE_BRACKET) return undefined;
    // The new elements' end offsets (this body's layout, for the next call), then the members after
    // the history: a history key again, __proto__ or a key with escapes (which could spell either)
    // is parsed whole (see the header).
    const added: number[] = [];
    const after = scanElements(tail, 0, added);
    if (after < 0 || !plainMembersFrom(tail, after)) return undefined;
    const ends = layout.ends.slice(0, k);
    for (const end of added) ends.push(cut + end);
    let rest: unknown;
    try {
      rest = JSON.parse(`{"${layout.key}":[${tail.toString('utf8', i)}`);
    } catch {
      return undefined;
    }
    if (rest === null || typeof rest !== 'object' || Array.isArray(rest)) return undefined;
    const newItems = (rest as Record<string, unknown>)[layout.key];
    if (!Array.isArray(newItems)) return undefined;
    if (ends.length !== k + newItems.length) return undefined;
    const items = before.items.slice(0, k);
    for (const item of newItems) items.push(item);
    const out: Record<string, unknown> = {};
    for (const [name, value] of before.head) out[name] = value;
    out[layout.key] = items;
    // A member repeated after the history wins, in the first one's place (JSON.parse's rule); the
    // kept members stay those parsed from before the history, for the next body.
    for (const [name, value] of Object.entries(rest)) if (name !== layout.key) out[name] = value;
    this.keep(key, { bytes: raw, layout: { key: layout.key, ends }, head: before.head, items: items.slice() });
    return out;
  }

  private keep(key: string, entry: Kept): void {
    for (const [, v] of entry.head) deepFreeze(v);
    for (const item of entry.items) deepFreeze(item);
    this.drop(key);
    this.kept.set(key, entry);
    this.bytes += entry.bytes.length;
    for (const [old, e] of this.kept) {
      if (this.kept.size <= this.maxKeys && this.bytes <= this.maxBytes) break;
      this.kept.delete(old);
      this.bytes -= e.bytes.length;
    }
  }

  private drop(key: string): void {
    const e = this.kept.get(key);
    if (!e) return;
    this.kept.delete(key);
    this.bytes -= e.bytes.length;
  }
}
