// The HTTP surface in vLLM's shapes: what the capture proxy sends and reads, streaming, errors.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { clearTokenTextCache, fetchTokenTexts } from '../../src/capture/token-text.js';
import type { ChatResponse } from '../../src/capture/types.js';
import type { EmbeddedEngine } from '../../src/engine/embedded-engine.js';
import { IM_END } from '../../src/engine/tiny-model.js';
import { sseFrames } from './helpers.js';
import { CAPTURE_FIELDS, chat, post, startTestEngine } from './engine-fixture.js';

let lab: EmbeddedEngine;
before(async () => {
  lab = await startTestEngine();
});
after(() => lab.close());

const user = (content: string) => [{ role: 'user', content }];

test('distributions come straight from the addon (the fast path on the pinned node-llama-cpp)', () => {
  assert.ok(
    lab.runtime.usesFlatProbabilities,
    'node-llama-cpp internals changed: distributions fall back to its 152k-entry Maps (about 3x slower)',
  );
});

test('the capture probe gets prompt ids, sampled ids and aligned token_id:N logprobs', async () => {
  const res = await chat(lab.url, {
    model: lab.engine.modelName,
    messages: user('Reply with the single word: ok'),
    max_tokens: 8,
    temperature: 0,
    logprobs: true,
    top_logprobs: 0,
    return_token_ids: true,
    return_tokens_as_token_ids: true,
  });
  const choice = res.choices[0]!;
  assert.equal(res.object, 'chat.completion');
  assert.ok(res.prompt_token_ids!.length > 5 && res.prompt_token_ids![0] === 151644);
  assert.equal(choice.token_ids!.length, 8);
  assert.equal(choice.finish_reason, 'length');
  const content = choice.logprobs!.content!;
  assert.equal(content.length, choice.token_ids!.length);
  content.forEach((e, i) => {
    assert.equal(e.token, `token_id:${choice.token_ids![i]}`);
    assert.ok(typeof e.logprob === 'number' && e.logprob <= 0 && e.logprob > -50);
    assert.deepEqual(e.top_logprobs, [], 'top_logprobs: 0 still gives entries, with no alternatives');
    assert.ok(Array.isArray(e.bytes) && e.bytes.length > 0);
  });
  assert.deepEqual(res.usage, {
    prompt_tokens: res.prompt_token_ids!.length,
    completion_tokens: 8,
    total_tokens: res.prompt_token_ids!.length + 8,
    prompt_tokens_details: null,
  });
  assert.equal(Buffer.from(content.flatMap((e) => e.bytes!)).toString('utf8'), choice.message.content);
});

test('without the capture fields there are no ids and no logprobs; text tokens otherwise', async () => {
  const plain = await chat(lab.url, { messages: user('hi'), max_tokens: 3, seed: 1 });
  assert.equal(plain.prompt_token_ids, null);
  assert.equal(plain.choices[0]!.token_ids, null);
  assert.equal(plain.choices[0]!.logprobs, null);
  const text = await chat(lab.url, { messages: user('hi'), max_tokens: 3, seed: 1, logprobs: true, top_logprobs: 3 });
  const entry = text.choices[0]!.logprobs!.content![0]!;
  assert.equal(entry.token, 'The');
  assert.equal(entry.top_logprobs!.length, 3);
  assert.equal(entry.top_logprobs![0]!.token, 'The');
  assert.ok(entry.top_logprobs![0]!.logprob >= entry.top_logprobs![1]!.logprob);
});

const gap = (res: ChatResponse) => {
  const top = res.choices[0]!.logprobs!.content![0]!.top_logprobs!;
  return top[0]!.logprob - top[1]!.logprob;
};
const modeProbe = async (extra: Record<string, unknown>) => {
  const at = (temperature: number) =>
    chat(lab.url, { messages: user('Reply with exactly: hello'), max_tokens: 1, logprobs: true, top_logprobs: 5, temperature, ...extra });
  const g1 = gap(await at(1));
  const g2 = gap(await at(2));
  return { g1, ratio: g2 / g1 };
};

test('processed logprobs by default: the T=2/T=1 top-gap ratio is 0.5 (the proxy probe says processed)', async () => {
  const { g1, ratio } = await modeProbe({});
  assert.ok(g1 >= 0.5, `gap at T=1 is ${g1}; the probe needs >= 0.5`);
  assert.ok(Math.abs(ratio - 0.5) < 0.01, `ratio ${ratio}`);
});

test('raw logprobs on request: ratio 1, and they differ from processed ones under temperature', async () => {
  const { ratio } = await modeProbe({ logprobs_mode: 'raw' });
  assert.ok(Math.abs(ratio - 1) < 1e-6, `ratio ${ratio}`);
  const req = { messages: user('hi'), max_tokens: 4, seed: 5, temperature: 0.7, ...CAPTURE_FIELDS };
  const processed = await chat(lab.url, req);
  const raw = await chat(lab.url, { ...req, logprobs_mode: 'raw' });
  assert.deepEqual(raw.choices[0]!.token_ids, processed.choices[0]!.token_ids, 'the mode changes reporting, not sampling');
  const p = processed.choices[0]!.logprobs!.content![0]!.logprob!;
  const r = raw.choices[0]!.logprobs!.content![0]!.logprob!;
  assert.ok(Math.abs(p - r) > 1e-3, `processed ${p} vs raw ${r}`);
  const neutral = await chat(lab.url, { ...req, temperature: 1 });
  const neutralRaw = await chat(lab.url, { ...req, temperature: 1, logprobs_mode: 'raw' });
  assert.ok(
    Math.abs(neutral.choices[0]!.logprobs!.content![0]!.logprob! - neutralRaw.choices[0]!.logprobs!.content![0]!.logprob!) < 1e-5,
    'at T=1 without truncation they agree',
  );
});

test('top_k truncation shows in processed logprobs: the kept tokens renormalise', async () => {
  const req = { messages: user('hi'), max_tokens: 1, temperature: 1, logprobs: true, top_logprobs: 3 };
  const full = (await chat(lab.url, req)).choices[0]!.logprobs!.content![0]!.top_logprobs!;
  const k2 = (await chat(lab.url, { ...req, top_k: 2 })).choices[0]!.logprobs!.content![0]!.top_logprobs!;
  const mass = Math.exp(full[0]!.logprob) + Math.exp(full[1]!.logprob);
  assert.ok(Math.abs(k2[0]!.logprob - (full[0]!.logprob - Math.log(mass))) < 1e-6);
  assert.equal(k2[2]!.logprob, -9999, "a truncated token reports vLLM's -9999 floor");
});

test('streaming: vLLM chunks with prompt ids first, token_ids deltas, usage, then [DONE]', async () => {
  const body = { messages: user('Say something.'), seed: 11, temperature: 1, max_tokens: 40, ...CAPTURE_FIELDS };
  const whole = await chat(lab.url, body);
  const r = await post(lab.url, '/v1/chat/completions', { ...body, stream: true, stream_options: { include_usage: true } });
  assert.equal(r.status, 200);
  const frames = sseFrames(r.text);
  assert.equal(frames.at(-1), 'data: [DONE]');
  const chunks = frames
    .slice(0, -1)
    .map((f) => JSON.parse(f.replace(/^data: /, '')) as Record<string, unknown> & { choices: Record<string, unknown>[] });
  assert.deepEqual(chunks[0]!.prompt_token_ids, whole.prompt_token_ids);
  assert.deepEqual(chunks[0]!.choices[0]!.delta, { role: 'assistant', content: '' });
  const ids = chunks.flatMap((c) => (c.choices[0]?.token_ids as number[] | undefined) ?? []);
  assert.deepEqual(ids, whole.choices[0]!.token_ids, 'same seed, same tokens, streamed or not');
  const logprobs = chunks.flatMap((c) =>
    ((c.choices[0]?.logprobs as { content: { logprob: number }[] } | null)?.content ?? []).map((e) => e.logprob),
  );
  assert.deepEqual(
    logprobs,
    whole.choices[0]!.logprobs!.content!.map((e) => e.logprob),
  );
  const text = chunks.map((c) => (c.choices[0]?.delta as { content?: string } | undefined)?.content ?? '').join('');
  assert.equal(text, whole.choices[0]!.message.content);
  const finals = chunks.filter((c) => c.choices[0]?.finish_reason);
  assert.equal(finals.length, 1);
  assert.equal(finals[0]!.choices[0]!.finish_reason, whole.choices[0]!.finish_reason);
  assert.deepEqual(chunks.at(-1)!.usage, whole.usage);
  assert.equal(ids.at(-1), IM_END);
});

test('stop strings cut the text and finish with stop', async () => {
  const res = await chat(lab.url, { messages: user('hi'), temperature: 0, stop: [' fox'], max_tokens: 30, return_token_ids: true });
  assert.equal(res.choices[0]!.message.content, 'The quick brown');
  assert.equal(res.choices[0]!.finish_reason, 'stop');
  assert.equal(res.choices[0]!.token_ids!.length, 4, 'ids run through the token that completed the stop string');
});

test('/v1/models, /health and /tokenize', async () => {
  const models = (await (await fetch(`${lab.url}/v1/models`)).json()) as { data: { id: string; max_model_len: number }[] };
  assert.deepEqual(
    models.data.map((m) => m.id),
    [lab.engine.modelName],
  );
  assert.equal(models.data[0]!.max_model_len, 32768);
  assert.equal((await fetch(`${lab.url}/health`)).status, 200);
  const tok = await post(lab.url, '/tokenize', { messages: user('hi') });
  const res = await chat(lab.url, { messages: user('hi'), max_tokens: 1, return_token_ids: true });
  assert.deepEqual((tok.body as { tokens: number[] }).tokens, res.prompt_token_ids);
});

test("POST /detokenize answers vLLM's {prompt}, special tokens written out, and the proxy's token-text reader uses it", async () => {
  const tok = (await post(lab.url, '/tokenize', { messages: user('hi there') })).body as { tokens: number[] };
  const detok = await post(lab.url, '/detokenize', { model: lab.engine.modelName, tokens: tok.tokens });
  assert.equal(detok.status, 200);
  const prompt = (detok.body as { prompt: string }).prompt;
  assert.match(prompt, /^<\|im_start\|>user\nhi there<\|im_end\|>/);
  const round = (await post(lab.url, '/tokenize', { prompt })).body as { tokens: number[] };
  assert.deepEqual(round.tokens, tok.tokens, 'detokenize then tokenize gives the ids back');
  const bad = await post(lab.url, '/detokenize', { tokens: [10_000_000] });
  assert.equal(bad.status, 400);
  assert.match(JSON.stringify(bad.body), /outside the vocabulary/);
  clearTokenTextCache();
  const texts = await fetchTokenTexts(lab.url, tok.tokens, { model: lab.engine.modelName });
  assert.equal(texts.problem, null);
  assert.deepEqual(texts.missing, []);
  assert.equal(tok.tokens.map((id) => texts.texts[id]).join(''), prompt, 'per-token texts join to the prompt');
});

test('bad requests get vLLM/OpenAI error bodies naming the problem', async () => {
  const cases: [unknown, number, RegExp][] = [
    ['{not json', 400, /not valid JSON/],
    [{ messages: [] }, 400, /messages must not be empty/],
    [{ messages: user('x'), n: 2 }, 400, /n must be 1/],
    [{ messages: user('x'), model: 'gpt-4o' }, 404, /`gpt-4o` does not exist/],
    [{ messages: user('x'), presence_penalty: 0.5 }, 400, /presence_penalty=0\.5 is not supported/],
    [{ messages: user('x'), max_tokens: 100000 }, 400, /maximum context length is 32768/],
    [{ messages: user('x'), temperature: -1 }, 400, /temperature/],
    [{ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:' } }] }] }, 400, /image_url' is not supported/],
  ];
  for (const [body, status, message] of cases) {
    const r = await post(lab.url, '/v1/chat/completions', body);
    assert.equal(r.status, status, r.text);
    const err = (r.body as { error: { message: string; code: number; type: string } }).error;
    assert.match(err.message, message);
    assert.equal(err.code, status);
  }
  assert.equal((await fetch(`${lab.url}/v1/chat/completions`)).status, 405);
  assert.equal((await fetch(`${lab.url}/v1/nothing`)).status, 404);
});
