// A body read as the chunks it arrived in (src/capture/byte-parts.ts): every read gives what the same
// read of the joined bytes gives, wherever the chunks end.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ByteParts } from '../../src/capture/byte-parts.js';
import { rng, splitBytes } from './random-fixtures.js';

test('reads of chunked bytes equal the same reads of the joined bytes', () => {
  for (let seed = 1; seed <= 300; seed++) {
    const r = rng(seed);
    // A small alphabet, so needles repeat and matches fall across chunk ends.
    const whole = Buffer.from(Array.from({ length: Math.floor(r() * 120) }, () => 97 + Math.floor(r() * 3)));
    const body = new ByteParts(splitBytes(whole, r));
    assert.equal(body.length, whole.length);
    assert.deepEqual(body.whole(), whole);
    for (let q = 0; q < 20; q++) {
      const from = Math.floor(r() * (whole.length + 2)) - 1;
      const to = Math.floor(r() * (whole.length + 2));
      assert.deepEqual(body.slice(from, to), whole.subarray(Math.max(0, from), Math.max(Math.max(0, from), to)), `slice ${from} ${to}`);
      assert.equal(body.byteAt(from), whole[from], `byteAt ${from}`);
      const needle = Buffer.from(Array.from({ length: 1 + Math.floor(r() * 4) }, () => 97 + Math.floor(r() * 3)));
      const start = Math.max(0, from);
      assert.equal(body.indexOf(needle, start), whole.indexOf(needle, start), `indexOf ${needle} from ${start} in ${whole}`);
      assert.equal(body.includes(needle), whole.includes(needle));
      const at = Math.floor(r() * (whole.length + 1));
      const len = Math.floor(r() * 10);
      const probe = r() < 0.5 ? whole.subarray(at, at + len) : needle;
      assert.equal(
        body.equalsAt(at, probe),
        at + probe.length <= whole.length && whole.subarray(at, at + probe.length).equals(probe),
        `equalsAt ${at}`,
      );
    }
    // The common prefix with another chunking of the same bytes, edited at one point or cut short.
    const other = Buffer.from(whole);
    const edit = Math.floor(r() * (other.length + 1));
    if (edit < other.length && r() < 0.7) other[edit] = 122;
    const shorter = r() < 0.3 ? other.subarray(0, Math.floor(r() * (other.length + 1))) : other;
    let same = 0;
    while (same < Math.min(whole.length, shorter.length) && whole[same] === shorter[same]) same++;
    assert.equal(body.commonPrefix(new ByteParts(splitBytes(shorter, r))), same, `seed ${seed}`);
  }
});

test('a long common prefix is found across chunks of different sizes', () => {
  const a = Buffer.alloc(300_000, 7);
  const b = Buffer.from(a);
  b[250_001] = 8;
  const left = new ByteParts([a.subarray(0, 65_536), a.subarray(65_536, 200_000), a.subarray(200_000)]);
  const right = new ByteParts([b.subarray(0, 1_000), b.subarray(1_000, 250_000), b.subarray(250_000)]);
  assert.equal(left.commonPrefix(right), 250_001);
  assert.equal(right.commonPrefix(left), 250_001);
  assert.equal(new ByteParts([]).length, 0);
  assert.equal(new ByteParts([]).indexOf(Buffer.from('x')), -1);
  assert.deepEqual(new ByteParts([]).slice(), Buffer.alloc(0));
});
