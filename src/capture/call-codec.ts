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
// also copies them (see `tokenHash`). v4 (session 16) is v3's two lanes with the list's length mixed
// in at the end instead of the start, so the hash of a prompt that extends its parent's prompt ++
// completion goes on from the parent's state and folds only the new ids (v3 folded all of them: 0.4
// ms at 108k tokens, in process, every turn). All are integrity checks against a wrong or corrupted
// reconstruction, not against an adversary who can write the data dir; a line of a newer version than
// this build reads is refused, naming it.
import { createHash, type Hash } from 'node:crypto';
import { BODY_HISTORY_KEYS } from './history-body.js';
import { commonPrefix, extensionOf, idsSerial } from './token-ids.js';
import type { CallRecord, ChatMessage } from './types.js';

export const CALL_LINE_VERSION = 4;

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

/** Below this many shared elements a suffix is not worth a reference. */
const MIN_SHARED_TOKENS = 8;
const MIN_SHARED_MESSAGES = 1;

/** The v2 prompt-id hash (read only: lines written before v3 carry it). */
export function tokenHashV2(ids: readonly number[]): string {
  return createHash('sha256').update(Float64Array.from(ids)).digest('hex').slice(0, 24);
}

/** The v4 hash's running state: both lanes after the first `n` ids (positions 0 to n - 1). */
export interface IdsHashState {
  readonly a: number;
  readonly b: number;
  readonly n: number;
}

const IDS_HASH_START: IdsHashState = { a: 0x811c9dc5, b: 0x9747b28c, n: 0 };

/** `state` extended by ids[from..to), at positions state.n on (ids as 32-bit unsigned: what a copy holds). */
export function foldIds(state: IdsHashState, ids: ArrayLike<number>, from: number, to: number): IdsHashState {
  let a = state.a;
  let b = state.b;
  let pos = state.n;
  for (let i = from; i < to; i++, pos++) {
    const v = ids[i]! >>> 0;
    a = Math.imul(a ^ v, 0x01000193);
    b = Math.imul(b ^ (v + pos), 0xcc9e2d51);
    b = (b << 15) | (b >>> 17);
  }
  return { a, b, n: pos };
}

/** The v4 hash of the ids a state has folded: the count goes in here, last. 16 hex digits. */
export function finishIds(state: IdsHashState): string {
  const a = state.a ^ state.n;
  return hex32(fmix(a ^ Math.imul(state.b, 0x1b873593))) + hex32(fmix(state.b ^ a));
}

/** The v4 prompt-id hash of a whole list. */
export function tokenHashV4(ids: ArrayLike<number>): string {
  return finishIds(foldIds(IDS_HASH_START, ids, 0, ids.length));
}

/**
 * The v3 prompt-id hash (read only: lines written before v4 carry it): two 32-bit multiply-xor lanes
 * (FNV-1a's prime and murmur3's), each id and its position mixed in, finished with murmur3's
 * avalanche. 16 hex digits.
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

/**
 * The typed ids of a branch of calls: a buffer each call that extends the last one extends in place.
 * A base's `ends` is a view of its first `len` ids; they never change once written, since only the
 * call that extends the buffer's last view (`used` ids) writes, and only beyond it. At 108k tokens
 * this saves each turn a 432 KB allocation and a copy of the context (a fork copies, as before).
 */
export interface IdsStore {
  buf: Uint32Array;
  used: number;
}

/**
 * A call's prompt ids against the newest remembered call: copies them (prompt ++ completion, see
 * idsOf) for the next call, counts how many leading ids the newest base shares (compared as sent: an
 * id of 2^32 or more never matches its truncated copy), and hashes the prompt ids (v4). When the
 * newest base's whole list is shared (a continuation: the prompt extends the parent's prompt ++
 * completion), the hash goes on from the base's state and folds only the new ids, and the ids are
 * written after the base's in its store when the base is the store's last view. `extendsNewest`: the
 * prompt was built as the newest call's own prompt and completion arrays ++ more (token-ids.ts,
 * noteExtension), so they are not compared. Returns the state over prompt ++ completion too, for the
 * call after this one.
 */
export function scanPromptIds(
  prompt: readonly number[] | null,
  completion: readonly number[] | null,
  newest: { ends: Uint32Array; idsState: IdsHashState; store?: IdsStore } | undefined,
  extendsNewest = false,
): { ends: Uint32Array; store: IdsStore; shared: number; hash: string; idsState: IdsHashState } {
  const p = prompt ?? [];
  const c = completion ?? [];
  const n = p.length;
  const total = n + c.length;
  let shared = 0;
  if (newest) {
    const e = newest.ends;
    shared = extendsNewest && n >= e.length ? e.length : commonPrefix(e, p);
  }
  const whole = newest !== undefined && newest.ends.length > 0 && shared === newest.ends.length;
  const tip = whole && newest.store !== undefined && newest.store.used === newest.ends.length ? newest.store : undefined;
  let store: IdsStore;
  if (tip) {
    store = tip;
    if (store.buf.length < total) {
      const grown = new Uint32Array(total + (total >> 3) + 64);
      grown.set(store.buf.subarray(0, store.used));
      store.buf = grown;
    }
    const buf = store.buf;
    for (let i = shared; i < n; i++) buf[i] = p[i]!;
  } else {
    // Room for a few more turns of this branch.
    store = { buf: new Uint32Array(total + (total >> 3) + 64), used: 0 };
    // The typed array's own copy loop (ToUint32 per element, as an indexed store does) is ~3x a JS loop.
    store.buf.set(p);
  }
  store.buf.set(c, n);
  store.used = total;
  const ends = store.buf.subarray(0, total);
  const promptState = whole ? foldIds(newest.idsState, ends, shared, n) : foldIds(IDS_HASH_START, ends, 0, n);
  return { ends, store, shared, hash: finishIds(promptState), idsState: foldIds(promptState, ends, n, total) };
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

/** listHash's digest of a running state (the state itself goes on: digest finalizes a copy). */
const digestOf = (state: Hash): string => state.copy().digest('hex').slice(0, 24);

/** listHash's running state over `items`, from `state` (a copy is extended) or from the start. */
function hashItems(items: readonly unknown[], from = 0, state?: Hash): Hash {
  const h = state ? state.copy() : createHash('sha256');
  for (let i = from; i < items.length; i++) h.update(encodeElement(items[i])).update('\n');
  return h;
}

/** Nesting below which sameJson recurses; deeper values are compared as text. */
const SAME_JSON_DEPTH = 64;

/**
 * Whether two values have the same JSON text, without writing it: the encoder compares each list
 * element of a call with its parent's this way (a harness resends its whole history on every call,
 * so stringifying it was most of encoding a call). It may answer false where the texts are equal
 * (NaN, objects that are not plain, very deep nesting the text comparison also settles): a false
 * only means less is shared. It never answers true where they differ: key order counts, and
 * properties JSON.stringify leaves out (undefined, functions) are left out here too.
 */
export function sameJson(a: unknown, b: unknown, depth = 0): boolean {
  if (a === b) return true;
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return false;
  if (depth > SAME_JSON_DEPTH) return JSON.stringify(a) === JSON.stringify(b);
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!sameJson(a[i], b[i], depth + 1)) return false;
    return true;
  }
  if (Array.isArray(b) || !isPlain(a) || !isPlain(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  const ra = a as Record<string, unknown>;
  const rb = b as Record<string, unknown>;
  let i = 0;
  let j = 0;
  for (;;) {
    while (i < ka.length && !written(ra[ka[i]!])) i++;
    while (j < kb.length && !written(rb[kb[j]!])) j++;
    if (i === ka.length || j === kb.length) return i === ka.length && j === kb.length;
    if (ka[i] !== kb[j] || !sameJson(ra[ka[i]!], rb[kb[j]!], depth + 1)) return false;
    i++;
    j++;
  }
}

/** A plain object whose JSON text is its own properties (no toJSON to call). */
function isPlain(o: object): boolean {
  const proto: unknown = Object.getPrototypeOf(o);
  return (proto === Object.prototype || proto === null) && typeof (o as { toJSON?: unknown }).toJSON !== 'function';
}

/** Whether JSON.stringify writes an object property holding this value. */
const written = (v: unknown): boolean => v !== undefined && typeof v !== 'function' && typeof v !== 'symbol';

function bodyHistoryKey(body: unknown): string | undefined {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return undefined;
  for (const key of BODY_HISTORY_KEYS) if (Array.isArray((body as Record<string, unknown>)[key])) return key;
  return undefined;
}

/**
 * A remembered list: its elements (the stored call's own objects, compared with sameJson) and
 * listHash's running state over all of them, which a call that keeps the whole list extends with
 * its suffix instead of hashing the history again. Holding the objects relies on what every reader
 * of a record already does: a stored record is never changed in memory (a change after its line was
 * written would make the next call's suffix be measured against something the file does not hold).
 */
interface ListBase {
  items: readonly unknown[];
  hash: Hash;
}

/** What the encoder remembers of a stored call: enough to write the next one against it. */
interface Base {
  callId: string;
  /** prompt ++ completion ids (see idsOf): a view of `store`. */
  ends: Uint32Array;
  store: IdsStore | undefined;
  /** Which prompt and completion arrays the call had (idsSerial): a later prompt built on them is not compared. */
  promptSerial: number;
  completionSerial: number;
  /** The v4 hash state over `ends` (all of it): a continuation's prompt hash goes on from it. */
  idsState: IdsHashState;
  engineMessages: ListBase | null;
  bodyKey: string | undefined;
  bodyMessages: ListBase | null;
}

function sharedElements(base: ListBase | null, list: readonly unknown[]): number {
  if (!base) return 0;
  const n = Math.min(base.items.length, list.length);
  let i = 0;
  while (i < n && sameJson(base.items[i], list[i])) i++;
  return i;
}

/** A list's reference to its best base, and what the encoder remembers of the list. */
function encodeList(
  bases: readonly Base[],
  list: readonly unknown[],
  of: (b: Base) => ListBase | null,
): { ref?: SuffixRef; remembered: ListBase } {
  const best =
    list.length > 0
      ? pick(
          bases,
          (b) => sharedElements(of(b), list),
          (b) => Math.min(list.length, of(b)?.items.length ?? 0),
          MIN_SHARED_MESSAGES,
        )
      : undefined;
  if (!best) return { remembered: { items: list, hash: hashItems(list) } };
  const parent = of(best.base)!;
  // The usual case keeps the parent's whole list: its state goes on with the suffix. A call that
  // keeps less (a rewritten or compacted history) hashes its list from the start.
  const hash = best.keep === parent.items.length ? hashItems(list, best.keep, parent.hash) : hashItems(list);
  return { ref: { from: best.base.callId, keep: best.keep, h: digestOf(hash) }, remembered: { items: list, hash } };
}

/**
 * The best of `bases` for one list: the most shared elements, the newest on a tie. `most(b)` bounds
 * what `b` can share: a base that cannot beat the best so far is not compared at all, so the usual
 * case (the newest call is the parent, shared in full) compares the list once, not once per base.
 */
function pick(
  bases: readonly Base[],
  shared: (b: Base) => number,
  most: (b: Base) => number,
  min: number,
): { base: Base; keep: number } | undefined {
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
    const engine = Array.isArray(engineList) ? encodeList(this.bases, engineList, (b) => b.engineMessages) : undefined;
    const bodyList = bodyKey
      ? encodeList(this.bases, body![bodyKey] as unknown[], (b) => (b.bodyKey === bodyKey ? b.bodyMessages : null))
      : undefined;
    const newest = this.bases[this.bases.length - 1];
    const built = Array.isArray(ids) ? extensionOf(ids) : undefined;
    const extendsNewest =
      built !== undefined && newest !== undefined && built.prefix === newest.promptSerial && built.more === newest.completionSerial;
    const scan =
      Array.isArray(ids) && ids.length > 0 ? scanPromptIds(ids, record.completion_token_ids ?? null, newest, extendsNewest) : undefined;
    const ends = scan?.ends ?? idsOf(ids ?? null, record.completion_token_ids ?? null);
    const base: Base = {
      callId: record.call_id,
      ends,
      store: scan?.store,
      promptSerial: Array.isArray(ids) ? idsSerial(ids) : 0,
      completionSerial: Array.isArray(record.completion_token_ids) ? idsSerial(record.completion_token_ids) : 0,
      idsState: scan?.idsState ?? foldIds(IDS_HASH_START, ends, 0, ends.length),
      engineMessages: engine?.remembered ?? null,
      bodyKey,
      bodyMessages: bodyList?.remembered ?? null,
    };

    const enc: CallEncoding = {};
    let out: Record<string, unknown> = record as unknown as Record<string, unknown>;
    if (scan) {
      // The newest base was compared in the scan; older ones only where they could share more.
      const best = pick(
        this.bases,
        (b) => (b === newest ? scan.shared : commonPrefix(b.ends, ids!)),
        (b) => Math.min(ids!.length, b.ends.length),
        MIN_SHARED_TOKENS,
      );
      if (best) {
        enc.p = { from: best.base.callId, keep: best.keep, h: scan.hash };
        out = { ...out, prompt_token_ids: ids!.slice(best.keep) };
      }
    }
    if (engine?.ref) {
      enc.em = engine.ref;
      out = { ...out, engine_request: { ...record.engine_request!, messages: (engineList as ChatMessage[]).slice(engine.ref.keep) } };
    }
    if (bodyKey && bodyList?.ref) {
      enc.bm = { key: bodyKey, ...bodyList.ref };
      out = {
        ...out,
        request: { ...record.request, body: { ...body, [bodyKey]: (body![bodyKey] as unknown[]).slice(bodyList.ref.keep) } },
      };
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
    if (typeof v === 'number' && v > CALL_LINE_VERSION)
      throw new CallDecodeError(
        `call ${record.call_id}: line version ${v} was written by a newer Harness Lab (this one reads up to ${CALL_LINE_VERSION})`,
      );
    if (enc?.p) {
      const from = this.source(enc.p.from);
      const p = from.prompt ?? [];
      const c = from.completion ?? [];
      const keep = enc.p.keep;
      if (keep > p.length + c.length)
        throw new CallDecodeError(
          `call ${record.call_id}: keeps ${keep} prompt ids of call ${enc.p.from}, which has ${p.length + c.length}`,
        );
      const kept = keep <= p.length ? p.slice(0, keep) : p.concat(c.slice(0, keep - p.length));
      const ids = kept.concat(record.prompt_token_ids ?? []);
      if ((v === 4 ? tokenHashV4(ids) : v === 2 ? tokenHashV2(ids) : tokenHash(ids)) !== enc.p.h)
        throw new CallDecodeError(`call ${record.call_id}: rebuilt prompt ids do not match their hash`);
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
  if (ref.keep > base.length)
    throw new CallDecodeError(`call ${callId}: keeps ${ref.keep} ${what} of call ${ref.from}, which has ${base.length}`);
  const list = base.slice(0, ref.keep).concat(suffix);
  if (listHash(list.map(encodeElement)) !== ref.h) throw new CallDecodeError(`call ${callId}: rebuilt ${what} do not match their hash`);
  return list;
}
