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

/** Ids per piece of a long idList: 64 KB of elements, below the size V8 gives an object its own pages. */
const ID_PIECE = 8192;

/**
 * A typed id list as a JS array of small integers (packed, which JSON.stringify and the store's
 * scans read fastest; Array.from gives generic elements, a preallocated `new Array(n)` a holey array
 * that JSON.stringify reads at half speed). A long list is pushed in pieces and joined by one concat:
 * one push loop over 108k ids regrew the array ~25 times, each regrowth a fresh set of pages once
 * past 128 KB (8 ms on the bench machine, against 3.5 ms in pieces; the first turn of a session
 * renders its whole context).
 */
export function idList(typed: ArrayLike<number>): number[] {
  const n = typed.length;
  const pieces: number[][] = [];
  for (let from = 0; from < n || pieces.length === 0; from += ID_PIECE) {
    const piece: number[] = [];
    const end = Math.min(n, from + ID_PIECE);
    for (let i = from; i < end; i++) piece.push(typed[i]!);
    pieces.push(piece);
  }
  return pieces.length === 1 ? pieces[0]! : pieces[0]!.concat(...pieces.slice(1));
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
