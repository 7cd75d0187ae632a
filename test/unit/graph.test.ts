import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { RolloutGraph, messageIdentity } from '../../src/capture/graph.js';
import type { CallRecord } from '../../src/capture/types.js';
import { call, chain } from './rollout-fixtures.js';

const parentMap = (g: RolloutGraph) => Object.fromEntries(g.nodes().map((n) => [n.node_id, n.parent?.node_id ?? null]));
const ids = (nodes: { node_id: string }[]) => nodes.map((n) => n.node_id);

test('a linear multi-turn chain links each call to its predecessor', () => {
  const records = chain(5);
  const g = RolloutGraph.fromRecords(records);
  assert.deepEqual(parentMap(g), { c0: null, c1: 'c0', c2: 'c1', c3: 'c2', c4: 'c3' });
  assert.deepEqual(ids(g.roots()), ['c0']);
  assert.deepEqual(ids(g.leaves()), ['c4']);
  assert.deepEqual(g.forks(), []);
  assert.deepEqual(g.paths().map(ids), [['c0', 'c1', 'c2', 'c3', 'c4']]);
  assert.equal(g.discarded().size, 0);
});

test('the longest exact prefix wins, and the parent prompt must be strictly shorter', () => {
  const g = new RolloutGraph();
  g.add(call({ id: 'a', index: 0, prompt: [1, 2], sampled: [3] }));
  g.add(call({ id: 'b', index: 1, prompt: [1, 2, 3, 4], sampled: [5] }));
  g.add(call({ id: 'c', index: 2, prompt: [1, 2, 3, 4, 5, 6], sampled: [7] }));
  // Same prompt as b with nothing sampled: its end equals its prompt, so it cannot parent b's twin.
  g.add(call({ id: 'd', index: 3, prompt: [1, 2, 3, 4], sampled: [], logprobs: [] }));
  assert.deepEqual(parentMap(g), { a: null, b: 'a', c: 'b', d: 'a' });
});

test('a rewritten history (compaction) starts a new root instead of corrupting the chain', () => {
  const records = chain(3);
  const last = records[2]!;
  const system = last.prompt_token_ids!.slice(0, 4);
  // Same system tokens, then a summary instead of the full history: not an extension of anything.
  const compacted = call({ id: 'k0', index: 3, prompt: [...system, 77, 78, 79], sampled: [80, 81] });
  const next = call({ id: 'k1', index: 4, prompt: [...system, 77, 78, 79, 80, 81, 82], sampled: [83] });
  const g = RolloutGraph.fromRecords([...records, compacted, next]);
  assert.deepEqual(ids(g.roots()), ['c0', 'k0']);
  assert.equal(g.get('k1')!.parent!.node_id, 'k0');
  assert.deepEqual(g.paths().map(ids), [
    ['c0', 'c1', 'c2'],
    ['k0', 'k1'],
  ]);
  assert.equal(g.discarded().size, 0, 'a compaction root is not a retry');
});

test('a subagent with its own system prompt is its own root and not a retry', () => {
  const main = chain(3);
  const sub = chain(2, { prefix: 's', first: 6 }).map((r, i) => ({
    ...r,
    index: 3 + i,
    prompt_token_ids: r.prompt_token_ids!.map((t) => t + 5000),
  }));
  sub[1]!.prompt_token_ids = [...sub[0]!.prompt_token_ids!, ...sub[0]!.completion_token_ids!, 9999];
  const g = RolloutGraph.fromRecords([...main, ...sub]);
  assert.deepEqual(ids(g.roots()), ['c0', 's0']);
  assert.equal(g.get('s1')!.parent!.node_id, 's0');
  assert.equal(g.discarded().size, 0);
});

test('identical ends tie-break to the earliest call, whatever the arrival order', () => {
  const q = call({ id: 'q', index: 0, prompt: [1], sampled: [2] });
  const n = call({ id: 'n', index: 1, prompt: [1, 2], sampled: [], logprobs: [] });
  const dup = call({ id: 'dup', index: 2, prompt: [1], sampled: [2] });
  const x = call({ id: 'x', index: 3, prompt: [1, 2, 3], sampled: [4] });
  for (const order of permutations([q, n, dup, x])) {
    assert.deepEqual(parentMap(RolloutGraph.fromRecords(order)), { q: null, n: 'q', dup: null, x: 'q' });
  }
});

test('a retried call is a sibling; the one that never continued is discarded', () => {
  const g = new RolloutGraph();
  g.add(call({ id: 'a', index: 0, prompt: [1, 2], sampled: [3] }));
  g.add(call({ id: 'b1', index: 1, prompt: [1, 2, 3, 4], sampled: [5, 6] }));
  g.add(call({ id: 'b2', index: 2, prompt: [1, 2, 3, 4], sampled: [7] }));
  g.add(call({ id: 'c', index: 3, prompt: [1, 2, 3, 4, 7, 8], sampled: [9] }));
  assert.deepEqual(g.forks(), [{ parent_id: 'a', children: ['b1', 'b2'] }]);
  assert.deepEqual([...g.discarded()], ['b1']);
  assert.deepEqual(g.paths().map(ids), [
    ['a', 'b1'],
    ['a', 'b2', 'c'],
  ]);
});

test('siblings that are all terminal are ambiguous and all kept', () => {
  const g = new RolloutGraph();
  g.add(call({ id: 'a', index: 0, prompt: [1, 2], sampled: [3] }));
  g.add(call({ id: 'b1', index: 1, prompt: [1, 2, 3, 4], sampled: [5] }));
  g.add(call({ id: 'b2', index: 2, prompt: [1, 2, 3, 4], sampled: [6] }));
  assert.equal(g.forks().length, 1);
  assert.equal(g.discarded().size, 0);
});

test('a retried first call gives roots with identical prompts; the abandoned one is discarded', () => {
  const g = new RolloutGraph();
  g.add(call({ id: 'r1', index: 0, prompt: [1, 2, 3], sampled: [4] }));
  g.add(call({ id: 'r2', index: 1, prompt: [1, 2, 3], sampled: [5] }));
  g.add(call({ id: 'n', index: 2, prompt: [1, 2, 3, 5, 6], sampled: [7] }));
  g.add(call({ id: 'title', index: 3, prompt: [1, 2, 9], sampled: [8] }));
  assert.deepEqual(ids(g.roots()), ['r1', 'r2', 'title']);
  assert.deepEqual([...g.discarded()], ['r1']);
});

test('late arrivals are re-parented: A, C, B gives the same chain as A, B, C', () => {
  const [a, b, c] = chain(3);
  const inOrder = RolloutGraph.fromRecords([a!, b!, c!]);
  const late = new RolloutGraph();
  late.add(a!);
  late.add(c!);
  assert.equal(late.get('c2')!.parent!.node_id, 'c0', 'before B arrives, C hangs off A');
  late.add(b!);
  assert.deepEqual(parentMap(late), parentMap(inOrder));
  assert.deepEqual(
    late.get('c0')!.children.map((n) => n.node_id),
    ['c1'],
  );
});

function permutations<T>(xs: T[]): T[][] {
  if (xs.length <= 1) return [xs];
  return xs.flatMap((x, i) => permutations([...xs.slice(0, i), ...xs.slice(i + 1)]).map((p) => [x, ...p]));
}

test('every arrival order of a forked rollout gives the same parents (all 720 permutations)', () => {
  const records: CallRecord[] = [
    ...chain(3),
    call({ id: 'retry', index: 3, prompt: [...chain(3)[1]!.prompt_token_ids!], sampled: [4242] }),
    call({ id: 'sub', index: 4, prompt: [7, 7, 7], sampled: [8] }),
    call({ id: 'sub2', index: 5, prompt: [7, 7, 7, 8, 9], sampled: [10] }),
  ];
  const expected = parentMap(RolloutGraph.fromRecords(records));
  assert.deepEqual(expected, { c0: null, c1: 'c0', c2: 'c1', retry: 'c0', sub: null, sub2: 'sub' });
  for (const order of permutations(records)) assert.deepEqual(parentMap(RolloutGraph.fromRecords(order)), expected);
});

// The definition of 10.2 applied literally over all calls: the reference the graph must agree with.
function referenceParents(records: CallRecord[]): Record<string, string | null> {
  const end = (r: CallRecord) => [...r.prompt_token_ids!, ...r.completion_token_ids!];
  const out: Record<string, string | null> = {};
  for (const n of records) {
    const p = n.prompt_token_ids!;
    let best: CallRecord | null = null;
    for (const c of records) {
      const e = end(c);
      if (c === n || c.prompt_token_ids!.length >= p.length || e.length > p.length) continue;
      if (!e.every((t, i) => p[i] === t)) continue;
      const bestLen = best ? end(best).length : -1;
      if (e.length > bestLen || (e.length === bestLen && (c.index < best!.index || (c.index === best!.index && c.call_id < best!.call_id))))
        best = c;
    }
    out[n.call_id] = best?.call_id ?? null;
  }
  return out;
}

test('property: for any calls and any arrival order, parents equal the longest-exact-prefix definition', () => {
  // A tiny alphabet makes accidental prefix relations, identical ends and empty completions common.
  const tokens = fc.array(fc.integer({ min: 0, max: 1 }), { maxLength: 4 });
  const spec = fc.record({ prompt: fc.array(fc.integer({ min: 0, max: 1 }), { minLength: 1, maxLength: 6 }), sampled: tokens });
  fc.assert(
    fc.property(
      fc.array(spec, { minLength: 1, maxLength: 12 }).chain((specs) =>
        fc.tuple(
          fc.constant(specs),
          fc.shuffledSubarray(
            specs.map((_, i) => i),
            { minLength: specs.length },
          ),
        ),
      ),
      ([specs, order]) => {
        const records = specs.map((s, i) => call({ id: `n${i}`, index: i, prompt: s.prompt, sampled: s.sampled }));
        const g = new RolloutGraph();
        for (const i of order) g.add(records[i]!);
        assert.deepEqual(parentMap(g), referenceParents(records));
        for (const n of g.nodes()) for (const c of n.children) assert.equal(c.parent, n);
      },
    ),
    { numRuns: 1000 },
  );
});

test('property: realistic rollouts (chains, retries, subagents) link the same way in any arrival order', () => {
  const build = (choices: number[]) => {
    const records: CallRecord[] = [];
    let next = 100;
    choices.forEach((choice, i) => {
      const from = records[choice % (records.length + 1)];
      const base = from ? [...from.prompt_token_ids!, ...from.completion_token_ids!] : [next++, next++];
      const prompt = choice % 7 === 0 && from ? [...from.prompt_token_ids!] : [...base, next++];
      records.push(call({ id: `r${i}`, index: i, prompt, sampled: [next++, next++] }));
    });
    return records;
  };
  fc.assert(
    fc.property(fc.array(fc.nat(40), { minLength: 1, maxLength: 15 }), fc.nat(), (choices, seed) => {
      const records = build(choices);
      const shuffled = [...records].sort((a, b) => ((a.index * 7919 + seed) % 101) - ((b.index * 7919 + seed) % 101));
      assert.deepEqual(parentMap(RolloutGraph.fromRecords(shuffled)), parentMap(RolloutGraph.fromRecords(records)));
      assert.deepEqual(parentMap(RolloutGraph.fromRecords(records)), referenceParents(records));
    }),
    { numRuns: 300 },
  );
});

test('an errored call without an engine answer is not a node; adding a call twice is a no-op', () => {
  const g = new RolloutGraph();
  const [a, b] = chain(2);
  g.add(a!);
  assert.equal(g.add(call({ id: 'err', index: 1, prompt: null, sampled: null, error: true })), null);
  assert.equal(g.add(a!), g.get('c0'));
  g.add(b!);
  assert.equal(g.size, 2);
  assert.deepEqual(parentMap(g), { c0: null, c1: 'c0' });
  assert.equal(g.get('err'), undefined);
});

test('without token ids, calls link by message prefix, ignoring re-rendered system prompts and re-serialised arguments', () => {
  const sys = (v: number) => ({ role: 'system', content: `You are helpful. Build ${v}.` });
  const user = { role: 'user', content: 'count the lines' };
  const toolCall = (args: string) => ({
    role: 'assistant',
    content: null,
    tool_calls: [{ id: 'x1', type: 'function' as const, function: { name: 'bash', arguments: args } }],
  });
  const toolResult = { role: 'tool', tool_call_id: 'x1', content: '42' };
  const g = new RolloutGraph({ captureLevel: 'text' });
  g.add(
    call({ id: 'm0', index: 0, prompt: null, sampled: null, messages: [sys(1), user], reply: toolCall('{"command": "wc -l f", "n": 1}') }),
  );
  // The harness echoes the call back with other whitespace, key order and id, and a new system text.
  const echoed = { ...toolCall('{"n":1,"command":"wc -l f"}'), refusal: null };
  echoed.tool_calls[0]!.id = 'other';
  g.add(
    call({
      id: 'm1',
      index: 1,
      prompt: null,
      sampled: null,
      messages: [sys(2), user, echoed, toolResult],
      reply: { role: 'assistant', content: 'It has 42 lines. ' },
    }),
  );
  g.add(
    call({
      id: 'm2',
      index: 2,
      prompt: null,
      sampled: null,
      messages: [sys(3), user, echoed, toolResult, { role: 'assistant', content: 'It has 42 lines.' }, { role: 'user', content: 'thanks' }],
    }),
  );
  // A rewritten history is a new root in this domain too.
  g.add(
    call({ id: 'm3', index: 3, prompt: null, sampled: null, messages: [sys(4), { role: 'user', content: 'summary of the work so far' }] }),
  );
  assert.deepEqual(parentMap(g), { m0: null, m1: 'm0', m2: 'm1', m3: null });
  assert.ok(g.nodes().every((n) => n.domain === 'messages'));
  assert.equal(messageIdentity({ role: 'assistant', content: null }), messageIdentity({ role: 'assistant', content: '' }));
});

test('message linking also works when the parent arrives late', () => {
  const m = (id: string, index: number, messages: { role: string; content: string }[], reply: string) =>
    call({ id, index, prompt: null, sampled: null, messages, reply: { role: 'assistant', content: reply } });
  const u1 = { role: 'user', content: 'a' };
  const u2 = { role: 'user', content: 'b' };
  const a = m('a', 0, [u1], 'x');
  const b = m('b', 1, [u1, { role: 'assistant', content: 'x' }, u2], 'y');
  const c = m('c', 2, [u1, { role: 'assistant', content: 'x' }, u2, { role: 'assistant', content: 'y' }, u1], 'z');
  for (const order of permutations([a, b, c])) {
    assert.deepEqual(parentMap(RolloutGraph.fromRecords(order, { captureLevel: 'text' })), { a: null, b: 'a', c: 'b' });
  }
});

test('a call without token ids can continue a token chain by messages', () => {
  const [a] = chain(1);
  const g = new RolloutGraph();
  g.add(a!);
  const msgs = [
    { role: 'user', content: 'prompt c0' },
    { role: 'assistant', content: 'reply c0' },
    { role: 'user', content: 'more' },
  ];
  g.add(call({ id: 'bare', index: 1, prompt: null, sampled: [5], messages: msgs }));
  assert.equal(g.get('bare')!.parent!.node_id, 'c0');
  assert.equal(g.get('bare')!.domain, 'messages');
});

test('ingest work is linear in the new call, not in the calls before it', () => {
  // 300 turns of a growing chain: each add walks its own prompt (up to ~12k tokens) but never earlier calls.
  const g = new RolloutGraph();
  let totalEarlier = 0;
  for (const r of chain(300, { first: 200, sampled: 20, glue: 20 })) {
    const before = g.work;
    g.add(r);
    const cost = g.work - before;
    const own = r.prompt_token_ids!.length + r.completion_token_ids!.length;
    assert.ok(cost <= 2 * own + 16, `call ${r.index}: work ${cost} for ${own} own tokens`);
    totalEarlier += own;
  }
  assert.ok(totalEarlier > 100 * 12_000, 'a scan of earlier calls would have cost orders of magnitude more');

  // 200 unrelated roots sharing a long system prefix: the 200th costs what the first did.
  const roots = new RolloutGraph();
  const system = Array.from({ length: 500 }, (_, i) => i);
  const costs: number[] = [];
  for (let i = 0; i < 200; i++) {
    const before = roots.work;
    roots.add(call({ id: `r${i}`, index: i, prompt: [...system, 10_000 + i, 20_000 + i], sampled: [30_000 + i] }));
    costs.push(roots.work - before);
  }
  assert.ok(
    costs.every((c) => c <= 2 * 503 + 16),
    `root costs ${Math.min(...costs)}..${Math.max(...costs)}`,
  );
});

test('the look-forward of a late parent costs its own length plus the children it adopts', () => {
  const prefix = Array.from({ length: 1000 }, (_, i) => i);
  const g = new RolloutGraph();
  g.add(call({ id: 'root', index: 0, prompt: prefix.slice(0, 10), sampled: prefix.slice(10, 20) }));
  for (let i = 0; i < 100; i++) {
    // 100 continuations of a parent that has not arrived yet, each with 5 tokens of its own.
    g.add(call({ id: `k${i}`, index: 2 + i, prompt: [...prefix, 50_000 + i, 1, 2, 3, 4], sampled: [7] }));
  }
  assert.ok(
    g
      .nodes()
      .slice(1)
      .every((n) => n.parent?.node_id === 'root'),
  );
  const before = g.work;
  g.add(call({ id: 'late', index: 1, prompt: prefix.slice(0, 900), sampled: prefix.slice(900) }));
  const cost = g.work - before;
  assert.ok(
    g
      .nodes()
      .filter((n) => n.node_id.startsWith('k'))
      .every((n) => n.parent?.node_id === 'late'),
  );
  assert.equal(g.get('late')!.parent!.node_id, 'root');
  assert.ok(cost <= 2 * 1000 + 4 * 100 + 16, `work ${cost}`);
});

test('a late call in the middle of a long chain does not walk the chain below it', () => {
  const records = chain(200, { first: 50, sampled: 10, glue: 10 });
  const g = RolloutGraph.fromRecords(records.filter((r) => r.call_id !== 'c1'));
  assert.equal(g.get('c2')!.parent!.node_id, 'c0');
  const before = g.work;
  const c1 = records[1]!;
  g.add(c1);
  const cost = g.work - before;
  assert.equal(g.get('c2')!.parent!.node_id, 'c1');
  assert.equal(g.get('c1')!.parent!.node_id, 'c0');
  const own = c1.prompt_token_ids!.length + c1.completion_token_ids!.length;
  assert.ok(cost <= 2 * own + 16, `work ${cost} for ${own} own tokens; 198 calls hang below`);
});
