// Token-id arrays and the checks made on them on every call. A prompt runs to 100k ids, and
// V8's Array.prototype.every/some/findIndex with a callback cost about ten times a plain loop over
// such an array in Node 20 (108k ids: 1-1.8 ms against 0.07-0.15 ms, session 15), so every check
// over ids is one of these loops.

/** A token id: a non-negative integer. */
export const isTokenId = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;

/** The index of the first element that is not a token id, or -1. */
export function firstNonTokenId(list: readonly unknown[]): number {
  for (let i = 0; i < list.length; i++) if (!isTokenId(list[i])) return i;
  return -1;
}

/** Whether every element is a token id. */
export function allTokenIds(list: readonly unknown[]): list is number[] {
  return firstNonTokenId(list) < 0;
}

/** Whether `ids` begins with `prefix` (equal arrays included). */
export function startsWithIds(ids: readonly number[], prefix: readonly number[]): boolean {
  if (prefix.length > ids.length) return false;
  for (let i = 0; i < prefix.length; i++) if (ids[i] !== prefix[i]) return false;
  return true;
}

/** Whether two id arrays are equal. */
export function sameIds(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && startsWithIds(a, b);
}

/**
 * A typed id list as a JS array. Array.from over a 108k-id Int32Array costs 3.5-5 ms in Node 20 and
 * gives an array of generic elements; this loop costs about half and gives small integers, which
 * JSON.stringify and the store's scans also read faster.
 */
export function idList(typed: ArrayLike<number>): number[] {
  const out: number[] = [];
  for (let i = 0; i < typed.length; i++) out.push(typed[i]!);
  return out;
}

/** How many leading ids two lists share. */
export function commonPrefix(a: ArrayLike<number>, b: ArrayLike<number>): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/**
 * A number naming an id array, without holding it (0 is never given). Arrays named here never change
 * what they hold: a call record's, or one the token-in bridge built for a call. The bridge may append
 * to its own (Bridge.extend), never rewrite, so every prefix a call had stays what it was; a serial
 * with a length (the encoder keeps each call's ids with it) names one list.
 */
const serials = new WeakMap<object, number>();
let nextSerial = 1;
export function idsSerial(ids: readonly number[]): number {
  let s = serials.get(ids);
  if (s === undefined) {
    s = nextSerial++;
    serials.set(ids, s);
  }
  return s;
}

/** How an id array was built: `prefix` ++ `more` ++ new ids (their serials). */
const extensions = new WeakMap<readonly number[], { prefix: number; more: number }>();

/**
 * `ids` was built as `prefix` ++ `more` ++ new ids (the token-in bridge: an anchor's prompt and
 * sampled ids, then the bridge). The store's encoder then knows the anchor's ids are shared without
 * comparing 100k of them (call-codec.ts, scanPromptIds). `prefix` may be `ids` itself, grown in
 * place: the prefix is then the length the anchor's call had, which `more` (its sampled ids) names.
 */
export function noteExtension(ids: readonly number[], prefix: readonly number[], more: readonly number[]): void {
  extensions.set(ids, { prefix: idsSerial(prefix), more: idsSerial(more) });
}

export function extensionOf(ids: readonly number[]): { prefix: number; more: number } | undefined {
  return extensions.get(ids);
}
