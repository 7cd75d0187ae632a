// The numbers are the model's: a sampled token's logprob equals the teacher-forced logprob of the same
// token in the same context, seeds reproduce, and multi-turn prompts extend earlier prompt+completion.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { ChatMessage, ChatResponse } from '../../src/capture/types.js';
import type { EngineChatRequest } from '../../src/engine/chat-request.js';
import type { EmbeddedEngine } from '../../src/engine/embedded-engine.js';
import { LlamaEngine } from '../../src/engine/llama-engine.js';
import { ScriptedPolicy } from '../../src/engine/policy.js';
import { IM_END } from '../../src/engine/tiny-model.js';
import { bashTool } from './helpers.js';
import { CAPTURE_FIELDS, chat, startTestEngine } from './engine-fixture.js';

let lab: EmbeddedEngine;
before(async () => {
  lab = await startTestEngine();
});
after(() => lab.close());

/** An engine on the same loaded model whose every turn is `text`, scored by teacher forcing. */
const forcing = (turns: unknown[]) =>
  new LlamaEngine({ runtime: lab.runtime, modelName: lab.engine.modelName, policy: ScriptedPolicy.parse({ turns }, 'test') });
const startsWith = (a: readonly number[], prefix: readonly number[]) => prefix.length <= a.length && prefix.every((t, i) => a[i] === t);

for (const sampling of [
  { temperature: 1, top_p: 1, top_k: -1 },
  { temperature: 0.7, top_p: 0.9, top_k: 5 },
]) {
  test(`sampled logprobs equal teacher-forced logprobs of the same tokens (${JSON.stringify(sampling)})`, async () => {
    for (const seed of [3]) {
      const req = {
        messages: [{ role: 'user', content: `Describe a fox, take ${seed}.` }],
        seed,
        max_tokens: 48,
        ...CAPTURE_FIELDS,
        ...sampling,
      };
      const sampled = await chat(lab.url, req);
      const choice = sampled.choices[0]!;
      assert.equal(choice.finish_reason, 'stop');
      const forced = await forcing([{ say: choice.message.content }]).complete(req as EngineChatRequest);
      const f = forced.choices[0]!;
      assert.deepEqual(forced.prompt_token_ids, sampled.prompt_token_ids);
      assert.deepEqual(f.token_ids, choice.token_ids, 'the scripted text tokenizes to the sampled ids');
      const a = choice.logprobs!.content!.map((e) => e.logprob!);
      const b = f.logprobs!.content!.map((e) => e.logprob!);
      a.forEach((lp, i) => assert.ok(Math.abs(lp - b[i]!) < 1e-4, `position ${i}: sampled ${lp}, forced ${b[i]}`));
      assert.deepEqual(
        f.logprobs!.content!.map((e) => e.token),
        choice.logprobs!.content!.map((e) => e.token),
      );
    }
  });
}

test('same seed, same output; other seeds differ', async () => {
  const req = { messages: [{ role: 'user', content: 'Go.' }], temperature: 1, max_tokens: 12, ...CAPTURE_FIELDS };
  const a = await chat(lab.url, { ...req, seed: 42 });
  const b = await chat(lab.url, { ...req, seed: 42 });
  assert.deepEqual(b.choices[0]!.token_ids, a.choices[0]!.token_ids);
  assert.deepEqual(b.choices[0]!.logprobs, a.choices[0]!.logprobs);
  const others = [await chat(lab.url, { ...req, seed: 43 }), await chat(lab.url, { ...req, seed: 44 })];
  assert.ok(others.some((o) => JSON.stringify(o.choices[0]!.token_ids) !== JSON.stringify(a.choices[0]!.token_ids)));
});

test('a second user turn extends the first call: prompt ids ++ completion ids (with <|im_end|>) is a prefix', async () => {
  const messages: ChatMessage[] = [{ role: 'user', content: 'Hello, who are you?' }];
  const first = await chat(lab.url, { messages, seed: 9, ...CAPTURE_FIELDS });
  const c1 = first.choices[0]!;
  assert.equal(c1.token_ids!.at(-1), IM_END);
  messages.push({ role: 'assistant', content: c1.message.content }, { role: 'user', content: 'And then?' });
  const second = await chat(lab.url, { messages, seed: 10, ...CAPTURE_FIELDS });
  const end1 = [...first.prompt_token_ids!, ...c1.token_ids!];
  assert.ok(startsWith(second.prompt_token_ids!, end1), 'second prompt extends first prompt + completion');
  assert.equal(second.prompt_token_ids![end1.length], 198, "the template's newline after <|im_end|> follows");
});

test('a scripted tool loop with reasoning: every call extends the previous one exactly', async () => {
  const engine = forcing([
    { think: 'I should look first.', call: { tool: 'bash', input: 'ls' } },
    {
      say: 'Two files.',
      call: [
        { tool: 'bash', input: 'wc -l a.txt' },
        { tool: 'bash', arguments: { command: 'echo "q" > b.txt' } },
      ],
    },
    { say: 'a.txt has 3 lines.' },
  ]);
  const messages: ChatMessage[] = [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'How many lines in a.txt?' },
  ];
  const responses: ChatResponse[] = [];
  for (let turn = 0; turn < 3; turn++) {
    const res = await engine.complete({ messages, tools: [bashTool], ...CAPTURE_FIELDS } as EngineChatRequest);
    responses.push(res);
    const choice = res.choices[0]!;
    const msg = choice.message;
    // What a vLLM client sends back: content, tool_calls as returned, reasoning under `reasoning`.
    messages.push({
      role: 'assistant',
      content: msg.content ?? null,
      tool_calls: msg.tool_calls,
      ...(msg.reasoning ? { reasoning: msg.reasoning } : {}),
    });
    for (const call of msg.tool_calls ?? [])
      messages.push({ role: 'tool', tool_call_id: call.id, content: `output of ${call.function.arguments}` });
  }
  const [r1, r2, r3] = responses.map((r) => r.choices[0]!);
  assert.equal(r1!.finish_reason, 'tool_calls');
  assert.equal(r1!.message.reasoning, 'I should look first.');
  assert.equal(r1!.message.content, null);
  assert.deepEqual(
    r1!.message.tool_calls!.map((c) => c.function.arguments),
    ['{"command": "ls"}'],
  );
  assert.equal(r2!.finish_reason, 'tool_calls');
  assert.equal(r2!.message.content, 'Two files.');
  assert.deepEqual(
    r2!.message.tool_calls!.map((c) => c.function.arguments),
    ['{"command": "wc -l a.txt"}', '{"command": "echo \\"q\\" > b.txt"}'],
  );
  assert.equal(r3!.finish_reason, 'stop');
  assert.equal(r3!.message.content, 'a.txt has 3 lines.');
  for (let i = 1; i < responses.length; i++) {
    const prev = responses[i - 1]!;
    const end = [...prev.prompt_token_ids!, ...prev.choices[0]!.token_ids!];
    assert.ok(startsWith(responses[i]!.prompt_token_ids!, end), `call ${i + 1} extends call ${i}`);
  }
  for (const r of responses) {
    const c = r.choices[0]!;
    assert.equal(c.logprobs!.content!.length, c.token_ids!.length);
    assert.ok(c.logprobs!.content!.every((e, i) => e.token === `token_id:${c.token_ids![i]}` && e.logprob! < 0 && e.logprob! > -60));
  }
});

test('tool_choice none leaves tool-call text as content', async () => {
  const engine = forcing([{ call: { tool: 'bash', input: 'ls' } }]);
  const res = await engine.complete({
    messages: [{ role: 'user', content: 'x' }],
    tools: [bashTool],
    tool_choice: 'none',
    ...CAPTURE_FIELDS,
  } as EngineChatRequest);
  assert.equal(res.choices[0]!.finish_reason, 'stop');
  assert.match(res.choices[0]!.message.content as string, /^<tool_call>\n\{"name": "bash"/);
});

test('max_tokens truncates a scripted turn with finish_reason length', async () => {
  const res = await forcing([{ say: 'The quick brown fox jumps over the lazy dog.' }]).complete({
    messages: [{ role: 'user', content: 'x' }],
    max_tokens: 3,
    ...CAPTURE_FIELDS,
  } as EngineChatRequest);
  assert.equal(res.choices[0]!.finish_reason, 'length');
  assert.deepEqual(res.choices[0]!.token_ids, [785, 3974, 13876]);
});
