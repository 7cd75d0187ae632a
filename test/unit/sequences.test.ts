import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { RolloutGraph } from '../../src/capture/graph.js';
import { buildSequences, flattenPath, turnLengths } from '../../src/capture/sequences.js';
import { checkSequence, checkTurn, findingCode, isFatal } from '../../src/capture/findings.js';
import { call, chain } from './rollout-fixtures.js';

const codes = (fs: readonly string[]) => fs.map(findingCode);

test('a chain flattens to context and sampled spans with equal-length arrays', () => {
  const records = chain(3, { first: 4, sampled: 2, glue: 1 });
  const g = RolloutGraph.fromRecords(records);
  const { sequences } = buildSequences(g, { trainableCapture: true });
  assert.equal(sequences.length, 1);
  const s = sequences[0]!;
  const leaf = records[2]!;
  // The flattened path is exactly what the model saw and produced last: the leaf's prompt + completion.
  assert.deepEqual(s.input_ids, [...leaf.prompt_token_ids!, ...leaf.completion_token_ids!]);
  assert.deepEqual(s.loss_mask, [0, 0, 0, 0, 1, 1, 0, 1, 1, 0, 1, 1]);
  assert.deepEqual(s.logprobs, [0, 0, 0, 0, -0.5, -0.5, 0, -0.5, -0.5, 0, -0.5, -0.5]);
  assert.equal(s.prompt_len, 4);
  assert.deepEqual(s.turn_lengths, [2, 2, 2]);
  assert.equal(s.n_trainable, 6);
  assert.equal(s.n_turns, 3);
  assert.deepEqual(s.node_ids, ['c0', 'c1', 'c2']);
  assert.equal(s.role, 'agent');
  assert.equal(s.trainable, true);
  assert.deepEqual(s.validation, []);
});

test('a turn with misaligned logprobs stays as context (mask 0, logprob 0.0) and is flagged', () => {
  const records = chain(3, { first: 4, sampled: 2, glue: 1 });
  records[1]!.logprobs = [-0.1]; // one logprob for two sampled tokens
  const g = RolloutGraph.fromRecords(records);
  const node = g.get('c1')!;
  assert.equal(node.sampled_logprobs, null);
  assert.ok(node.findings.some((f) => f.startsWith('[FATAL] logprob_misalign')));
  const s = buildSequences(g, { trainableCapture: true }).sequences[0]!;
  assert.deepEqual(s.loss_mask, [0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1]);
  assert.deepEqual(s.logprobs.slice(6, 9), [0, 0, 0]);
  assert.deepEqual(s.turn_lengths, [2, 2]);
  assert.equal(s.input_ids.length, s.loss_mask.length);
  assert.ok(codes(s.validation).includes('untrained_turns'));
  assert.equal(s.trainable, true, 'the other turns still train');
});

test('missing, non-finite, boolean or positive logprobs make the turn context only', () => {
  const cases: [unknown[] | null, string][] = [
    [null, 'no_logprobs'],
    [[-0.1, Number.NaN], 'invalid_logprob'],
    [[-0.1, true], 'invalid_logprob'],
    [[-0.1, 0.3], 'positive_logprob'],
  ];
  for (const [logprobs, code] of cases) {
    const records = chain(2, { sampled: 2 });
    records[0]!.logprobs = logprobs as number[] | null;
    const g = RolloutGraph.fromRecords(records);
    assert.equal(g.get('c0')!.sampled_logprobs, null, code);
    assert.ok(codes(g.get('c0')!.findings).includes(code), code);
    const s = buildSequences(g, { trainableCapture: true }).sequences[0]!;
    assert.equal(s.n_trainable, 2, code);
    assert.ok(
      s.logprobs.every((lp) => Number.isFinite(lp) && lp <= 0),
      code,
    );
  }
});

test('a path where no turn has usable logprobs is nothing_trainable', () => {
  const records = chain(2).map((r) => ({ ...r, logprobs: null }));
  const s = buildSequences(RolloutGraph.fromRecords(records), { trainableCapture: true }).sequences[0]!;
  assert.ok(codes(s.validation).includes('nothing_trainable'));
  assert.equal(s.trainable, false);
  assert.deepEqual(s.turn_lengths, []);
});

test('roles: tool paths are agent, toolless ones auxiliary, abandoned retries discarded', () => {
  const g = new RolloutGraph();
  g.add(call({ id: 'a', index: 0, prompt: [1, 2], sampled: [3], nTools: 2 }));
  g.add(call({ id: 'b1', index: 1, prompt: [1, 2, 3, 4], sampled: [5], nTools: 2 }));
  g.add(call({ id: 'b2', index: 2, prompt: [1, 2, 3, 4], sampled: [6], nTools: 2 }));
  g.add(call({ id: 'c', index: 3, prompt: [1, 2, 3, 4, 6, 7], sampled: [8], nTools: 2 }));
  g.add(call({ id: 'title', index: 4, prompt: [9, 9], sampled: [10] }));
  const { sequences } = buildSequences(g, { trainableCapture: true });
  assert.deepEqual(
    sequences.map((s) => [s.node_ids.join('>'), s.role, s.trainable]),
    [
      ['a>b1', 'discarded', false],
      ['a>b2>c', 'agent', true],
      ['title', 'auxiliary', false],
    ],
  );
});

test('roles without any tool manifest: live paths are agent (at tokens level only if trainable)', () => {
  const records = [...chain(2, { nTools: 0 }), call({ id: 'x', index: 2, prompt: [5, 5], sampled: [6], logprobs: null })];
  const atTokens = buildSequences(RolloutGraph.fromRecords(records), { trainableCapture: true }).sequences;
  assert.deepEqual(
    atTokens.map((s) => s.role),
    ['agent', 'auxiliary'],
  );
  const atText = buildSequences(RolloutGraph.fromRecords(records, { captureLevel: 'text' }), { trainableCapture: false }).sequences;
  assert.deepEqual(
    atText.map((s) => s.role),
    ['agent', 'agent'],
  );
  assert.ok(atText.every((s) => s.n_trainable === 0 && !s.trainable && s.validation.length === 0));
  assert.ok(
    atText.every((s) => s.loss_mask.every((m) => m === 0)),
    'nothing is a target below tokens level',
  );
});

test('a path through a call without prompt ids has no token arrays and is not trainable', () => {
  const [a] = chain(1);
  const g = RolloutGraph.fromRecords([
    a!,
    call({
      id: 'bare',
      index: 1,
      prompt: null,
      sampled: [5],
      messages: [
        { role: 'user', content: 'prompt c0' },
        { role: 'assistant', content: 'reply c0' },
      ],
    }),
  ]);
  assert.equal(flattenPath(g.pathTo(g.get('bare')!)), null);
  const s = buildSequences(g, { trainableCapture: true }).sequences[0]!;
  assert.deepEqual(s.node_ids, ['c0', 'bare']);
  assert.deepEqual([s.input_ids, s.loss_mask, s.logprobs], [[], [], []]);
  assert.ok(codes(s.validation).includes('no_prompt_ids'));
  assert.equal(s.trainable, false);
});

test('property: arrays have equal lengths, mask-1 runs equal turn_lengths, and input_ids is the leaf end', () => {
  fc.assert(
    fc.property(
      fc.array(fc.record({ sampled: fc.integer({ min: 0, max: 4 }), glue: fc.integer({ min: 1, max: 3 }), usable: fc.boolean() }), {
        minLength: 1,
        maxLength: 8,
      }),
      (turns) => {
        let next = 1;
        let prompt = [next++, next++];
        const records = turns.map((t, i) => {
          const sampled = Array.from({ length: t.sampled }, () => next++);
          const r = call({ id: `t${i}`, index: i, prompt, sampled, logprobs: t.usable ? sampled.map(() => -1) : null });
          prompt = [...prompt, ...sampled, ...Array.from({ length: t.glue }, () => next++)];
          return r;
        });
        const s = buildSequences(RolloutGraph.fromRecords(records), { trainableCapture: true }).sequences[0]!;
        assert.equal(s.loss_mask.length, s.input_ids.length);
        assert.equal(s.logprobs.length, s.input_ids.length);
        const leaf = records[records.length - 1]!;
        assert.deepEqual(s.input_ids, [...leaf.prompt_token_ids!, ...leaf.completion_token_ids!]);
        const expected = turns.filter((t) => t.usable && t.sampled > 0).map((t) => t.sampled);
        assert.deepEqual(s.turn_lengths, expected);
        assert.deepEqual(turnLengths(s.loss_mask), s.turn_lengths);
        assert.equal(
          s.n_trainable,
          expected.reduce((a, b) => a + b, 0),
        );
        s.loss_mask.forEach((m, i) => assert.ok(m === 1 || s.logprobs[i] === 0));
      },
    ),
    { numRuns: 200 },
  );
});

test('checkSequence catches each broken invariant', () => {
  const ok = { input_ids: [1, 2, 3], loss_mask: [0, 1, 1], logprobs: [0, -0.2, 0], prompt_len: 1 };
  assert.deepEqual(codes(checkSequence(ok)), ['certain_tokens']);
  assert.deepEqual(codes(checkSequence({ ...ok, logprobs: [0, -1] })), ['length_mismatch']);
  assert.deepEqual(codes(checkSequence({ ...ok, loss_mask: [1, 1, 1], logprobs: [-1, -1, -1] })), ['invalid_training_sequence']);
  assert.deepEqual(codes(checkSequence({ ...ok, loss_mask: [0, 2, 1] })), ['invalid_training_sequence']);
  assert.deepEqual(codes(checkSequence({ ...ok, logprobs: [-0.3, -0.2, -0.1] })), ['masked_has_logprob']);
  assert.deepEqual(codes(checkSequence({ ...ok, logprobs: [0, 0.2, -0.1] })), ['positive_logprob']);
  assert.deepEqual(codes(checkSequence({ ...ok, loss_mask: [0, 0, 0], logprobs: [0, 0, 0] })), ['nothing_trainable']);
  assert.deepEqual(codes(checkSequence({ ...ok, prompt_len: 3, loss_mask: [0, 0, 0], logprobs: [0, 0, 0] })), [
    'nothing_trainable',
    'empty_response',
  ]);
});

test('checkTurn grades ingest problems', () => {
  const base = { index: 4, prompt_token_ids: [1, 2], completion_token_ids: [3], logprobs: [-0.1], finish_reason: 'stop' };
  assert.deepEqual(checkTurn(base, 'tokens'), []);
  assert.deepEqual(codes(checkTurn({ ...base, prompt_token_ids: [1, -2] }, 'tokens')), ['invalid_token_id']);
  assert.deepEqual(codes(checkTurn({ ...base, completion_token_ids: [1.5] }, 'tokens')), ['invalid_token_id']);
  assert.deepEqual(codes(checkTurn({ ...base, prompt_token_ids: null }, 'tokens')), ['no_prompt_ids']);
  assert.deepEqual(codes(checkTurn({ ...base, completion_token_ids: [], logprobs: [] }, 'tokens')), ['no_sampled_ids']);
  assert.deepEqual(codes(checkTurn({ ...base, finish_reason: 'length' }, 'tokens')), ['truncated_turn']);
  assert.ok(checkTurn({ ...base, finish_reason: 'length' }, 'tokens')[0]!.startsWith('[WARN]'));
  assert.ok(checkTurn({ ...base, logprobs: [-1, -1] }, 'tokens').every(isFatal));
  // Below tokens, missing ids are expected; only an answer the agent cannot act on is worth a warning.
  assert.deepEqual(
    checkTurn(
      {
        ...base,
        prompt_token_ids: null,
        completion_token_ids: null,
        logprobs: null,
        response_message: { role: 'assistant', content: 'hi' },
      },
      'text',
    ),
    [],
  );
  assert.deepEqual(codes(checkTurn({ ...base, prompt_token_ids: null, response_message: { role: 'assistant', content: '  ' } }, 'text')), [
    'empty_completion',
  ]);
});

test("the proxy's own turn findings are kept and not repeated in other words", () => {
  const records = chain(2);
  records[0]!.logprobs = null; // the proxy nulls logprobs it rejected...
  records[0]!.findings = ['[FATAL] logprob_misalign: 3 sampled ids but 2 logprob entries', '[WARN] token_strings: text tokens'];
  const node = RolloutGraph.fromRecords(records).get('c0')!;
  assert.deepEqual(node.findings, records[0]!.findings, '...so they are not reported again as no_logprobs');
  assert.equal(node.sampled_logprobs, null);
  records[1]!.findings = ['[WARN] token_strings: text tokens'];
  records[1]!.finish_reason = 'length';
  assert.deepEqual(codes(RolloutGraph.fromRecords(records).get('c1')!.findings), ['token_strings', 'truncated_turn']);
});
