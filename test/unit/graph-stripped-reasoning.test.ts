// gemini-cli does not send a thinking model's reasoning back: the next request's prompt holds the
// previous reply without its thought parts, so it extends the previous call as messages but not as
// tokens. The graph links such a turn as a continuation (with a finding) rather than a new root, and
// trains it as its own segment. Message shapes as the Gemini dialect produces them from gemini-cli
// 0.61.0 requests (thought parts dropped, functionCall ids echoed).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RolloutGraph } from '../../src/capture/graph.js';
import { buildSequences } from '../../src/capture/sequences.js';
import type { CallRecord, ChatMessage } from '../../src/capture/types.js';
import { call } from './rollout-fixtures.js';

const system: ChatMessage = { role: 'system', content: 'You are Gemini CLI, an interactive CLI agent.' };
const task: ChatMessage = { role: 'user', content: [{ type: 'text', text: 'Create a file named `hello.txt`.' }] };
const shell = (command: string, id: string) => ({
  id,
  type: 'function' as const,
  function: { name: 'run_shell_command', arguments: JSON.stringify({ command }) },
});
const toolResult = (id: string, output: string): ChatMessage => ({ role: 'tool', tool_call_id: id, content: JSON.stringify({ output }) });

const SYS = [1, 2, 3];
const TASK = [10, 11];
const THINK0 = [50, 51, 52]; // reasoning tokens of turn 0's reply
const CALL0 = [60, 61]; // its tool call
const RESULT0 = [70, 71];
const THINK1 = [80, 81];
const CALL1 = [90];
const RESULT1 = [95];

const reply0: ChatMessage = {
  role: 'assistant',
  content: null,
  reasoning_content: 'I will write the file with printf.',
  tool_calls: [shell("printf 'Hello, world!' > hello.txt", 'c0')],
};
const reply1: ChatMessage = {
  role: 'assistant',
  content: null,
  reasoning_content: 'Now check it.',
  tool_calls: [shell('cat hello.txt', 'c1')],
};
const replayed = (m: ChatMessage): ChatMessage => ({ role: 'assistant', content: null, tool_calls: m.tool_calls });

function records(): CallRecord[] {
  const t0 = call({
    id: 't0',
    index: 0,
    prompt: [...SYS, ...TASK],
    sampled: [...THINK0, ...CALL0],
    finish: 'tool_calls',
    nTools: 1,
    messages: [system, task],
    reply: reply0,
  });
  // The prompt replays turn 0's call without its reasoning tokens.
  const p1 = [...SYS, ...TASK, ...CALL0, ...RESULT0];
  const t1 = call({
    id: 't1',
    index: 1,
    prompt: p1,
    sampled: [...THINK1, ...CALL1],
    finish: 'tool_calls',
    nTools: 1,
    messages: [system, task, replayed(reply0), toolResult('c0', '')],
    reply: reply1,
  });
  const p2 = [...p1, ...CALL1, ...RESULT1];
  const t2 = call({
    id: 't2',
    index: 2,
    prompt: p2,
    sampled: [99],
    nTools: 1,
    messages: [system, task, replayed(reply0), toolResult('c0', ''), replayed(reply1), toolResult('c1', 'Hello, world!')],
    reply: { role: 'assistant', content: 'Done.' },
  });
  return [t0, t1, t2];
}

const parents = (g: RolloutGraph) => Object.fromEntries(g.nodes().map((n) => [n.node_id, n.parent?.node_id ?? null]));

test('a turn whose prompt only lacks the previous reasoning continues that turn, with a finding', () => {
  const g = RolloutGraph.fromRecords(records());
  assert.deepEqual(parents(g), { t0: null, t1: 't0', t2: 't1' });
  assert.deepEqual(
    g.roots().map((n) => n.node_id),
    ['t0'],
  );
  for (const id of ['t1', 't2']) {
    const f = g.get(id)!.findings.find((x) => x.includes('reasoning_stripped'));
    assert.match(f ?? '', /^\[WARN\] reasoning_stripped: turn \d continues turn \d/);
  }
  assert.equal(
    g.get('t0')!.findings.some((x) => x.includes('reasoning_stripped')),
    false,
  );
});

test('every arrival order gives the same links', () => {
  const [a, b, c] = records();
  for (const order of [
    [a, b, c],
    [a, c, b],
    [b, a, c],
    [b, c, a],
    [c, a, b],
    [c, b, a],
  ]) {
    assert.deepEqual(parents(RolloutGraph.fromRecords(order as CallRecord[])), { t0: null, t1: 't0', t2: 't1' });
  }
});

test('the training rows stay exact: each continuation starts a segment with its whole prompt as context', () => {
  const g = RolloutGraph.fromRecords(records());
  const { sequences } = buildSequences(g, { trainableCapture: true });
  assert.deepEqual(
    sequences.map((s) => s.node_ids),
    [['t0'], ['t1'], ['t2']],
  );
  const [s0, s1] = sequences;
  assert.deepEqual(s0!.input_ids, [...SYS, ...TASK, ...THINK0, ...CALL0]);
  assert.deepEqual(s1!.input_ids, [...SYS, ...TASK, ...CALL0, ...RESULT0, ...THINK1, ...CALL1]);
  assert.equal(s1!.prompt_len, SYS.length + TASK.length + CALL0.length + RESULT0.length);
  assert.deepEqual(
    sequences.map((s) => s.n_trainable),
    [5, 3, 1],
    'every sampled token is trained exactly once',
  );
});

test('an exact token prefix wins over a continuation', () => {
  const [t0, t1] = records();
  // A turn that replayed the reasoning too: it extends t0 exactly.
  const exact = call({
    id: 'x',
    index: 2,
    prompt: [...SYS, ...TASK, ...THINK0, ...CALL0, ...RESULT0],
    sampled: [7],
    messages: t1!.engine_request!.messages,
    reply: { role: 'assistant', content: 'ok' },
  });
  const g = RolloutGraph.fromRecords([t0!, t1!, exact]);
  assert.equal(g.get('x')!.parent!.node_id, 't0');
  assert.equal(
    g.get('x')!.findings.some((f) => f.includes('reasoning_stripped')),
    false,
  );
});

test('not a continuation: a reply without reasoning, a different history, or another system prompt', () => {
  const [t0, t1] = records();
  const plain = {
    ...t0!,
    engine_response: { ...t0!.engine_response!, choices: [{ ...t0!.engine_response!.choices[0]!, message: replayed(reply0) }] },
  } as CallRecord;
  assert.equal(RolloutGraph.fromRecords([plain, t1!]).get('t1')!.parent, null, 'nothing was stripped: a real new root');
  const otherCall = call({
    ...specOf(t1!),
    id: 'o',
    messages: [system, task, { role: 'assistant', content: null, tool_calls: [shell('ls', 'c0')] }, toolResult('c0', '')],
  });
  assert.equal(RolloutGraph.fromRecords([t0!, otherCall]).get('o')!.parent, null, 'the history is not the previous reply');
  const otherSystem = call({
    ...specOf(t1!),
    id: 's',
    messages: [{ role: 'system', content: 'A subagent.' }, ...t1!.engine_request!.messages.slice(1)],
  });
  assert.equal(RolloutGraph.fromRecords([t0!, otherSystem]).get('s')!.parent, null, 'another system prompt is another agent');
});

function specOf(r: CallRecord) {
  return {
    id: r.call_id,
    index: r.index,
    prompt: r.prompt_token_ids,
    sampled: r.completion_token_ids,
    finish: r.finish_reason,
    nTools: r.n_tools,
    reply: r.engine_response!.choices[0]!.message,
  };
}
