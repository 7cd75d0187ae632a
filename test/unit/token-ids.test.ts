// The checks made over token ids on every call (src/capture/token-ids.ts).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { allTokenIds, commonPrefix, firstNonTokenId, idList, isTokenId, sameIds, startsWithIds } from '../../src/capture/token-ids.js';

test('a token id is a non-negative integer, and nothing else is', () => {
  for (const v of [0, 1, 151_643]) assert.equal(isTokenId(v), true, String(v));
  for (const v of [-1, 1.5, NaN, Infinity, '3', true, null, undefined, 2n]) assert.equal(isTokenId(v), false, String(v));
});

test('the first element that is not an id is named by its index', () => {
  assert.equal(firstNonTokenId([]), -1);
  assert.equal(firstNonTokenId([1, 2, 3]), -1);
  assert.equal(firstNonTokenId([1, 2, -3, 'x']), 2);
  assert.equal(firstNonTokenId([1, 2, 3, 4.5]), 3);
  assert.equal(allTokenIds([7, 8]), true);
  assert.equal(allTokenIds([7, '8']), false);
});

test('prefixes and equality of id arrays', () => {
  assert.equal(startsWithIds([1, 2, 3], [1, 2]), true);
  assert.equal(startsWithIds([1, 2, 3], []), true);
  assert.equal(startsWithIds([1, 2, 3], [1, 2, 3]), true);
  assert.equal(startsWithIds([1, 2], [1, 2, 3]), false);
  assert.equal(startsWithIds([1, 9, 3], [1, 2]), false);
  assert.equal(sameIds([1, 2], [1, 2]), true);
  assert.equal(sameIds([1, 2], [1, 2, 3]), false);
  assert.equal(sameIds([1, 2, 3], [1, 2]), false);
  assert.equal(sameIds([], []), true);
});

test('a typed list becomes the same JS array; the shared prefix of two lists is counted', () => {
  const typed = Int32Array.from([5, 0, 151_643, 7]);
  const list = idList(typed);
  assert.ok(Array.isArray(list));
  assert.deepEqual(list, [5, 0, 151_643, 7]);
  assert.deepEqual(idList(new Int32Array(0)), []);
  // Long lists are built in pieces: every length around a piece's edge comes out whole and in order.
  for (const n of [8191, 8192, 8193, 16_384, 108_001]) {
    const long = Int32Array.from({ length: n }, (_, i) => (i * 7919) % 151_000);
    const out = idList(long);
    assert.equal(out.length, n);
    assert.ok(
      out.every((v, i) => v === long[i]),
      `n=${n}`,
    );
  }
  assert.equal(commonPrefix([1, 2, 3], Int32Array.from([1, 2, 4])), 2);
  assert.equal(commonPrefix([1, 2], [1, 2, 3]), 2);
  assert.equal(commonPrefix([9], [1]), 0);
  assert.equal(commonPrefix([], [1]), 0);
});
