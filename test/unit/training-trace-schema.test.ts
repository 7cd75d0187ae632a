// TrainingTraceSchema's invariants over the flat arrays: each turn's prompt extends the previous
// turn's prompt and completion, and the flat arrays are the turns laid end to end.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { TRAINING_TRACE_SCHEMA_VERSION, TrainingTraceSchema } from '../../src/capture/trace.js';

function turn(id: string, prompt: number[], completion: number[], logps: number[], mask: (0 | 1)[]) {
  return {
    node_id: id,
    prompt_token_ids: prompt,
    completion_token_ids: completion,
    per_token_logps: logps,
    loss_mask: mask,
    request: { messages: [{ role: 'user' }], tools: null },
    response: { choices: [{ message: { role: 'assistant' }, finish_reason: 'stop' }] },
    metadata: {
      node_id: id,
      index: 0,
      model: null,
      n_tools: 0,
      harness_session_id: null,
      sampling_params: {},
      requested_sampling_params: {},
    },
  };
}

function trace(secondPrompt: number[]) {
  return {
    schema_version: TRAINING_TRACE_SCHEMA_VERSION,
    session_id: 's',
    trace_id: 't',
    role: 'agent',
    root_id: 'a',
    node_ids: ['a', 'b'],
    input_ids: [1, 2, 3, 4, 5],
    loss_mask: [0, 0, 1, 0, 1],
    logprobs: [0, 0, -0.5, 0, -0.1],
    turn_lengths: [1, 1],
    n_trainable: 2,
    trainable: true,
    validation: [],
    turns: [turn('a', [1, 2], [3], [-0.5], [0, 0, 1]), turn('b', secondPrompt, [5], [-0.1], [0, 0, 0, 0, 1])],
  };
}

test('a trace whose turns extend each other parses', () => {
  assert.equal(TrainingTraceSchema.safeParse(trace([1, 2, 3, 4])).success, true);
});

test("a prompt that does not extend the previous turn's prompt and completion is refused", () => {
  for (const prompt of [
    [1, 9, 3, 4], // the previous prompt changed
    [1, 2, 9, 4], // the previous completion changed
    [1, 2], // no longer than the previous prompt
  ]) {
    const parsed = TrainingTraceSchema.safeParse(trace(prompt));
    assert.equal(parsed.success, false, JSON.stringify(prompt));
    assert.match(parsed.error!.message, /turn b: prompt does not extend the previous turn's prompt\+completion/, JSON.stringify(prompt));
  }
});
