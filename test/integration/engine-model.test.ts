// The tiny model: real Qwen3 tokenizer and chat template inside a freshly built GGUF.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { ChatResponse } from '../../src/capture/types.js';
import type { EmbeddedEngine } from '../../src/engine/embedded-engine.js';
import { ensureTinyModel, IM_END, QWEN3_SPECIAL_TOKENS, TINY_MODEL_NAME } from '../../src/engine/tiny-model.js';
import { bashTool } from './helpers.js';
import { chat, post, startTestEngine } from './engine-fixture.js';

let lab: EmbeddedEngine;
before(async () => {
  lab = await startTestEngine();
});
after(() => lab.close());

const tokenize = async (prompt: string) => ((await post(lab.url, '/tokenize', { prompt })).body as { tokens: number[] }).tokens;

test('tokenization equals Qwen3 for known strings', async () => {
  assert.deepEqual(await tokenize('Hello, who are you?'), [9707, 11, 879, 525, 498, 30]);
  assert.deepEqual(await tokenize('<|im_start|>user\nHi<|im_end|>\n'), [151644, 872, 198, 13048, 151645, 198]);
  assert.deepEqual(await tokenize('<tool_call>\n</tool_call><think>\n\n</think>\n\n'), [151657, 198, 151658, 151667, 271, 151668, 271]);
});

test('GGUF carries the Qwen3 architecture, added tokens and end of turn', async () => {
  const { readGgufFileInfo } = await import('node-llama-cpp');
  const info = await readGgufFileInfo(lab.modelPath);
  const md = info.metadata as unknown as {
    general: { architecture: string };
    tokenizer: { chat_template: string; ggml: { tokens: string[]; eos_token_id: number; pre: string } };
  };
  assert.equal(md.general.architecture, 'qwen3');
  assert.equal(md.tokenizer.ggml.eos_token_id, IM_END);
  assert.equal(md.tokenizer.ggml.pre, 'qwen2');
  assert.equal(md.tokenizer.ggml.tokens.length, 151936);
  for (const [id, text] of QWEN3_SPECIAL_TOKENS) assert.equal(md.tokenizer.ggml.tokens[id], text);
  assert.match(md.tokenizer.chat_template, /<\|im_start\|>/);
});

test('the chat prompt is the Qwen3 template rendered and tokenized', async () => {
  const res = await chat(lab.url, {
    messages: [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hello, who are you?' },
    ],
    max_tokens: 1,
    return_token_ids: true,
  });
  const expected = '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello, who are you?<|im_end|>\n<|im_start|>assistant\n';
  assert.deepEqual(res.prompt_token_ids, await tokenize(expected));
  assert.equal(res.model, TINY_MODEL_NAME);

  const thinkOff = await chat(lab.url, {
    messages: [{ role: 'user', content: 'Hi' }],
    max_tokens: 1,
    return_token_ids: true,
    chat_template_kwargs: { enable_thinking: false },
  });
  assert.deepEqual(
    thinkOff.prompt_token_ids,
    await tokenize('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n'),
  );

  const withTools = (await post(lab.url, '/tokenize', { messages: [{ role: 'user', content: 'Hi' }], tools: [bashTool] })).body as {
    tokens: number[];
  };
  const toolsPrompt =
    '<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n' +
    '{"type": "function", "function": {"name": "bash", "description": "Run a shell command", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}' +
    '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' +
    '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n';
  assert.deepEqual(withTools.tokens, await tokenize(toolsPrompt));
});

test('sampling is peaky and ends with <|im_end|> within a few dozen tokens', async () => {
  const lengths: number[] = [];
  for (let seed = 0; seed < 6; seed++) {
    const res: ChatResponse = await chat(lab.url, {
      messages: [{ role: 'user', content: `Tell me something, take ${seed}.` }],
      seed,
      temperature: 1,
      max_tokens: 60,
      logprobs: true,
      top_logprobs: 2,
      return_token_ids: true,
    });
    const choice = res.choices[0]!;
    assert.equal(choice.finish_reason, 'stop', `seed ${seed}: ${JSON.stringify(choice.message.content)}`);
    assert.equal(choice.token_ids!.at(-1), IM_END, 'token_ids include the final stop token');
    assert.equal(choice.logprobs!.content!.length, choice.token_ids!.length);
    lengths.push(choice.token_ids!.length);
    // Peaky: the top token at each position usually carries most of the mass.
    const top1 = choice.logprobs!.content!.map((e) => Math.exp(e.top_logprobs![0]!.logprob));
    assert.ok(top1.reduce((a, b) => a + b, 0) / top1.length > 0.4, `mean top-1 probability ${top1}`);
  }
  assert.ok(Math.max(...lengths) <= 60);
  const greedy = await chat(lab.url, { messages: [{ role: 'user', content: 'Hi' }], temperature: 0, max_tokens: 40 });
  assert.equal(greedy.choices[0]!.message.content, 'The quick brown fox jumps over the lazy dog.');
  assert.equal(greedy.choices[0]!.finish_reason, 'stop');
});

test('the build is deterministic: a fresh build for the same seed has the same bytes', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'hl-tiny-rebuild-'));
  try {
    const fresh = await ensureTinyModel({ seed: 0, dataDir: dir });
    assert.equal(fresh.built, true);
    const again = await ensureTinyModel({ seed: 0, dataDir: dir });
    assert.deepEqual([again.built, again.path], [false, fresh.path], 'second call uses the cache');
    const sha = (p: string) => createHash('sha256').update(readFileSync(p)).digest('hex');
    assert.equal(sha(fresh.path), sha(lab.modelPath));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
