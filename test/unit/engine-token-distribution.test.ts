import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Prng } from '../../src/engine/prng.js';
import { finiteLogprob, LOGPROB_FLOOR, NEUTRAL_SAMPLING, rawTop, TokenDistribution } from '../../src/engine/token-distribution.js';

// Raw distribution over five tokens (ids 10..14), probabilities 0.5, 0.25, 0.15, 0.07, 0.03.
const probs = new Map([
  [10, 0.5],
  [11, 0.25],
  [12, 0.15],
  [13, 0.07],
  [14, 0.03],
]);
const dist = TokenDistribution.fromProbabilities(probs);
const close = (a: number, b: number, msg?: string) => assert.ok(Math.abs(a - b) < 1e-12, `${msg ?? ''} ${a} != ${b}`);

test('raw logprobs are the log of the model probabilities', () => {
  close(dist.rawLogprob(10), Math.log(0.5));
  close(dist.rawLogprob(14), Math.log(0.03));
  assert.equal(dist.rawLogprob(99), -Infinity);
  assert.deepEqual(
    rawTop(dist, 2).map((t) => t.id),
    [10, 11],
  );
});

test('neutral processing equals raw', () => {
  const p = dist.processed(NEUTRAL_SAMPLING);
  for (const id of [10, 11, 12, 13, 14]) close(p.logprob(id), dist.rawLogprob(id));
});

test('temperature divides the log-probabilities and renormalises', () => {
  const t = 0.5;
  const p = dist.processed({ ...NEUTRAL_SAMPLING, temperature: t });
  const z = [...probs.values()].map((q) => Math.log(q) / t);
  const lse = Math.log(z.reduce((s, v) => s + Math.exp(v), 0));
  close(p.logprob(11), Math.log(0.25) / t - lse);
  // The top-1/top-2 gap scales with 1/T: what the proxy's logprobs-mode probe measures.
  const gap = (d: ReturnType<typeof dist.processed>) => d.logprob(10) - d.logprob(11);
  close(gap(dist.processed({ ...NEUTRAL_SAMPLING, temperature: 2 })) / gap(dist.processed(NEUTRAL_SAMPLING)), 0.5);
});

test('top-k, top-p and min-p truncate and renormalise', () => {
  const k = dist.processed({ ...NEUTRAL_SAMPLING, topK: 2 });
  close(k.logprob(10), Math.log(0.5 / 0.75));
  assert.equal(k.logprob(12), -Infinity);
  assert.equal(k.kept, 2);
  // top_p 0.8: 0.5 + 0.25 = 0.75 < 0.8, so the third token is needed.
  const p = dist.processed({ ...NEUTRAL_SAMPLING, topP: 0.8 });
  assert.equal(p.kept, 3);
  close(p.logprob(12), Math.log(0.15 / 0.9));
  const m = dist.processed({ ...NEUTRAL_SAMPLING, minP: 0.2 }); // keeps p >= 0.1
  assert.equal(m.kept, 3);
  assert.deepEqual(
    m.top(4).map((t) => t.id),
    [10, 11, 12, 13],
  );
  assert.equal(m.top(4)[3]!.logprob, -Infinity, 'past the truncation');
});

test('sampling follows the processed distribution and is reproducible per seed', () => {
  const p = dist.processed(NEUTRAL_SAMPLING);
  const draw = (seed: number, n: number) => {
    const rng = new Prng(seed);
    return Array.from({ length: n }, () => p.sample(rng));
  };
  assert.deepEqual(draw(7, 50), draw(7, 50));
  assert.notDeepEqual(draw(7, 50), draw(8, 50));
  const counts = new Map<number, number>();
  for (const id of draw(1, 20000)) counts.set(id, (counts.get(id) ?? 0) + 1);
  assert.ok(Math.abs(counts.get(10)! / 20000 - 0.5) < 0.02);
  assert.ok(Math.abs(counts.get(14)! / 20000 - 0.03) < 0.01);
  const greedy = dist.processed({ ...NEUTRAL_SAMPLING, temperature: 0 });
  assert.equal(greedy.sample(new Prng(3)), 10);
  const topk = dist.processed({ ...NEUTRAL_SAMPLING, topK: 1 });
  const rng = new Prng(5);
  assert.ok(Array.from({ length: 20 }, () => topk.sample(rng)).every((id) => id === 10));
});

test('logprobs leave as finite JSON numbers', () => {
  assert.equal(finiteLogprob(-Infinity), LOGPROB_FLOOR);
  assert.equal(finiteLogprob(-1.5), -1.5);
  assert.throws(
    () =>
      TokenDistribution.fromProbabilities(
        new Map([
          [1, 0.1],
          [2, 0.9],
        ]),
      ),
    /not sorted/,
  );
});
