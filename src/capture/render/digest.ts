// A digest over a call's recorded tokens: prompt ids, sampled ids and their logprobs. Written on the
// record when the proxy made the prompt itself (token-in mode) and recomputed by the training
// contract check, so a stored record whose sampled tokens or logprobs were changed after the fact
// (one token is enough) is refused instead of trained on.
//
// Two formats. v1 (no prefix, records written before session 16) put each list's length before its
// ids, so every call hashed its whole prompt again: SHA-256 over 864 KB, 1.1-1.8 ms a call at 108k
// tokens (bench/token-in-cost.ts), the largest item that grew with the context. v2 (`2:` prefix)
// hashes the prompt's ids first and the lengths last, so a bridged call's digest goes on from its
// anchor's state (prompt ++ sampled, then the bridge's ids): the proxy hashes only a turn's new ids.
import { createHash, type Hash } from 'node:crypto';

export const TOKENS_DIGEST_V2 = '2:';

/**
 * Lists are hashed as float64s through one reused buffer of this many elements: the same bytes as
 * one Float64Array of the whole list, without allocating 864 KB for a 108k-token prompt per call.
 */
const CHUNK = 8192;
const scratch = new Float64Array(CHUNK);
const scratchBytes = new Uint8Array(scratch.buffer);

/** Feeds `list` to `h` as float64s (what Float64Array.from(list) holds); returns `h`. */
export function hashIds(h: Hash, list: readonly number[]): Hash {
  for (let from = 0; from < list.length; from += CHUNK) {
    const n = Math.min(CHUNK, list.length - from);
    for (let i = 0; i < n; i++) scratch[i] = list[from + i]!;
    h.update(n === CHUNK ? scratchBytes : scratchBytes.subarray(0, n * 8));
  }
  return h;
}

/**
 * The v2 digest. `promptState`: a SHA-256 state that has been fed exactly the prompt's ids (hashIds),
 * e.g. an anchor's state extended by the bridge; it is copied, not changed. Without it the prompt is
 * hashed here.
 */
export function tokensDigest(
  promptIds: readonly number[] | null,
  sampledIds: readonly number[] | null,
  logprobs: readonly number[] | null,
  promptState?: Hash,
): string {
  const h = promptState ? promptState.copy() : hashIds(createHash('sha256'), promptIds ?? []);
  hashIds(h, sampledIds ?? []);
  const length = (list: readonly number[] | null) => (list === null ? 'null' : String(list.length));
  h.update(`|${length(promptIds)}:${length(sampledIds)}:${length(logprobs)}:`);
  if (logprobs !== null) hashIds(h, logprobs);
  return TOKENS_DIGEST_V2 + h.digest('hex').slice(0, 32);
}

/** The v1 digest (records written before v2 carry it). */
export function tokensDigestV1(
  promptIds: readonly number[] | null,
  sampledIds: readonly number[] | null,
  logprobs: readonly number[] | null,
): string {
  const h = createHash('sha256');
  for (const list of [promptIds, sampledIds, logprobs]) {
    if (list === null) h.update('null');
    else hashIds(h.update(`${list.length}:`), list);
  }
  return h.digest('hex').slice(0, 32);
}

/** Whether a record's digest (either format) matches its tokens. */
export function tokensDigestMatches(
  digest: string,
  promptIds: readonly number[] | null,
  sampledIds: readonly number[] | null,
  logprobs: readonly number[] | null,
): boolean {
  return digest.startsWith(TOKENS_DIGEST_V2)
    ? digest === tokensDigest(promptIds, sampledIds, logprobs)
    : digest === tokensDigestV1(promptIds, sampledIds, logprobs);
}
