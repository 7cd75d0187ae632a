import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RolloutGraph } from '../../src/capture/graph.js';
import { findingCode } from '../../src/capture/findings.js';
import {
  NotTrainableError,
  TrainingTraceSchema,
  assertTrainable,
  buildRollout,
  traceToJsonl,
  trainingTraces,
  type TrainingTrace,
} from '../../src/capture/rollout.js';
import type { CallRecord } from '../../src/capture/types.js';
import { call, chain, session } from './rollout-fixtures.js';

const tokens = { budgetStopCount: 0, captureLevel: 'tokens' as const };
const codes = (fs: readonly string[]) => fs.map(findingCode);

// An agent chain a>b2>c with an abandoned retry b1 and a toolless title call.
function agentWithRetryAndTitle(): CallRecord[] {
  return [
    call({ id: 'a', index: 0, prompt: [1, 2], sampled: [3, 4], nTools: 2 }),
    call({ id: 'b1', index: 1, prompt: [1, 2, 3, 4, 5], sampled: [6], nTools: 2 }),
    call({ id: 'title', index: 2, prompt: [9, 9], sampled: [10], nTools: 0 }),
    call({ id: 'b2', index: 3, prompt: [1, 2, 3, 4, 5], sampled: [7, 8], nTools: 2, logprobs: [-0.25, -1] }),
    call({ id: 'c', index: 4, prompt: [1, 2, 3, 4, 5, 7, 8, 11], sampled: [12], nTools: 2, finish: 'tool_calls' }),
  ];
}

test('the rollout document of an agent chain with a retry and a title call', () => {
  const doc = buildRollout(session, agentWithRetryAndTitle(), tokens);
  assert.equal(doc.session_id, 'sess');
  assert.deepEqual(doc.metadata, { harness: 'test' });
  assert.equal(doc.rollout_type, 'train');
  assert.equal(doc.capture_level, 'tokens');
  assert.deepEqual(
    doc.calls.map((c) => c.call_id),
    ['a', 'b1', 'title', 'b2', 'c'],
  );
  assert.deepEqual(doc.stats, {
    n_calls: 5,
    n_turns: 5,
    n_roots: 2,
    n_leaves: 3,
    n_forks: 1,
    n_discarded: 1,
    n_sequences: 2,
    n_trainable_sequences: 1,
    n_trainable_tokens: 5,
  });
  assert.deepEqual(codes(doc.validation), ['multiple_roots', 'discarded_turns', 'forks']);
  assert.equal(doc.trainable, true);
  assert.deepEqual(
    doc.sequences.map((s) => [s.role, s.node_ids.join('>'), s.trainable]),
    [
      ['auxiliary', 'title', false],
      ['agent', 'a>b2>c', true],
    ],
  );
  const agent = doc.sequences[1]!;
  assert.deepEqual(agent.input_ids, [1, 2, 3, 4, 5, 7, 8, 11, 12]);
  assert.deepEqual(agent.loss_mask, [0, 0, 1, 1, 0, 1, 1, 0, 1]);
  assert.deepEqual(agent.logprobs, [0, 0, -0.5, -0.5, 0, -0.25, -1, 0, -0.5]);
  assert.deepEqual(agent.turn_lengths, [2, 2, 1]);

  const nodes = Object.fromEntries(doc.graph.nodes.map((n) => [n.node_id, n]));
  assert.deepEqual(nodes.a, {
    node_id: 'a',
    index: 0,
    parent_id: null,
    root_id: 'a',
    children: ['b1', 'b2'],
    discarded: false,
    role: 'agent',
  });
  assert.deepEqual(nodes.b1, { node_id: 'b1', index: 1, parent_id: 'a', root_id: 'a', children: [], discarded: true, role: 'discarded' });
  assert.equal(nodes.title!.role, 'auxiliary');
  assert.deepEqual(doc.graph.roots, ['a', 'title']);
  assert.deepEqual(doc.graph.leaves, ['b1', 'title', 'c']);
  assert.deepEqual(doc.graph.forks, [{ parent_id: 'a', children: ['b1', 'b2'] }]);

  const c = doc.turns.find((t) => t.node_id === 'c')!;
  assert.deepEqual(
    { ...c, findings: undefined },
    {
      node_id: 'c',
      index: 4,
      parent_id: 'b2',
      root_id: 'a',
      n_sampled: 1,
      n_prompt: 8,
      n_tools: 2,
      finish_reason: 'tool_calls',
      harness_session_id: null,
      sampling_params: { temperature: 0.8, top_p: 1 },
      requested_sampling_params: { temperature: 0.8 },
      sampled_logprobs: [-0.5],
      discarded: false,
      findings: undefined,
    },
  );
  assert.equal(c.request_messages, undefined);
  assert.ok(buildRollout(session, agentWithRetryAndTitle(), { ...tokens, includeMessages: true }).turns[0]!.request_messages!.length > 0);
});

test('discarded rows appear only when asked for, labelled', () => {
  const doc = buildRollout(session, agentWithRetryAndTitle(), { ...tokens, includeDiscarded: true });
  assert.deepEqual(
    doc.sequences.map((s) => s.role),
    ['discarded', 'auxiliary', 'agent'],
  );
  assert.equal(doc.traces.length, 3);
  assert.equal(doc.stats.n_trainable_tokens, 5);
});

test('traces validate against TrainingTraceSchema and round-trip through JSONL', () => {
  const doc = buildRollout(session, agentWithRetryAndTitle(), tokens);
  assert.equal(doc.traces.length, doc.sequences.length);
  const jsonl = traceToJsonl(trainingTraces(doc));
  const lines = jsonl.trimEnd().split('\n');
  assert.equal(lines.length, 2);
  assert.ok(jsonl.endsWith('\n'));
  const parsed = lines.map((l) => TrainingTraceSchema.parse(JSON.parse(l)));
  const agent = parsed.find((t) => t.role === 'agent')!;
  assert.equal(agent.schema_version, 1);
  assert.equal(agent.trace_id, 'sess/c');
  assert.deepEqual(agent.node_ids, ['a', 'b2', 'c']);
  assert.equal(agent.trainable, true);
  const b2 = agent.turns[1]!;
  assert.deepEqual(b2.prompt_token_ids, [1, 2, 3, 4, 5]);
  assert.deepEqual(b2.completion_token_ids, [7, 8]);
  assert.deepEqual(b2.per_token_logps, [-0.25, -1]);
  assert.deepEqual(b2.loss_mask, [0, 0, 0, 0, 0, 1, 1]);
  assert.deepEqual(b2.response.choices, [{ message: { role: 'assistant', content: 'reply b2' }, finish_reason: 'stop' }]);
  assert.deepEqual(b2.metadata, {
    node_id: 'b2',
    index: 3,
    model: 'm',
    n_tools: 2,
    harness_session_id: null,
    sampling_params: { temperature: 0.8, top_p: 1 },
    requested_sampling_params: { temperature: 0.8 },
  });
  assert.ok(
    agent.validation.some((f) => f.startsWith('[WARN] multiple_roots')),
    'rollout findings travel with each trace',
  );
  assert.equal(traceToJsonl([]), '');
});

test('TrainingTraceSchema rejects traces that break the trainer contract', () => {
  const doc = buildRollout(session, agentWithRetryAndTitle(), tokens);
  const good = JSON.parse(JSON.stringify(doc.traces.find((t) => t.role === 'agent'))) as TrainingTrace;
  assert.ok(TrainingTraceSchema.safeParse(good).success);
  const broken: [string, (t: TrainingTrace) => void][] = [
    ['extra field', (t) => Object.assign(t, { reward: 1 })],
    ['mask length', (t) => t.loss_mask.pop()],
    ['prompt position trained', (t) => (t.turns[0]!.loss_mask[0] = 1)],
    ['masked logprob', (t) => (t.logprobs[0] = -0.3)],
    ['positive logprob', (t) => (t.turns[0]!.per_token_logps[0] = 0.1)],
    ['flat ids disagree with turns', (t) => (t.input_ids[4] = 99)],
    ['duplicate node ids', (t) => (t.node_ids[1] = 'a')],
    ['turn_lengths', (t) => (t.turn_lengths = [5])],
    ['n_trainable', (t) => (t.n_trainable = 4)],
    ['prompt does not extend parent', (t) => (t.turns[2]!.prompt_token_ids = [1, 2, 3, 4, 5, 7, 9, 11])],
    ['negative token id', (t) => (t.turns[0]!.completion_token_ids[0] = -3)],
    ['schema version', (t) => Object.assign(t, { schema_version: 2 })],
  ];
  for (const [what, mutate] of broken) {
    const t = JSON.parse(JSON.stringify(good)) as TrainingTrace;
    mutate(t);
    assert.equal(TrainingTraceSchema.safeParse(t).success, false, what);
  }
});

test('a single-call rollout is degenerate unless a budget stop explains it', () => {
  const [only] = chain(1);
  const doc = buildRollout(session, [only!], tokens);
  assert.ok(codes(doc.validation).includes('degenerate_rollout'));
  assert.equal(doc.trainable, false);
  assert.equal(doc.sequences[0]!.trainable, false, 'a FATAL rollout finding vetoes every row');
  assert.equal(doc.traces[0]!.trainable, false);
  assert.ok(doc.traces[0]!.validation.some((f) => f.startsWith('[FATAL] degenerate_rollout')));
  assert.equal(doc.stats.n_trainable_tokens, 0);
  assert.throws(
    () => assertTrainable(doc, { strict: true }),
    (e: unknown) => e instanceof NotTrainableError && /degenerate_rollout/.test(e.message),
  );

  const stopped = buildRollout(session, [only!], { ...tokens, budgetStopCount: 1 });
  assert.ok(!codes(stopped.validation).includes('degenerate_rollout'));
  assert.ok(codes(stopped.validation).includes('budget_stop'));
  assert.equal(stopped.trainable, true);
  assert.doesNotThrow(() => assertTrainable(stopped, { strict: true }));
});

test('no turns: nothing reached the proxy, or only errors did', () => {
  const empty = buildRollout(session, [], tokens);
  assert.deepEqual(codes(empty.validation), ['no_turns']);
  assert.equal(empty.trainable, false);
  assert.deepEqual(empty.sequences, []);
  const errored = buildRollout(session, [call({ id: 'e', index: 0, prompt: null, sampled: null, error: true })], tokens);
  assert.equal(errored.calls.length, 1);
  assert.equal(errored.stats.n_turns, 0);
  assert.deepEqual(codes(errored.validation), ['no_turns']);
});

test('every call its own root is per_turn_capture_only', () => {
  const records = [0, 1, 2].map((i) => call({ id: `r${i}`, index: i, prompt: [100 + i, 1], sampled: [2], nTools: 1 }));
  const doc = buildRollout(session, records, tokens);
  assert.deepEqual(codes(doc.validation), ['per_turn_capture_only']);
  assert.equal(doc.stats.n_trainable_sequences, 3);
});

test('a prefix shared by forks that both continue is trained once (by the later path)', () => {
  const records = [
    call({ id: 'a', index: 0, prompt: [1, 2], sampled: [3, 4, 5], nTools: 1 }),
    call({ id: 'x', index: 1, prompt: [1, 2, 3, 4, 5, 6], sampled: [7], nTools: 1 }),
    call({ id: 'y', index: 2, prompt: [1, 2, 3, 4, 5, 8], sampled: [9, 10], nTools: 1 }),
  ];
  const doc = buildRollout(session, records, tokens);
  assert.equal(doc.stats.n_trainable_sequences, 2);
  assert.deepEqual(
    doc.sequences.map((s) => s.n_trainable),
    [1, 5],
    'a is trained in the later path only',
  );
  assert.deepEqual(doc.sequences[0]!.loss_mask, [0, 0, 0, 0, 0, 0, 1]);
  assert.ok(doc.sequences[0]!.validation.some((f) => f.startsWith('[INFO] repeated_target')));
  assert.equal(doc.stats.n_trainable_tokens, 6, 'a counts once: 3 + 1 + 2');
  assert.equal(doc.stats.n_discarded, 0);
});

test('an evaluation session has the full trace but refuses to hand out training traces', () => {
  // What a hosted provider leaves: messages, no ids. Each call's messages extend the previous exchange.
  const history: { role: string; content: string }[] = [];
  const records = [0, 1, 2].map((i) => {
    history.push({ role: 'user', content: `step ${i}` });
    const r = call({ id: `c${i}`, index: i, prompt: null, sampled: null, logprobs: null, messages: [...history], nTools: 1 });
    history.push({ role: 'assistant', content: `reply c${i}` });
    return r;
  });
  const doc = buildRollout(session, records, { budgetStopCount: 0, captureLevel: 'text' });
  assert.equal(doc.rollout_type, 'eval');
  assert.equal(doc.trainable, false);
  assert.deepEqual(doc.traces, []);
  assert.equal(doc.stats.n_turns, 3);
  assert.equal(doc.sequences.length, 1, 'linked by messages into one conversation');
  assert.ok(
    doc.turns.every((t) => t.findings.every((f) => !f.startsWith('[FATAL]'))),
    'missing ids are expected below tokens',
  );
  assert.throws(
    () => trainingTraces(doc),
    (e: unknown) =>
      e instanceof NotTrainableError && e.name === 'NotTrainableError' && /evaluation rollout/.test(e.message) && /"text"/.test(e.message),
  );
  const evalPurpose = buildRollout(session, chain(3), { ...tokens, purpose: 'eval' });
  assert.equal(evalPurpose.rollout_type, 'eval');
  assert.throws(() => assertTrainable(evalPurpose), /purpose "eval"/);
});

test('session findings are reported, and a FATAL one vetoes training', () => {
  const warn = buildRollout(session, chain(3), { ...tokens, sessionFindings: ['[WARN] sampling_neutralised: top_p'] });
  assert.ok(warn.validation.includes('[WARN] sampling_neutralised: top_p'));
  assert.equal(warn.trainable, true);
  const fatal = buildRollout(session, chain(3), { ...tokens, sessionFindings: ['[FATAL] raw_logprobs: engine returns raw logprobs'] });
  assert.equal(fatal.trainable, false);
  assert.equal(fatal.stats.n_trainable_sequences, 0);
});

test('a live graph and a rebuild from the store give the same document', () => {
  const records = agentWithRetryAndTitle();
  const live = new RolloutGraph();
  for (const r of [...records].reverse()) live.add(r);
  const fromLive = buildRollout(session, records, { ...tokens, graph: live });
  const rebuilt = buildRollout(session, records, tokens);
  assert.deepEqual(fromLive, rebuilt);
});

test('traces can be left out of the document, and shared turns are built once', () => {
  const lean = buildRollout(session, agentWithRetryAndTitle(), { ...tokens, includeTraces: false });
  assert.deepEqual(lean.traces, []);
  assert.equal(lean.trainable, true);
  const records = [
    call({ id: 'a', index: 0, prompt: [1, 2], sampled: [3], nTools: 1 }),
    call({ id: 'x', index: 1, prompt: [1, 2, 3, 4], sampled: [5], nTools: 1 }),
    call({ id: 'y', index: 2, prompt: [1, 2, 3, 6], sampled: [7], nTools: 1 }),
  ];
  const [tx, ty] = buildRollout(session, records, tokens).traces;
  assert.equal(tx!.turns[0], ty!.turns[0], 'the fork point a is one object in both traces');
});
