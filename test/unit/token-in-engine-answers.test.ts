// Reading token-route answers defensively (vLLM /v1/completions, SGLang /generate), and reading a
// rendered ChatML prompt back into messages for the embedded engine's policy.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { cutPromptEcho, readCompletionsAnswer, readGenerateAnswer, TokenInEngineError } from '../../src/capture/render/token-engine.js';
import { parseChatMlPrompt } from '../../src/engine/prompt-messages.js';

test('vLLM completions: ids, logprobs, top alternatives and the prompt echo; a token naming another id voids the logprobs', () => {
  const body = {
    choices: [
      {
        token_ids: [11, 12, 151645],
        prompt_token_ids: [1, 2, 3],
        finish_reason: 'stop',
        logprobs: {
          tokens: ['token_id:11', 'token_id:12', 'token_id:151645'],
          token_logprobs: [-0.1, -0.2, -0.3],
          top_logprobs: [{ 'token_id:11': -0.1, 'token_id:99': -2 }, null, {}],
        },
      },
    ],
  };
  const a = readCompletionsAnswer(body);
  assert.deepEqual(a.ids, [11, 12, 151645]);
  assert.deepEqual(a.logprobs, [-0.1, -0.2, -0.3]);
  assert.deepEqual(a.top?.[0], [
    { id: 11, logprob: -0.1 },
    { id: 99, logprob: -2 },
  ]);
  assert.deepEqual(a.echoedPrompt, [1, 2, 3]);
  assert.equal(a.finish, 'stop');
  const wrong = structuredClone(body);
  wrong.choices[0]!.logprobs.tokens[1] = 'token_id:13';
  assert.equal(readCompletionsAnswer(wrong).logprobs, null);
  const noEcho = structuredClone(body) as { choices: Record<string, unknown>[] };
  delete noEcho.choices[0]!.prompt_token_ids;
  assert.equal(readCompletionsAnswer(noEcho).echoedPrompt, null);
  assert.throws(() => readCompletionsAnswer({ choices: [{ text: 'hi' }] }), TokenInEngineError);
  assert.throws(() => readCompletionsAnswer({ error: 'x' }), TokenInEngineError);
});

test('SGLang generate: output_ids and (logprob, id, text) tuples; finish reason objects', () => {
  const a = readGenerateAnswer({
    output_ids: [5, 6],
    meta_info: {
      output_token_logprobs: [
        [-0.5, 5, null],
        [-0.25, 6, null],
      ],
      finish_reason: { type: 'length', length: 2 },
    },
  });
  assert.deepEqual([a.ids, a.logprobs, a.finish], [[5, 6], [-0.5, -0.25], 'length']);
  const mismatch = readGenerateAnswer({
    output_ids: [5, 6],
    meta_info: {
      output_token_logprobs: [
        [-0.5, 5, null],
        [-0.25, 7, null],
      ],
    },
  });
  assert.equal(mismatch.logprobs, null);
  assert.deepEqual(readGenerateAnswer([{ output_ids: [1], meta_info: {} }]).ids, [1]);
  assert.throws(() => readGenerateAnswer({ text: 'x' }), TokenInEngineError);
});

test('a rendered Qwen3 prompt reads back into messages and tools', () => {
  const tool = { type: 'function', function: { name: 'bash', parameters: { type: 'object' } } };
  const text =
    '<|im_start|>system\nBe careful.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' +
    `You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n${JSON.stringify(tool)}\n</tools>\n\nFor each function call, ...<|im_end|>\n` +
    '<|im_start|>user\nCount lines.<|im_end|>\n' +
    '<|im_start|>assistant\n<think>\nlist first\n</think>\n\nLooking.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call><|im_end|>\n' +
    '<|im_start|>user\n<tool_response>\na.txt\n</tool_response>\n<tool_response>\nb.txt\n</tool_response><|im_end|>\n<|im_start|>assistant\n';
  const conv = parseChatMlPrompt(text)!;
  assert.deepEqual(conv.tools, [tool]);
  assert.deepEqual(
    conv.messages.map((m) => m.role),
    ['system', 'user', 'assistant', 'tool', 'tool'],
  );
  assert.equal(conv.messages[0]!.content, 'Be careful.');
  assert.equal(conv.messages[2]!.reasoning_content, 'list first');
  assert.equal(conv.messages[2]!.tool_calls![0]!.function.name, 'bash');
  assert.deepEqual(
    conv.messages.slice(3).map((m) => m.content),
    ['a.txt', 'b.txt'],
  );
  assert.equal(parseChatMlPrompt('plain text'), null);
});

test('the prompt echo is cut out of an answer as bytes and compared with the ids sent', () => {
  const sent = Buffer.from('151644,872,198');
  const body = `{"choices":[{"index":0,"token_ids":[9,151645],"prompt_token_ids":[${sent}],"text":"say \\"prompt_token_ids\\":[1] é"}]}`;
  const exact = cutPromptEcho(Buffer.from(body), sent);
  assert.equal(exact.echo, sent, 'the ids as sent: the sent bytes themselves');
  const parsed = JSON.parse(exact.rest) as { choices: { prompt_token_ids: unknown; token_ids: number[]; text: string }[] };
  assert.equal(parsed.choices[0]!.prompt_token_ids, null);
  assert.deepEqual(parsed.choices[0]!.token_ids, [9, 151645]);
  assert.equal(parsed.choices[0]!.text, 'say "prompt_token_ids":[1] é', 'the rest is decoded as UTF-8');
  // Python's separators, or other ids than were sent: cut out all the same, for the caller to compare.
  assert.equal(cutPromptEcho(Buffer.from(body.replace(`${sent}`, '151644, 872, 198')), sent).echo, '151644, 872, 198');
  assert.equal(cutPromptEcho(Buffer.from(body.replace(`${sent}`, '151644,872,199')), sent).echo, '151644,872,199');
  // A longer echo that starts with the ids sent is not taken for them.
  assert.equal(cutPromptEcho(Buffer.from(body.replace(`${sent}`, `${sent},7`)), sent).echo, `${sent},7`);
  // No echo, or one that is not a list of ids: nothing is cut.
  const none = '{"choices":[{"token_ids":[1]}]}';
  assert.deepEqual(cutPromptEcho(Buffer.from(none), sent), { rest: none, echo: null });
  const odd = '{"prompt_token_ids":["a"],"choices":[]}';
  assert.deepEqual(cutPromptEcho(Buffer.from(odd), sent), { rest: odd, echo: null });
});

test('an answer read as the chunks it arrived in is cut as the joined bytes are, wherever the chunks end', () => {
  const sent = Buffer.from('151644,872,198,' + '13,'.repeat(40) + '7');
  const body = Buffer.from(
    `{"choices":[{"index":0,"text":"é ✓","token_ids":[9,151645],"prompt_token_ids":[${sent}],"finish_reason":"stop"}]}`,
  );
  const variants = [
    body,
    Buffer.from(body.toString().replace(`${sent}`, `${sent},7`)),
    Buffer.from(body.toString().replace(`${sent}`, '151644, 872')),
    Buffer.from(body.toString().replace('"prompt_token_ids"', '"prompt_token_idz"')),
  ];
  for (const whole of variants) {
    const expected = cutPromptEcho(whole, sent);
    for (let a = 0; a <= whole.length; a++) {
      const b = Math.min(whole.length, a + 1 + ((a * 7) % 23));
      const parts = [whole.subarray(0, a), whole.subarray(a, b), whole.subarray(b)];
      const got = cutPromptEcho(parts, sent);
      assert.equal(got.rest, expected.rest, `cut at ${a} and ${b}`);
      assert.deepEqual(got.echo, expected.echo, `cut at ${a} and ${b}`);
    }
  }
});
