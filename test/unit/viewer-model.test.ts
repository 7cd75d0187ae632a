import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { Navigator, addedByHarness, columns, displayText, layoutRows, liveFocus, logprobBucket, positionClass, rootKind, turnTokens } from '../../webview/viewer/model.js';
import { buildRollout } from '../../src/capture/rollout.js';
import { viewerDataFromRollout } from '../../src/protocol/viewer-data.js';
import { generateRollout } from '../../bench/rollout-generator.js';

test('logprob buckets follow probability floors 0.9 / 0.5 / 0.2 / 0.05', () => {
  assert.deepEqual([0, Math.log(0.9), Math.log(0.89), Math.log(0.5), Math.log(0.3), Math.log(0.2), Math.log(0.1), Math.log(0.05), Math.log(0.01), -50].map(logprobBucket), [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]);
});

test('display text makes newlines and tabs visible and falls back to the id', () => {
  assert.deepEqual(displayText('a\tb\n', 5), { text: 'a→b↵', breakAfter: true });
  assert.deepEqual(displayText(undefined, 42), { text: '⟨42⟩', breakAfter: false });
  assert.deepEqual(displayText('', 1), { text: '∅', breakAfter: false });
  assert.equal(columns('漢字a'), 5);
});

test('row layout covers every token once, in order, within the width, and breaks after newlines', () => {
  fc.assert(
    fc.property(fc.array(fc.record({ w: fc.integer({ min: 1, max: 30 }), br: fc.boolean() }), { maxLength: 300 }), fc.integer({ min: 8, max: 120 }), (toks, width) => {
      const rows = layoutRows(toks.length, (i) => toks[i]!.w, (i) => toks[i]!.br, width);
      assert.equal(rows[0], 0);
      assert.equal(rows[rows.length - 1], toks.length);
      for (let r = 0; r + 1 < rows.length; r++) {
        const [a, b] = [rows[r]!, rows[r + 1]!];
        if (toks.length) assert.ok(b > a, 'no empty rows');
        const used = toks.slice(a, b).reduce((s, t) => s + t.w + 1, 0);
        assert.ok(b - a === 1 || used <= width, `row ${r} overflows`);
        for (let i = a; i < b - 1; i++) assert.equal(toks[i]!.br, false, 'a newline ends its row');
      }
    }),
  );
});

const g = generateRollout({ calls: 6, firstPrompt: 60, sampled: 20, glue: 10, retry: true, subagent: true, compaction: true, title: true, misaligned: true, missing: true });
const data = viewerDataFromRollout(buildRollout(g.session, g.records, { budgetStopCount: 0, captureLevel: 'tokens', includeDiscarded: true }));

test('positions: inherited context, harness additions, sampled with bucket and mask', () => {
  const nav = new Navigator(data);
  const child = data.turns.find((t) => t.parent_id && t.trained && !t.discarded)!;
  const a = addedByHarness(data, child, nav.byId);
  const parent = nav.byId.get(child.parent_id!)!;
  assert.equal(a.kept, parent.prompt_ids.length + parent.sampled_ids.length);
  assert.equal(a.prefixBreak, null);
  const tt = turnTokens(child, a.kept);
  assert.equal(tt.n, child.prompt_ids.length + child.sampled_ids.length);
  assert.equal(positionClass(tt, 0), 't c');
  assert.equal(positionClass(tt, a.kept), 't a');
  assert.equal(positionClass(tt, child.prompt_ids.length), `t s b${logprobBucket(child.logprobs![0]!)} m1`);
  const untrained = data.turns.find((t) => t.logprobs === null && t.sampled_ids.length > 0)!;
  assert.equal(positionClass(turnTokens(untrained, 0), untrained.prompt_ids.length), 't s nolp');
});

test('navigation: branches move between siblings, then to the nearest ancestor with siblings; roots are classified', () => {
  const nav = new Navigator(data);
  const retry = data.turns.find((t) => t.discarded)!;
  const sibs = nav.siblings(retry);
  assert.equal(sibs.length, 2);
  assert.equal(nav.branch(sibs[0]!, 1), sibs[1]);
  assert.equal(nav.branch(sibs[1]!, -1), sibs[0]);
  // A deeper descendant of the continued sibling goes to the next root (roots are siblings of each other).
  const deeper = data.turns.find((t) => t.parent_id === sibs[1]!.node_id)!;
  assert.equal(nav.branch(deeper, -1), sibs[0]);
  const kinds = data.turns.map((t) => rootKind(data, t, nav.byId)).filter(Boolean);
  assert.deepEqual([...kinds].sort(), ['auxiliary', 'compaction', 'root', 'subagent']);
});

test('live refresh: a reader on the newest call follows the next newest; others keep their call', () => {
  const g = generateRollout({ seed: 11, calls: 5, firstPrompt: 30, sampled: 8, glue: 4 });
  const upTo = (n: number) => viewerDataFromRollout(buildRollout(g.session, g.records.slice(0, n), { budgetStopCount: 0, captureLevel: 'tokens', includeDiscarded: true, includeTraces: false }), { key: 'live', title: 'live' });
  const three = upTo(3);
  const five = upTo(5);
  const ids = (d: typeof three) => d.turns.map((t) => t.node_id);
  assert.deepEqual(ids(five).slice(0, 3), ids(three), 'earlier calls keep their ids and order');
  const newest3 = ids(three)[2]!;
  assert.equal(liveFocus({ currentId: newest3, newestId: newest3 }, five), ids(five)[4]);
  assert.equal(liveFocus({ currentId: ids(three)[1]!, newestId: newest3 }, five), ids(three)[1]);
  assert.equal(liveFocus({ currentId: 'gone', newestId: newest3 }, five), ids(five)[4], 'a call that no longer exists falls back to the newest');
});
