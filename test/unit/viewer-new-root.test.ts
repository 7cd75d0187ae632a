// opencode asks for a title before its agent chain starts (#28): the chain after that side call is
// the main one (a "root", not a "subagent"), and sharing the chat template's first tokens with the
// title call is no "harness rewrote history". A real compaction still reads as one.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ViewerData, ViewerTurn } from '../../src/protocol/viewer-data.js';
import { Navigator, addedByHarness, mainRoot, rootKind } from '../../webview/viewer/model.js';

function turn(index: number, over: Partial<ViewerTurn> & Pick<ViewerTurn, 'prompt_ids' | 'sampled_ids'>): ViewerTurn {
  return {
    node_id: `n${index}`,
    index,
    parent_id: null,
    root_id: `n${index}`,
    children: [],
    discarded: false,
    role: 'agent',
    logprobs: null,
    trained: false,
    top: null,
    sampled_text: null,
    flags: [],
    findings: [],
    finish_reason: 'stop',
    n_tools: 1,
    model: 'm',
    latency_ms: 1,
    started_at: null,
    request_messages: [],
    response_message: null,
    raw: null,
    ...over,
  } as ViewerTurn;
}

function rollout(turns: ViewerTurn[]): ViewerData {
  for (const t of turns) if (t.parent_id) turns.find((p) => p.node_id === t.parent_id)!.children.push(t.node_id);
  return {
    version: 1,
    key: 'k',
    title: 't',
    source: 'rollout',
    session_id: 's',
    capture_level: 'tokens',
    rollout_type: 'train',
    metadata: {},
    stats: null,
    validation: [],
    graph: { roots: turns.filter((t) => !t.parent_id).map((t) => t.node_id), forks: [], nodes: [] },
    turns,
    token_texts: {},
    atif: null,
  } as unknown as ViewerData;
}

// Template start shared by every call ("<|im_start|>system\n"), then each call's own text.
const TEMPLATE = [1, 2, 3];
const title = turn(0, { role: 'auxiliary', n_tools: 0, prompt_ids: [...TEMPLATE, 90, 91, 92, 93], sampled_ids: [94, 95] });
const agent = turn(1, { prompt_ids: [...TEMPLATE, 10, 11, 12, 13, 14, 15, 16, 17], sampled_ids: [20, 21] });
const next = turn(2, {
  parent_id: 'n1',
  root_id: 'n1',
  prompt_ids: [...TEMPLATE, 10, 11, 12, 13, 14, 15, 16, 17, 20, 21, 30, 31],
  sampled_ids: [40],
});

test("the main chain after a title call is the root, the title call a side call, and nothing 'rewrote history'", () => {
  const data = rollout([title, agent, next]);
  const byId = new Navigator(data).byId;
  assert.equal(mainRoot(data, byId), agent);
  assert.equal(rootKind(data, agent, byId), 'root', 'not a subagent');
  assert.equal(rootKind(data, title, byId), 'auxiliary');
  const a = addedByHarness(data, agent, byId);
  assert.equal(a.against, null, 'no earlier call it continues');
  assert.equal(a.prefixBreak, null, 'no red "harness rewrote history" message');
  assert.equal(addedByHarness(data, next, byId).prefixBreak, null);
});

test('a real subagent and a real compaction keep their badges; the compaction is compared with the call it replaced', () => {
  const sub = turn(3, { prompt_ids: [...TEMPLATE, 70, 71, 72], sampled_ids: [73] });
  const compacted = turn(4, { prompt_ids: [...TEMPLATE, 10, 11, 12, 13, 14, 15, 99, 98], sampled_ids: [97] });
  const data = rollout([title, agent, next, sub, compacted]);
  const byId = new Navigator(data).byId;
  assert.equal(rootKind(data, sub, byId), 'subagent');
  assert.equal(addedByHarness(data, sub, byId).prefixBreak, null, 'a subagent starts its own conversation');
  assert.equal(rootKind(data, compacted, byId), 'compaction');
  const c = addedByHarness(data, compacted, byId);
  assert.equal(c.relation, 'closest');
  assert.equal(c.against, next, 'the latest call sharing the longest prefix');
  assert.ok(c.prefixBreak, 'a compaction is a history rewrite');
  assert.equal(c.prefixBreak.at, TEMPLATE.length + 6);
});

test('without a title call the first root is the root, as before', () => {
  const data = rollout([agent, next]);
  const byId = new Navigator(data).byId;
  assert.equal(rootKind(data, agent, byId), 'root');
  assert.equal(rootKind(data, next, byId), null);
});
