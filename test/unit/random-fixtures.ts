// Deterministic randomness for property tests: the same seed gives the same cases on every run.

/** A small deterministic generator (xorshift32): numbers in [0, 1). */
export function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 2 ** 32;
  };
}

/** `bytes` as the chunks a socket might deliver: cut at up to `maxCuts` points `r` picks (some chunks empty, some mid-character). */
export function splitBytes(bytes: Buffer, r: () => number, maxCuts = 7): Buffer[] {
  const cuts = Array.from({ length: Math.floor(r() * (maxCuts + 1)) }, () => Math.floor(r() * (bytes.length + 1))).sort((a, b) => a - b);
  const parts: Buffer[] = [];
  let at = 0;
  for (const cut of [...cuts, bytes.length]) {
    parts.push(Buffer.from(bytes.subarray(at, cut)));
    at = cut;
  }
  return parts;
}
