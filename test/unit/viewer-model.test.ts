import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  Kind,
  Navigator,
  TokenTexts,
  addedByHarness,
  bridgeKinds,
  columns,
  displayText,
  layoutRows,
  liveFocus,
  logprobBucket,
  positionClass,
  rootKind,
  samplesSummary,
  turnTokens,
} from '../../webview/viewer/model.js';
import { buildRollout } from '../../src/capture/rollout.js';
import { fromWire, toWire, viewerDataFromRollout } from '../../src/protocol/viewer-data.js';
import { generateRollout } from '../../bench/rollout-generator.js';
import type { RenderInfo } from '../../src/capture/types.js';
import { call, chain, session } from './rollout-fixtures.js';

test('logprob buckets follow probability floors 0.9 / 0.5 / 0.2 / 0.05', () => {
  assert.deepEqual(
    [0, Math.log(0.9), Math.log(0.89), Math.log(0.5), Math.log(0.3), Math.log(0.2), Math.log(0.1), Math.log(0.05), Math.log(0.01), -50].map(
      logprobBucket,
    ),
    [0, 0, 1, 1, 2, 2, 3, 3, 4, 4],
  );
});

test('display text makes newlines and tabs visible and falls back to the id', () => {
  assert.deepEqual(displayText('a\tb\n', 5), { text: 'a→b↵', breakAfter: true });
  assert.deepEqual(displayText(undefined, 42), { text: '⟨42⟩', breakAfter: false });
  assert.deepEqual(displayText('', 1), { text: '∅', breakAfter: false });
  assert.equal(columns('漢字a'), 5);
});

test('row layout covers every token once, in order, within the width, and breaks after newlines', () => {
  fc.assert(
    fc.property(
      fc.array(fc.record({ w: fc.integer({ min: 1, max: 30 }), br: fc.boolean() }), { maxLength: 300 }),
      fc.integer({ min: 8, max: 120 }),
      (toks, width) => {
        const rows = layoutRows(
          toks.length,
          (i) => toks[i]!.w,
          (i) => toks[i]!.br,
          width,
        );
        assert.equal(rows[0], 0);
        assert.equal(rows[rows.length - 1], toks.length);
        for (let r = 0; r + 1 < rows.length; r++) {
          const [a, b] = [rows[r]!, rows[r + 1]!];
          if (toks.length) assert.ok(b > a, 'no empty rows');
          const used = toks.slice(a, b).reduce((s, t) => s + t.w + 1, 0);
          assert.ok(b - a === 1 || used <= width, `row ${r} overflows`);
          for (let i = a; i < b - 1; i++) assert.equal(toks[i]!.br, false, 'a newline ends its row');
        }
      },
    ),
  );
});

const g = generateRollout({
  calls: 6,
  firstPrompt: 60,
  sampled: 20,
  glue: 10,
  retry: true,
  subagent: true,
  compaction: true,
  title: true,
  misaligned: true,
  missing: true,
});
const data = viewerDataFromRollout(
  buildRollout(g.session, g.records, { budgetStopCount: 0, captureLevel: 'tokens', includeDiscarded: true }),
);

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
  const upTo = (n: number) =>
    viewerDataFromRollout(
      buildRollout(g.session, g.records.slice(0, n), {
        budgetStopCount: 0,
        captureLevel: 'tokens',
        includeDiscarded: true,
        includeTraces: false,
      }),
      { key: 'live', title: 'live' },
    );
  const three = upTo(3);
  const five = upTo(5);
  const ids = (d: typeof three) => d.turns.map((t) => t.node_id);
  assert.deepEqual(ids(five).slice(0, 3), ids(three), 'earlier calls keep their ids and order');
  const newest3 = ids(three)[2]!;
  assert.equal(liveFocus({ currentId: newest3, newestId: newest3 }, five), ids(five)[4]);
  assert.equal(liveFocus({ currentId: ids(three)[1]!, newestId: newest3 }, five), ids(three)[1]);
  assert.equal(
    liveFocus({ currentId: 'gone', newestId: newest3 }, five),
    ids(five)[4],
    'a call that no longer exists falls back to the newest',
  );
});

// A token-in rollout (the proxy rendered): turn b is turn a's exact prompt + sampled ids, then a bridge
// of template glue around the tool result's tokens, then b's own sampled ids. One training sample.
function tokenInRollout() {
  const render = (kind: 'bridge' | 'full', anchor: string | null, anchorTokens: number, span: [number, number] | null): RenderInfo => ({
    mode: 'proxy',
    family: 'qwen3',
    kind,
    anchor_call_id: anchor,
    anchor_tokens: anchorTokens,
    bridge_span: span,
    synthesized_close: false,
    new_root_reason: null,
    full_render: kind === 'bridge' ? { tokens: 12, common_prefix: 6, equal: false, drift_tokens: 2 } : null,
  });
  const user = { role: 'user', content: 'count the lines' };
  const reply = {
    role: 'assistant',
    content: null,
    tool_calls: [{ id: 'c1', type: 'function' as const, function: { name: 'bash', arguments: '{"command": "wc -l"}' } }],
  };
  const a = call({
    id: 'a',
    index: 0,
    prompt: [1, 2, 3, 4, 5],
    sampled: [10, 11, 12],
    nTools: 1,
    messages: [user],
    reply,
    finish: 'tool_calls',
  });
  a.render = render('full', null, 0, null);
  const b = call({
    id: 'b',
    index: 1,
    prompt: [1, 2, 3, 4, 5, 10, 11, 12, 20, 21, 22, 23, 24, 25],
    sampled: [30, 31],
    nTools: 1,
    messages: [user, reply, { role: 'tool', tool_call_id: 'c1', content: 'total 24' }],
  });
  b.render = render('bridge', 'a', 8, [8, 14]);
  const texts = {
    20: '\n',
    21: '<|im_start|>',
    22: 'user\n<tool_response>\n',
    23: 'tot',
    24: 'al 24',
    25: '\n</tool_response><|im_end|>\n<|im_start|>assistant\n',
  };
  return viewerDataFromRollout(buildRollout(session, [a, b], { budgetStopCount: 0, captureLevel: 'tokens' }), { tokenTexts: texts });
}

test('a token-in turn: the anchor is context, the bridge is glue around the tool tokens, then the sampled tokens; one sample', () => {
  const data = tokenInRollout();
  assert.equal(samplesSummary(data), '1 training sample · token in (the proxy rendered)');
  const b = data.turns[1]!;
  assert.deepEqual(b.bridge?.message_texts, ['total 24'], 'the message the bridge adds after the anchor and its answer');
  assert.deepEqual(fromWire(toWire(data).wire).turns[1]!.bridge, b.bridge, 'the bridge crosses to the webview');
  const kinds = bridgeKinds(b, new TokenTexts(data))!;
  assert.deepEqual(
    { start: kinds.start, kinds: [...kinds.kinds], tool: kinds.tool, glue: kinds.glue },
    { start: 8, kinds: [Kind.Bridge, Kind.Bridge, Kind.Bridge, Kind.Tool, Kind.Tool, Kind.Bridge], tool: 2, glue: 4 },
  );
  const tt = turnTokens(b, kinds.start, kinds);
  const classes = Array.from({ length: tt.n }, (_, i) => positionClass(tt, i).split(' ').slice(0, 2).join(' '));
  assert.deepEqual(classes, [...Array(8).fill('t c'), 't br', 't br', 't br', 't tl', 't tl', 't br', 't s', 't s']);
  assert.equal(tt.mask(9), 0, 'bridge tokens never train');
  assert.equal(tt.mask(14), 1, 'sampled tokens train');
  assert.equal(bridgeKinds(data.turns[0]!, new TokenTexts(data)), null, 'a full render has no bridge');
});

test("without every bridge token's text the whole bridge is glue; a chat-mode rollout says the engine rendered", () => {
  const data = tokenInRollout();
  const partial = new TokenTexts({ ...data, token_texts: { 20: '\n' } });
  const kinds = bridgeKinds(data.turns[1]!, partial)!;
  assert.deepEqual([kinds.tool, kinds.glue], [0, 6]);
  assert.match(
    samplesSummary(viewerDataFromRollout(buildRollout(session, chain(3), { budgetStopCount: 0, captureLevel: 'tokens' }))),
    /^1 training sample · chat \(the engine rendered\)$/,
  );
});
