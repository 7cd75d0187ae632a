// The tokens digest: v1 (records written before session 16) still verifies; v2 goes on from a state
// over the prompt's ids, and a bridge's state (anchor prompt ++ sampled, then the bridge) gives the
// digest a whole-prompt hash gives; one token changed anywhere is caught in both formats.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { hashIds, tokensDigest, tokensDigestMatches, tokensDigestV1 } from '../../src/capture/render/digest.js';

/** v1 as it was first written: one Float64Array per list. */
function v1AsWritten(p: number[] | null, s: number[] | null, l: number[] | null): string {
  const h = createHash('sha256');
  for (const list of [p, s, l]) {
    if (list === null) h.update('null');
    else h.update(`${list.length}:`).update(new Uint8Array(Float64Array.from(list).buffer));
  }
  return h.digest('hex').slice(0, 32);
}

const ids = (n: number, seed: number) => Array.from({ length: n }, (_, i) => (i * 7919 + seed) % 151_936);

test('v1 through the chunk buffer equals v1 as first written, at chunk edges and for null lists', () => {
  for (const n of [0, 1, 8191, 8192, 8193, 20_000]) {
    const sampled = ids(n % 97, 3);
    const logprobs = sampled.map((_, i) => -i / 7);
    assert.equal(tokensDigestV1(ids(n, 1), sampled, logprobs), v1AsWritten(ids(n, 1), sampled, logprobs), `n=${n}`);
    assert.ok(tokensDigestMatches(v1AsWritten(ids(n, 1), sampled, logprobs), ids(n, 1), sampled, logprobs));
  }
  assert.equal(tokensDigestV1(null, [5], null), v1AsWritten(null, [5], null));
});

test("v2: a bridge's state from its anchor's gives the whole prompt's digest", () => {
  const anchorPrompt = ids(9000, 1);
  const anchorSampled = ids(40, 2);
  const bridge = ids(70, 5);
  const prompt = [...anchorPrompt, ...anchorSampled, ...bridge];
  const sampled = ids(30, 9);
  const logprobs = sampled.map((_, i) => -i / 3);
  const anchorState = hashIds(createHash('sha256'), anchorPrompt);
  const state = hashIds(hashIds(anchorState.copy(), anchorSampled), bridge);
  const digest = tokensDigest(prompt, sampled, logprobs, state);
  assert.match(digest, /^2:[0-9a-f]{32}$/);
  assert.equal(digest, tokensDigest(prompt, sampled, logprobs));
  assert.equal(tokensDigest(prompt, sampled, logprobs, state), digest, 'the state is copied, not used up');
  assert.ok(tokensDigestMatches(digest, prompt, sampled, logprobs));
  // Where the lists split is part of it: the same ids cut differently differ.
  assert.notEqual(tokensDigest(prompt.slice(0, -1), [prompt.at(-1)!, ...sampled], logprobs), digest);
  assert.notEqual(tokensDigest(prompt, sampled, null), digest);
});

test('one token, sampled id or logprob changed fails both formats', () => {
  const p = ids(9000, 1);
  const s = [1, 2, 3];
  const l = [-0.5, -0.25, -1];
  for (const digest of [tokensDigest(p, s, l), tokensDigestV1(p, s, l)]) {
    const q = [...p];
    q[8500] = q[8500]! + 1;
    assert.ok(tokensDigestMatches(digest, p, s, l));
    assert.ok(!tokensDigestMatches(digest, q, s, l));
    assert.ok(!tokensDigestMatches(digest, p, [1, 2, 4], l));
    assert.ok(!tokensDigestMatches(digest, p, s, [-0.5, -0.25, -1.5]));
  }
});
