// A digest over a call's recorded tokens: prompt ids, sampled ids and their logprobs. Written on the
// record when the proxy made the prompt itself (token-in mode) and recomputed by the training
// contract check, so a stored record whose sampled tokens or logprobs were changed after the fact
// (one token is enough) is refused instead of trained on.
import { createHash } from 'node:crypto';

export function tokensDigest(
  promptIds: readonly number[] | null,
  sampledIds: readonly number[] | null,
  logprobs: readonly number[] | null,
): string {
  const h = createHash('sha256');
  const ids = (list: readonly number[] | null) => {
    if (list === null) return h.update('null');
    h.update(`${list.length}:`);
    h.update(new Uint8Array(Float64Array.from(list).buffer));
  };
  ids(promptIds);
  ids(sampledIds);
  ids(logprobs);
  return h.digest('hex').slice(0, 32);
}
