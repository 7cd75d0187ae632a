// The record's answers on the token route: the recorded sampled ids, logprobs and top logprobs in each
// route's answer shape must read back through the capture proxy's own readers exactly as recorded; and
// the recorded token engine's matching: the same messages with the same ids are exact, the same
// messages with other ids halt naming the first differing position, tolerated messages with other
// ids stay tolerated.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Renderer } from '../../src/capture/render/renderer.js';
import { readCompletionsAnswer, readGenerateAnswer } from '../../src/capture/render/token-engine.js';
import { firstIdDifference, recordedTokenAnswer, RecordedTokenEngine } from '../../src/replay/recorded-token-engine.js';
import type { ReplayCall, ReplaySource } from '../../src/replay/source.js';

function call(index: number, content: string, prompt: number[], sampled: number[]): ReplayCall {
  return {
    call_id: `c${index}`,
    index,
    dialect: 'openai_chat',
    path: '/v1/chat/completions',
    engine_request: { model: 'm', messages: [{ role: 'user', content }] },
    engine_response: { choices: [{ message: { role: 'assistant', content: 'ok' } }] },
    finish_reason: 'stop',
    prompt_token_ids: prompt,
    completion_token_ids: sampled,
    logprobs: sampled.map((_, i) => -0.5 * (i + 1)),
    top_logprobs: sampled.map((id) => [
      { token_id: id, token: `token_id:${id}`, logprob: -0.1 },
      { token_id: id + 1, token: `token_id:${id + 1}`, logprob: -2.5 },
    ]),
    render: { mode: 'proxy', engine_route: '/v1/completions' },
  };
}

function source(calls: ReplayCall[]): ReplaySource {
  return {
    path: '/x/session.rollout.json',
    rolloutDir: null,
    session_id: 's1',
    metadata: {},
    capture_level: 'tokens',
    calls,
    reward: 1,
    model: 'm',
    token_route: '/v1/completions',
  };
}

/** Decoding for the difference's text only: each id as its number. */
const renderer = { decode: (ids: readonly number[]) => ids.join(' ') } as unknown as Renderer;

test('the recorded answer reads back through the proxy readers of both token routes as recorded', () => {
  const c = call(0, 'hi', [1, 2, 3], [40, 41, 42]);
  const completions = readCompletionsAnswer(recordedTokenAnswer('/v1/completions', c, [1, 2, 3], 'm'));
  assert.deepEqual(completions.ids, [40, 41, 42]);
  assert.deepEqual(completions.logprobs, [-0.5, -1, -1.5]);
  assert.deepEqual(completions.top?.[1], [
    { id: 41, logprob: -0.1 },
    { id: 42, logprob: -2.5 },
  ]);
  assert.deepEqual(completions.echoedPrompt, [1, 2, 3]);
  assert.equal(completions.finish, 'stop');
  const generate = readGenerateAnswer(recordedTokenAnswer('/generate', { ...c, finish_reason: 'length' }, [1, 2, 3], 'm'));
  assert.deepEqual(generate.ids, [40, 41, 42]);
  assert.deepEqual(generate.logprobs, [-0.5, -1, -1.5]);
  assert.deepEqual(generate.top?.[0], [
    { id: 40, logprob: -0.1 },
    { id: 41, logprob: -2.5 },
  ]);
  assert.equal(generate.finish, 'length');
});

test('firstIdDifference: the first differing position, a shorter list differs where it ends', () => {
  assert.equal(firstIdDifference([1, 2, 3], [1, 2, 3]), -1);
  assert.equal(firstIdDifference([1, 2, 3], [1, 9, 3]), 1);
  assert.equal(firstIdDifference([1, 2, 3], [1, 2]), 2);
});

async function ask(engine: RecordedTokenEngine, content: string, prompt: number[]) {
  const signal = new AbortController().signal;
  engine.expect(signal, { model: 'm', messages: [{ role: 'user', content }] });
  try {
    return await engine.post('/v1/completions', { model: 'm', prompt }, signal);
  } finally {
    engine.forget(signal);
  }
}

test('the same messages and ids are exact; other ids for the same messages halt at the first differing position', async () => {
  const engine = new RecordedTokenEngine(source([call(0, 'hi', [1, 2, 3], [40]), call(1, 'go on', [1, 2, 3, 40, 5, 6], [50])]), renderer);
  const first = await ask(engine, 'hi', [1, 2, 3]);
  assert.equal(first.status, 200);
  assert.deepEqual(readCompletionsAnswer(first.body).ids, [40]);
  const second = await ask(engine, 'go on', [1, 2, 3, 40, 5, 7]);
  assert.equal(second.status, 400);
  assert.deepEqual(
    engine.calls.map((c) => c.level),
    ['exact', 'none'],
  );
  assert.equal(engine.halt?.difference?.path, 'prompt_token_ids[5]');
  assert.equal(engine.halt?.difference?.recorded, 'token 6 "6" in "1 2 3 40 5 6"');
  assert.match(String(engine.halt?.difference?.replayed), /^token 7 "7" in "1 2 3 40 5 7"$/);
  assert.deepEqual(engine.unasked, [1], 'the halted call stays unanswered');
});

test('tolerated messages (a date) with other ids stay tolerated and get the recorded answer', async () => {
  const engine = new RecordedTokenEngine(source([call(0, 'today is 2026-01-05', [1, 2, 3], [40])]), renderer);
  const reply = await ask(engine, 'today is 2026-12-02', [1, 2, 4]);
  assert.equal(reply.status, 200);
  assert.deepEqual(readCompletionsAnswer(reply.body).ids, [40]);
  assert.equal(engine.calls[0]?.level, 'tolerated');
  assert.deepEqual(engine.calls[0]?.tolerated[0]?.rules, ['date']);
});

test('a post without a chat request tied to it is not the token route of a replay call', async () => {
  const engine = new RecordedTokenEngine(source([call(0, 'hi', [1, 2, 3], [40])]), renderer);
  const reply = await engine.post('/v1/completions', { model: 'm', prompt: [1, 2, 3] });
  assert.equal(reply.status, 404);
  assert.equal(engine.calls.length, 0);
});
