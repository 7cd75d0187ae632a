// Parsing a resent history once (src/capture/history-body.ts): whatever the bodies, the result is
// JSON.parse's, key order included, and a body that is not JSON is refused as JSON.parse refuses it.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ByteParts } from '../../src/capture/byte-parts.js';
import { commonBytes, HistoryBodies, scanHistory } from '../../src/capture/history-body.js';
import { rng, splitBytes } from './random-fixtures.js';

const TEXTS = ['plain', 'quote " inside', 'back\\slash\\', 'end\\', 'unicode é ✓ 🎉', 'line\nbreak', '"messages"', '{"a":[1,2]}', ''];

function message(r: () => number, n: number): Record<string, unknown> {
  const text = TEXTS[Math.floor(r() * TEXTS.length)]! + ` #${n}`;
  const kind = Math.floor(r() * 4);
  if (kind === 0) return { role: 'user', content: text };
  if (kind === 1)
    return {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: `c${n}`, type: 'function', function: { name: 'bash', arguments: JSON.stringify({ command: text }) } }],
    };
  if (kind === 2) return { role: 'tool', tool_call_id: `c${n}`, content: [{ type: 'text', text }] };
  return { role: 'user', content: text, n: r() < 0.5 ? 1.5e-7 : -0, flags: [true, false, null] };
}

/** JSON in one of a few spacings (a serialiser writes alike every time), chosen by `r`. */
function write(value: unknown, r: () => number): string {
  const pick = () => [' ', '\n', '\t', '', '', '\n  '][Math.floor(r() * 6)]!;
  const [open, item, sep, colon] = [pick(), pick(), pick(), pick()];
  const go = (v: unknown): string => {
    if (Array.isArray(v)) return `[${open}${v.map((x) => `${go(x)}${item}`).join(`,${sep}`)}]`;
    if (v !== null && typeof v === 'object')
      return `{${open}${Object.entries(v)
        .map(([k, x]) => `${JSON.stringify(k)}${colon}:${colon}${go(x)}`)
        .join(`,${sep}`)}${item}}`;
    return JSON.stringify(v);
  };
  return go(value);
}

/** `split`: the body arrives as chunks cut at points it picks (else as one buffer). */
function check(bodies: HistoryBodies, text: string, key: string, what: string, split?: () => number): void {
  const whole = Buffer.from(text, 'utf8');
  const raw = split ? new ByteParts(splitBytes(whole, split, 6)) : whole;
  let expected: unknown;
  let error: unknown;
  try {
    expected = JSON.parse(text);
  } catch (err) {
    error = err;
  }
  if (error) {
    assert.throws(() => bodies.parse(raw, key), SyntaxError, what);
    return;
  }
  const got = bodies.parse(raw, key);
  assert.deepStrictEqual(got, expected, what);
  assert.equal(JSON.stringify(got), JSON.stringify(expected), `${what}: key order`);
}

test('a growing history parses as JSON.parse does, reusing the resent elements', () => {
  for (let seed = 1; seed <= 40; seed++) {
    const r = rng(seed);
    const bodies = new HistoryBodies({ minBytes: 0 });
    const messages: Record<string, unknown>[] = [{ role: 'system', content: 'You are careful. '.repeat(50) }];
    const headFirst = r() < 0.5;
    for (let turn = 0; turn < 12; turn++) {
      messages.push(message(r, turn));
      if (r() < 0.3) messages.push(message(r, turn + 100));
      const body = headFirst
        ? { model: 'm', tools: [{ type: 'function', function: { name: 'bash' } }], messages, stream: r() < 0.5 }
        : { messages, model: 'm', max_tokens: turn, tools: [] };
      // The same spacing every turn (one writer per seed), as a harness serialises alike each time.
      // Odd seeds: every body in chunks, as a socket delivers it.
      check(bodies, write(body, rng(seed * 7)), 'k', `seed ${seed} turn ${turn}`, seed % 2 ? r : undefined);
    }
    assert.ok(bodies.stats.reused >= 8, `seed ${seed}: reused ${bodies.stats.reused} of 12`);
  }
});

test('edits anywhere, other history keys, repeated members and bodies that are not JSON', () => {
  let reused = 0;
  for (let seed = 100; seed < 160; seed++) {
    const r = rng(seed);
    const bodies = new HistoryBodies({ minBytes: 0 });
    const key = ['messages', 'input', 'contents'][seed % 3]!;
    const list: unknown[] = [{ role: 'system', content: 'S'.repeat(200) }, message(r, 0), message(r, 1)];
    for (let turn = 0; turn < 10; turn++) {
      list.push(message(r, turn + 2));
      const pick = Math.floor(r() * 12);
      if (pick === 0) list[1] = message(r, 999); // an earlier message edited
      if (pick === 9) list[list.length - 2] = { ...(list[list.length - 2] as object), v: turn }; // edited near its end
      if (pick === 1) list.splice(1, 1); // one dropped (compaction)
      let text = write({ model: 'm', [key]: list, temperature: 0.5 }, rng(seed * 7));
      if (pick === 2) text = text.replace(/}\s*$/, `,"model":"other"}`); // a member repeated after the history
      if (pick === 3) text = text.replace(/}\s*$/, `,"${key}":[]}`); // the history key again
      if (pick === 4) text = text.replace(/}\s*$/, `,"__proto__":{"x":1}}`);
      if (pick === 5) text = text.slice(0, text.length - 1 - Math.floor(r() * 20)); // cut short
      if (pick === 6) text = text.replace(/\]\s*,\s*"temperature"/, ',]"temperature"'); // broken array
      if (pick === 7) text = text.replace(/,(\s*)"temperature"/, ' 5,$1"temperature"'); // an element that does not end
      if (pick === 8) text = `{"${key}":"not a list",${text.slice(1)}`; // the key first as something else
      if (pick === 10)
        text = text.replace(/}\s*$/, `,"\\u00${key.charCodeAt(0).toString(16)}${key.slice(1)}":[{"role":"user","content":"other"}]}`); // the key again, spelt with an escape
      check(bodies, text, 'k', `seed ${seed} turn ${turn} pick ${pick}`, seed % 2 ? r : undefined);
    }
    reused += bodies.stats.reused;
  }
  assert.ok(reused > 40, `${reused} bodies parsed from a kept prefix`);
});

test('a body that ends its resent history with a trailing comma is refused, as JSON.parse refuses it', () => {
  const bodies = new HistoryBodies({ minBytes: 0 });
  const a = { role: 'system', content: 'z'.repeat(300) };
  const b = { role: 'user', content: 'hi' };
  bodies.parse(Buffer.from(JSON.stringify({ messages: [a, b], x: 1 })), 'k');
  for (const text of [
    `{"messages":[${JSON.stringify(a)},${JSON.stringify(b)},],"x":1}`,
    `{"messages":[${JSON.stringify(a)}, ,${JSON.stringify(b)}]}`,
  ]) {
    assert.throws(() => JSON.parse(text), SyntaxError);
    assert.throws(() => bodies.parse(Buffer.from(text), 'k'), SyntaxError, text.slice(-30));
    bodies.parse(Buffer.from(JSON.stringify({ messages: [a, b], x: 1 })), 'k');
  }
});

test('what the caller does to a parsed body never reaches the next one', () => {
  const bodies = new HistoryBodies({ minBytes: 0 });
  const messages: unknown[] = [
    { role: 'system', content: 'x'.repeat(500) },
    { role: 'user', content: 'hi' },
  ];
  const first = bodies.parse(Buffer.from(JSON.stringify({ messages })), 'k') as { messages: unknown[] };
  first.messages.push({ role: 'user', content: 'added by the caller' });
  messages.push({ role: 'assistant', content: 'ok' });
  const second = bodies.parse(Buffer.from(JSON.stringify({ messages })), 'k') as { messages: { content: string }[] };
  assert.deepStrictEqual(second, { messages });
  assert.equal(bodies.stats.reused, 1);
  // The kept messages are shared by both bodies, frozen: a change in place fails loudly.
  assert.equal(second.messages[0], first.messages[0]);
  assert.throws(() => {
    (second.messages[0] as { content: string }).content = 'changed';
  }, TypeError);
  second.messages.pop();
  messages.push({ role: 'user', content: 'next' });
  assert.deepStrictEqual(bodies.parse(Buffer.from(JSON.stringify({ messages })), 'k'), { messages });
});

test('small bodies and callers without a key are parsed whole; memory stays within its bounds', () => {
  const bodies = new HistoryBodies({ minBytes: 1000, maxKeys: 2, maxBytes: 10_000 });
  const big = (n: number) => JSON.stringify({ messages: [{ role: 'user', content: 'y'.repeat(n) }] });
  bodies.parse(Buffer.from(JSON.stringify({ messages: [] })), 'a');
  assert.equal(bodies.stats.keys, 0);
  bodies.parse(Buffer.from(big(2000)), undefined);
  assert.equal(bodies.stats.keys, 0);
  for (const key of ['a', 'b', 'c']) bodies.parse(Buffer.from(big(2000)), key);
  assert.equal(bodies.stats.keys, 2);
  bodies.parse(Buffer.from(big(9000)), 'd');
  assert.ok(bodies.stats.bytes <= 10_000, `${bodies.stats.bytes} bytes kept`);
});

test('the scan finds each history element; the common prefix is counted in bytes', () => {
  const text = '{"model":"m", "messages" : [ {"a":"]}\\"x"} , [1,{"b":2}] ,3 ,"s\\\\"], "tools":[]}';
  const layout = scanHistory(Buffer.from(text));
  assert.ok(layout);
  assert.equal(layout.key, 'messages');
  assert.deepEqual(
    layout.ends.map((e) => text.slice(0, e).slice(-3)),
    ['x"}', '2}]', ' ,3', '\\\\"'],
  );
  assert.equal(scanHistory(Buffer.from('{"messages":[1],"messages":[2]}')), null);
  assert.equal(scanHistory(Buffer.from('{"model":"a","messages":[1],"model":"b"}')), null);
  assert.equal(scanHistory(Buffer.from('[1,2]')), null);
  const a = Buffer.alloc(10_000, 7);
  const b = Buffer.from(a);
  assert.equal(commonBytes(a, b), 10_000);
  b[6_543] = 8;
  assert.equal(commonBytes(a, b), 6_543);
  assert.equal(commonBytes(a, b.subarray(0, 100)), 100);
  b[0] = 0;
  assert.equal(commonBytes(a, b), 0);
});
