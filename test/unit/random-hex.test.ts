// Pooled random ids: the asked length in hex digits, across pool refills, and no repeats.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { randomHex } from '../../src/capture/random-hex.js';

test('randomHex: odd and even lengths, across refills of the pool, never repeating', () => {
  const seen = new Set<string>();
  for (let i = 0; i < 5000; i++) {
    const length = [12, 24, 7, 1][i % 4]!;
    const id = randomHex(length);
    assert.match(id, new RegExp(`^[0-9a-f]{${length}}$`));
    if (length >= 12) {
      assert.ok(!seen.has(id), `repeated ${id}`);
      seen.add(id);
    }
  }
  assert.equal(randomHex(10_000).length, 10_000);
});
