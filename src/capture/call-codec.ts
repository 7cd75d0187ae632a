// How a call record is stored against an earlier call of its session. A harness resends its whole
// history on every call, so a stored session would grow with the square of its turns if each call
// carried its prompt token ids and its two message lists (the request's and the engine request's) in
// full. Instead each of those three lists is written as `keep` leading elements of an earlier call's
// list (for prompt ids: that call's prompt ++ completion, the prefix a continuation extends) plus the
// new suffix, with a hash of the whole list so that a reconstruction is checked on read. A list that
// shares nothing with a recent call (a first call, a subagent root, a rewrite) is written in full.
//
// Line versions: a call line without `v` is a full record (every file written before this codec);
// `v: 2` and `v: 3` lines may carry `enc`, naming which lists are suffixes of which earlier call. They
// differ only in the prompt ids' hash: v2 took SHA-256 of the ids as float64s (0.2 ms at 32k tokens,
// the largest part of encoding a call), v3 a 64-bit multiplicative hash over the ids in one pass that
// also copies them (see `tokenHash`). Both are integrity checks against a wrong or corrupted
// reconstruction, not against an adversary who can write the data dir.
import { createHash } from 'node:crypto';
import type { CallRecord, ChatMessage } from './types.js';

export const CALL_LINE_VERSION = 3;

/** One list stored as a suffix: `keep` elements of call `from`'s base list, then the stored elements. */
export interface SuffixRef {
  from: string;
  keep: number;
  /** Hash of the whole reconstructed list (see listHash / tokenHash). */
  h: string;
}

/** Which of a call line's lists are suffixes; absent lists are stored in full. */
export interface CallEncoding {
  /** prompt_token_ids, against the earlier call's prompt ++ completion. */
  p?: SuffixRef;
  /** engine_request.messages, against the earlier call's engine_request.messages. */
  em?: SuffixRef;
  /** request.body[key], against the earlier call's request.body[key]. */
  bm?: SuffixRef & { key: string };
}

/** The request-body keys that hold a dialect's history (chat/messages, Responses, Gemini). */
const BODY_HISTORY_KEYS = ['messages', 'input', 'contents'] as const;

/** Below this many shared elements a suffix is not worth a reference. */
const MIN_SHARED_TOKENS = 8;
const MIN_SHARED_MESSAGES = 1;

/** The v2 prompt-id hash (read only: lines written before v3 carry it). */
export function tokenHashV2(ids: readonly number[]): string {
  return createHash('sha256').update(Float64Array.from(ids)).digest('hex').slice(0, 24);
}

/**
 * The v3 prompt-id hash: two 32-bit multiply-xor lanes (FNV-1a's prime and murmur3's), each id and
 * its position mixed in, finished with murmur3's avalanche. 16 hex digits.
 */
export function tokenHash(ids: ArrayLike<number>): string {
  let a = 0x811c9dc5 ^ ids.length;
  let b = 0x9747b28c;
  for (let i = 0; i < ids.length; i++) {
    const v = ids[i]!;
    a = Math.imul(a ^ v, 0x01000193);
    b = Math.imul(b ^ (v + i), 0xcc9e2d51);
    b = (b << 15) | (b >>> 17);
  }
  return hex32(fmix(a ^ Math.imul(b, 0x1b873593))) + hex32(fmix(b ^ a));
}

function fmix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

const hex32 = (n: number): string => n.toString(16).padStart(8, '0');

/**
 * `prompt ++ completion` as 32-bit ids: what a later call's prompt is compared against. A typed array
 * because the encoder keeps one per remembered call for up to a thousand open sessions: a JS array of
 * 32k numbers is 256 KB the garbage collector walks on every major collection; this is 128 KB it
 * never looks into. An id of 2^32 or more does not survive the copy, so it simply never matches:
 * the comparison can only under-share, never claim a prefix that is not there.
 */
function idsOf(prompt: readonly number[] | null, completion: readonly number[] | null): Uint32Array {
  const p = prompt ?? [];
  const c = completion ?? [];
  const out = new Uint32Array(p.length + c.length);
  for (let i = 0; i < p.length; i++) out[i] = p[i]!;
  for (let i = 0; i < c.length; i++) out[p.length + i] = c[i]!;
  return out;
}

/** The hash of a list of JSON-encoded elements (JSON text never holds a raw newline). */
export function listHash(encoded: readonly string[]): string {
  const h = createHash('sha256');
  for (const e of encoded) h.update(e).update('\n');
  return h.digest('hex').slice(0, 24);
}

/** An element as JSON text (what it becomes on disk; an undefined element is written as null). */
function encodeElement(m: unknown): string {
  return JSON.stringify(m) ?? 'null';
}

function bodyHistoryKey(body: unknown): string | undefined {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return undefined;
  for (const key of BODY_HISTORY_KEYS) if (Array.isArray((body as Record<string, unknown>)[key])) return key;
  return undefined;
}

/** What the encoder remembers of a stored call: enough to write the next one against it. */
interface Base {
  callId: string;
  /** prompt ++ completion ids (see idsOf). */
  ends: Uint32Array;
  engineMessages: string[] | null;
  bodyKey: string | undefined;
  bodyMessages: string[] | null;
}

function sharedTokens(base: Base, ids: readonly number[]): number {
  const ends = base.ends;
  const n = Math.min(ids.length, ends.length);
  let i = 0;
  while (i < n && ends[i] === ids[i]) i++;
  return i;
}

function sharedElements(base: readonly string[] | null, list: readonly string[]): number {
  if (!base) return 0;
  const n = Math.min(base.length, list.length);
  let i = 0;
  while (i < n && base[i] === list[i]) i++;
  return i;
}

/**
 * The best of `bases` for one list: the most shared elements, the newest on a tie. `most(b)` bounds
 * what `b` can share: a base that cannot beat the best so far is not compared at all, so the usual
 * case (the newest call is the parent, shared in full) compares the list once, not once per base.
 */
function pick(bases: readonly Base[], shared: (b: Base) => number, most: (b: Base) => number, min: number): { base: Base; keep: number } | undefined {
  let best: { base: Base; keep: number } | undefined;
  for (let i = bases.length - 1; i >= 0; i--) {
    if (best && most(bases[i]!) <= best.keep) continue;
    const keep = shared(bases[i]!);
    if (keep >= min && (!best || keep > best.keep)) best = { base: bases[i]!, keep };
  }
  return best;
}

/** A call line ready to append, and what to remember once it is on disk. */
export interface EncodedCall {
  text: string;
  base: Base;
}

/**
 * Per session: the last few stored calls, to write each new call against. Only calls whose line is
 * on disk are remembered (`remember`), so a reference never points at a line that was cut back.
 */
export class SessionEncoder {
  private readonly bases: Base[] = [];
  constructor(private readonly depth = 3) {}

  encode(record: CallRecord): EncodedCall {
    const ids = record.prompt_token_ids;
    const engineList = record.engine_request?.messages;
    const body = record.request?.body as Record<string, unknown> | undefined;
    const bodyKey = bodyHistoryKey(body);
    // The engine request mostly holds the very message objects of the request body (a chat dialect
    // passes them through): each is stringified once for both lists.
    const seen = new Map<unknown, string>();
    const encodeOnce = (m: unknown): string => {
      if (m === null || typeof m !== 'object') return encodeElement(m);
      let text = seen.get(m);
      if (text === undefined) seen.set(m, (text = encodeElement(m)));
      return text;
    };
    const bodyEncoded = bodyKey ? (body![bodyKey] as unknown[]).map(encodeOnce) : null;
    const engineEncoded = Array.isArray(engineList) ? engineList.map(encodeOnce) : null;
    const base: Base = { callId: record.call_id, ends: idsOf(ids ?? null, record.completion_token_ids ?? null), engineMessages: engineEncoded, bodyKey, bodyMessages: bodyEncoded };

    const enc: CallEncoding = {};
    let out: Record<string, unknown> = record as unknown as Record<string, unknown>;
    if (Array.isArray(ids) && ids.length > 0) {
      const best = pick(this.bases, (b) => sharedTokens(b, ids), (b) => Math.min(ids.length, b.ends.length), MIN_SHARED_TOKENS);
      if (best) {
        // The new base holds these ids already: hashing its copy reads a typed array, not a JS one.
        enc.p = { from: best.base.callId, keep: best.keep, h: tokenHash(base.ends.subarray(0, ids.length)) };
        out = { ...out, prompt_token_ids: ids.slice(best.keep) };
      }
    }
    if (engineEncoded && engineEncoded.length > 0) {
      const best = pick(this.bases, (b) => sharedElements(b.engineMessages, engineEncoded), (b) => Math.min(engineEncoded.length, b.engineMessages?.length ?? 0), MIN_SHARED_MESSAGES);
      if (best) {
        enc.em = { from: best.base.callId, keep: best.keep, h: listHash(engineEncoded) };
        out = { ...out, engine_request: { ...record.engine_request!, messages: (engineList as ChatMessage[]).slice(best.keep) } };
      }
    }
    if (bodyKey && bodyEncoded && bodyEncoded.length > 0) {
      const best = pick(this.bases, (b) => (b.bodyKey === bodyKey ? sharedElements(b.bodyMessages, bodyEncoded) : 0), (b) => (b.bodyKey === bodyKey ? Math.min(bodyEncoded.length, b.bodyMessages?.length ?? 0) : 0), MIN_SHARED_MESSAGES);
      if (best) {
        enc.bm = { key: bodyKey, from: best.base.callId, keep: best.keep, h: listHash(bodyEncoded) };
        out = { ...out, request: { ...record.request, body: { ...body, [bodyKey]: (body![bodyKey] as unknown[]).slice(best.keep) } } };
      }
    }
    const hasEnc = enc.p !== undefined || enc.em !== undefined || enc.bm !== undefined;
    const line = hasEnc ? { type: 'call', v: CALL_LINE_VERSION, enc, ...out } : { type: 'call', v: CALL_LINE_VERSION, ...out };
    return { text: `${JSON.stringify(line)}\n`, base };
  }

  /** The call's line is on disk: later calls may be written against it. */
  remember(base: Base): void {
    this.bases.push(base);
    if (this.bases.length > this.depth) this.bases.shift();
  }
}

export class CallDecodeError extends Error {}

/** What the decoder keeps of each call read so far: the lists a later line may refer to. */
interface Decoded {
  prompt: readonly number[] | null;
  completion: readonly number[] | null;
  engineMessages: readonly unknown[] | null;
  body: unknown;
}

/** Rebuilds call records line by line, in file order; a line refers only to earlier lines. */
export class SessionDecoder {
  private readonly byId = new Map<string, Decoded>();

  /** `line` is a parsed `type: call` line (its `type`, `v` and `enc` are removed from the result). */
  decode(line: Record<string, unknown>): CallRecord {
    const { type: _type, v, enc, ...rest } = line as { type: string; v?: number; enc?: CallEncoding } & Record<string, unknown>;
    const record = rest as unknown as CallRecord;
    if (enc?.p) {
      const from = this.source(enc.p.from);
      const p = from.prompt ?? [];
      const c = from.completion ?? [];
      const keep = enc.p.keep;
      if (keep > p.length + c.length) throw new CallDecodeError(`call ${record.call_id}: keeps ${keep} prompt ids of call ${enc.p.from}, which has ${p.length + c.length}`);
      const kept = keep <= p.length ? p.slice(0, keep) : p.concat(c.slice(0, keep - p.length));
      const ids = kept.concat(record.prompt_token_ids ?? []);
      if ((v === 2 ? tokenHashV2(ids) : tokenHash(ids)) !== enc.p.h) throw new CallDecodeError(`call ${record.call_id}: rebuilt prompt ids do not match their hash`);
      record.prompt_token_ids = ids;
    }
    if (enc?.em) {
      const list = this.source(enc.em.from).engineMessages ?? [];
      const messages = rebuild(list, record.engine_request?.messages ?? [], enc.em, record.call_id, 'engine request messages');
      record.engine_request = { ...record.engine_request!, messages: messages as ChatMessage[] };
    }
    if (enc?.bm) {
      const fromBody = this.source(enc.bm.from).body as Record<string, unknown> | undefined;
      const list = Array.isArray(fromBody?.[enc.bm.key]) ? (fromBody![enc.bm.key] as unknown[]) : [];
      const body = record.request.body as Record<string, unknown>;
      body[enc.bm.key] = rebuild(list, (body[enc.bm.key] as unknown[]) ?? [], enc.bm, record.call_id, `request ${enc.bm.key}`);
    }
    const prompt = record.prompt_token_ids ?? null;
    const completion = record.completion_token_ids ?? null;
    this.byId.set(record.call_id, {
      prompt,
      completion,
      engineMessages: Array.isArray(record.engine_request?.messages) ? record.engine_request.messages : null,
      body: record.request?.body,
    });
    return record;
  }

  private source(callId: string): Decoded {
    const d = this.byId.get(callId);
    if (!d) throw new CallDecodeError(`refers to call ${callId}, which is not stored before it`);
    return d;
  }
}

function rebuild(base: readonly unknown[], suffix: readonly unknown[], ref: SuffixRef, callId: string, what: string): unknown[] {
  if (ref.keep > base.length) throw new CallDecodeError(`call ${callId}: keeps ${ref.keep} ${what} of call ${ref.from}, which has ${base.length}`);
  const list = base.slice(0, ref.keep).concat(suffix);
  if (listHash(list.map(encodeElement)) !== ref.h) throw new CallDecodeError(`call ${callId}: rebuilt ${what} do not match their hash`);
  return list;
}
