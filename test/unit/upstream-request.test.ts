import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildEngineRequest } from '../../src/capture/upstream.js';
import type { ChatRequest } from '../../src/capture/types.js';

const chat = (): ChatRequest =>
  ({
    model: 'client-model',
    stream: true,
    stream_options: { include_usage: true },
    max_completion_tokens: 100_000,
    top_p: 0.9,
    tools: [],
    tool_choice: 'auto',
    messages: [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: 'ok', reasoning_content: 'thought' },
    ],
  }) as unknown as ChatRequest;

test('the engine request at tokens level: capture fields on, truncation reset, client knobs kept apart', () => {
  const input = chat();
  const before = JSON.stringify(input);
  const plan = buildEngineRequest(input, { model: 'served', captureLevel: 'tokens', maxOutputTokens: 8192 });
  assert.equal(JSON.stringify(input), before, 'the input is untouched');
  const r = plan.request as unknown as Record<string, unknown>;
  assert.equal(r.model, 'served');
  assert.equal(r.stream, false);
  for (const gone of ['stream_options', 'tools', 'tool_choice', 'max_completion_tokens']) assert.ok(!(gone in r), gone);
  assert.equal(r.max_tokens, 8192);
  assert.deepEqual(
    [r.logprobs, r.top_logprobs, r.return_token_ids, r.return_tokens_as_token_ids, r.top_p, r.top_k, r.min_p],
    [true, 0, true, true, 1, -1, 0],
  );
  assert.deepEqual(plan.requestedSampling, { top_p: 0.9, max_completion_tokens: 100_000 });
  assert.deepEqual(plan.request.messages[1], { role: 'assistant', content: 'ok', reasoning: 'thought' });
  assert.equal(plan.request.messages[0], input.messages[0], 'unchanged messages are shared, not copied');
});

test('text level: no capture fields, and earlier reasoning is dropped rather than renamed', () => {
  const plan = buildEngineRequest(chat(), { model: 'served', captureLevel: 'text' });
  const r = plan.request as unknown as Record<string, unknown>;
  assert.ok(!('logprobs' in r) && !('return_token_ids' in r));
  assert.equal(r.top_p, 0.9);
  assert.deepEqual(plan.request.messages[1], { role: 'assistant', content: 'ok' });
});

test("a session's pinned sampling overrides the harness's; both are recorded", () => {
  const input = { ...chat(), temperature: 0.2 } as ChatRequest;
  const plan = buildEngineRequest(input, {
    model: 'served',
    captureLevel: 'tokens',
    pinnedSampling: { temperature: 0.7, top_p: 1, top_k: -1, min_p: 0 },
  });
  assert.deepEqual(plan.requestedSampling, { temperature: 0.2, top_p: 0.9, max_completion_tokens: 100_000 });
  assert.deepEqual([plan.sampling.temperature, plan.sampling.top_p, plan.sampling.top_k, plan.sampling.min_p], [0.7, 1, -1, 0]);
  const bare = buildEngineRequest(chat(), { model: 'served', captureLevel: 'tokens', pinnedSampling: { temperature: 1.3 } });
  assert.equal(bare.sampling.temperature, 1.3, 'pinned even when the harness sends none');
  assert.equal(bare.requestedSampling.temperature, undefined);
});
