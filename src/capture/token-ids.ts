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
