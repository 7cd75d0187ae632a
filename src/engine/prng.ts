// Seeded pseudo-random numbers for the tiny model's weights and for sampling. SplitMix32-style
// mixing of a 32-bit state: fast, reproducible across platforms (integer arithmetic only), and good
// enough for sampling and random weights; not for anything secret.
export class Prng {
  private state: number;

  /** `seed` may be any integer (including above 2^32) or a string label mixed with a seed. */
  constructor(seed: number | string) {
    this.state = typeof seed === 'number' ? mixSeed(seed) : hashString(seed);
  }

  /** Uniform integer in [0, 2^32). */
  nextUint32(): number {
    this.state = (this.state + 0x9e3779b9) >>> 0;
    let z = this.state;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  }

  /** Uniform in [0, 1) with 53 bits of resolution. */
  next(): number {
    const hi = this.nextUint32() >>> 5;
    const lo = this.nextUint32() >>> 6;
    return (hi * 67108864 + lo) / 9007199254740992;
  }

  /** Standard normal (Box-Muller; one value per call keeps the stream simple to reason about). */
  normal(): number {
    let u = this.next();
    while (u === 0) u = this.next();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * this.next());
  }
}

function mixSeed(seed: number): number {
  if (!Number.isFinite(seed)) throw new Error(`seed must be a finite number, got ${seed}`);
  const n = Math.trunc(Math.abs(seed));
  const lo = n % 4294967296;
  const hi = Math.floor(n / 4294967296) % 4294967296;
  return (Math.imul(lo ^ 0x5bd1e995, 0x27d4eb2d) ^ Math.imul(hi + 0x165667b1, 0x9e3779b1) ^ (seed < 0 ? 0xdeadbeef : 0)) >>> 0;
}

function hashString(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

/** A seeded `() => number` in [0, 1), for code that wants a drop-in for Math.random. */
export function seededRandom(seed: number | string): () => number {
  const prng = new Prng(seed);
  return () => prng.next();
}
