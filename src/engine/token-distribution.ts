// The next-token distribution at one position and what sampling does to it. The model hands us the
// raw distribution (softmax of the logits, full vocabulary, sorted by probability); temperature,
// top-k, top-p and min-p are applied here, so sampling, processed logprobs and teacher-forced
// scoring all share one computation.
import type { Prng } from './prng.js';

export interface SamplingParams {
  /** 0 means greedy; logprobs are then reported as at temperature 1. */
  temperature: number;
  /** 1 disables. */
  topP: number;
  /** 0 or negative disables. */
  topK: number;
  /** 0 disables. */
  minP: number;
}

export const NEUTRAL_SAMPLING: SamplingParams = { temperature: 1, topP: 1, topK: 0, minP: 0 };

/** vLLM's stand-in for a logprob of minus infinity (JSON has no -Infinity). */
export const LOGPROB_FLOOR = -9999;

export interface TokenLogprob {
  id: number;
  logprob: number;
}

export class TokenDistribution {
  /** `ids` sorted by descending probability; `rawLogprobs[i]` belongs to `ids[i]`. */
  constructor(
    readonly ids: Int32Array,
    readonly rawLogprobs: Float64Array,
  ) {}

  /** From node-llama-cpp's probabilities map (already sorted, highest first). */
  static fromProbabilities(probabilities: Map<number, number>): TokenDistribution {
    const flat: number[] = [];
    for (const [id, p] of probabilities) flat.push(id, p);
    return TokenDistribution.fromFlat(flat);
  }

  /** From the addon's flat [id, p, id, p, ...] list (sorted, highest first). */
  static fromFlat(flat: readonly number[]): TokenDistribution {
    const n = flat.length >> 1;
    const ids = new Int32Array(n);
    const lps = new Float64Array(n);
    let sum = 0;
    for (let i = 0; i < n; i++) {
      ids[i] = flat[2 * i]!;
      const p = flat[2 * i + 1]!;
      sum += p;
      lps[i] = Math.log(p);
    }
    // llama.cpp normalises in float32 over the whole vocabulary; its sum drifts from 1 by up to ~1e-4.
    const norm = Math.log(sum);
    for (let j = 0; j < lps.length; j++) lps[j] = lps[j]! - norm;
    for (let j = 1; j < lps.length; j++) {
      if (lps[j]! > lps[j - 1]!) throw new Error('token probabilities are not sorted');
    }
    return new TokenDistribution(ids, lps);
  }

  get size(): number {
    return this.ids.length;
  }

  /** Position of `id` in the sorted order, -1 if absent (a native scan beats building a 152k-entry map). */
  rank(id: number): number {
    return this.ids.indexOf(id);
  }

  rawLogprob(id: number): number {
    const r = this.rank(id);
    return r < 0 ? -Infinity : this.rawLogprobs[r]!;
  }

  /** The distribution sampling actually draws from under `params`. */
  processed(params: SamplingParams): ProcessedDistribution {
    return new ProcessedDistribution(this, params);
  }
}

export class ProcessedDistribution {
  /** Scaled logprobs of the kept prefix (ids[0..kept)), and their log-normaliser. */
  private readonly scaled: Float64Array;
  readonly kept: number;
  private readonly lse: number;

  constructor(
    readonly base: TokenDistribution,
    readonly params: SamplingParams,
  ) {
    const t = params.temperature > 0 ? params.temperature : 1;
    let n = base.size;
    if (params.topK > 0) n = Math.min(n, Math.floor(params.topK));
    const scaled = new Float64Array(n);
    for (let i = 0; i < n; i++) scaled[i] = base.rawLogprobs[i]! / t;
    let lse = logSumExp(scaled, n);
    if (params.topP < 1) {
      // Keep the smallest prefix whose mass reaches top_p (at least one token).
      let cum = 0;
      let keep = 0;
      while (keep < n && (keep === 0 || cum < params.topP)) cum += Math.exp(scaled[keep++]! - lse);
      n = keep;
      lse = logSumExp(scaled, n);
    }
    if (params.minP > 0 && n > 1) {
      const floor = scaled[0]! + Math.log(params.minP);
      let keep = 1;
      while (keep < n && scaled[keep]! >= floor) keep++;
      n = keep;
      lse = logSumExp(scaled, n);
    }
    this.scaled = scaled;
    this.kept = n;
    this.lse = lse;
  }

  /** Processed logprob of `id`; -Infinity when truncation removed it. */
  logprob(id: number): number {
    const r = this.base.rank(id);
    return r < 0 || r >= this.kept ? -Infinity : this.scaled[r]! - this.lse;
  }

  /** The `n` most likely tokens; past the truncation they carry -Infinity, as vLLM's processed top-n does. */
  top(n: number): TokenLogprob[] {
    const out: TokenLogprob[] = [];
    for (let i = 0; i < Math.min(n, this.base.size); i++)
      out.push({ id: this.base.ids[i]!, logprob: i < this.kept ? this.scaled[i]! - this.lse : -Infinity });
    return out;
  }

  /** Draws a token; greedy (temperature 0) takes the most likely one. */
  sample(rng: Prng): number {
    if (this.params.temperature <= 0) return this.base.ids[0]!;
    const u = rng.next();
    let cum = 0;
    for (let i = 0; i < this.kept; i++) {
      cum += Math.exp(this.scaled[i]! - this.lse);
      if (u < cum) return this.base.ids[i]!;
    }
    return this.base.ids[this.kept - 1]!;
  }
}

/** Raw (model) top tokens, for `logprobs-mode raw`. */
export function rawTop(dist: TokenDistribution, n: number): TokenLogprob[] {
  const out: TokenLogprob[] = [];
  for (let i = 0; i < Math.min(n, dist.size); i++) out.push({ id: dist.ids[i]!, logprob: dist.rawLogprobs[i]! });
  return out;
}

function logSumExp(a: Float64Array, n: number): number {
  if (n === 0) return -Infinity;
  const max = a[0]!; // sorted, highest first
  if (max === -Infinity) return -Infinity;
  let s = 0;
  for (let i = 0; i < n; i++) s += Math.exp(a[i]! - max);
  return max + Math.log(s);
}

/** JSON-safe logprob. */
export function finiteLogprob(lp: number): number {
  return Number.isFinite(lp) ? Math.max(lp, LOGPROB_FLOOR) : LOGPROB_FLOOR;
}
