// Token-in mode's second family (#25): Qwen3-Coder / Qwen3.5 (vLLM `--tool-call-parser qwen3_coder`),
// ChatML turns with tool calls written as XML parameters. Tested on the real Qwen3-Coder chat template
// (llama.cpp's copy, read from the source node-llama-cpp ships) over the real Qwen2 vocabulary (the
// tiny model's): detection, the round trip render -> sampled ids -> parsed tool call with typed
// arguments, a failed block answered as text, and a bridged tool loop whose full render agrees.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Bridge } from '../../src/capture/render/bridge.js';
import { detectFamily } from '../../src/capture/render/families.js';
import { InThreadRenderer, parseXmlToolCall, Renderer } from '../../src/capture/render/renderer.js';
import type { CallRecord, ChatMessage, ChatTool } from '../../src/capture/types.js';
import { readFromLlamaCppBundle } from '../../src/engine/llama-source.js';
import { ensureTinyModel, IM_END } from '../../src/engine/tiny-model.js';

const DATA_DIR = process.env.HARNESS_LAB_DATA_DIR ?? join(tmpdir(), 'harness-lab-test-data');
const TEMPLATE = 'models/templates/Qwen3-Coder.jinja';
let dir: string;
let coder: Renderer;
before(async () => {
  const qwen = await Renderer.load((await ensureTinyModel({ dataDir: DATA_DIR })).path);
  const template = (await readFromLlamaCppBundle([TEMPLATE])).get(TEMPLATE)!.toString('utf8');
  // A model folder as vLLM reads one: the Qwen2 vocabulary and the Qwen3-Coder template.
  dir = mkdtempSync(join(tmpdir(), 'hl-qwen3-coder-'));
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(qwen.files.tokenizerJson));
  writeFileSync(
    join(dir, 'tokenizer_config.json'),
    JSON.stringify({ chat_template: template, eos_token: '<|im_end|>', bos_token: null, tokenizer_class: 'Qwen2Tokenizer' }),
  );
  coder = await Renderer.load(dir);
});
after(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const tools: ChatTool[] = [
  {
    type: 'function',
    function: {
      name: 'bash',
      description: 'Run a shell command',
      parameters: {
        type: 'object',
        properties: {
          command: { type: 'string' },
          timeout: { type: 'integer' },
          flags: { type: 'array' },
          verbose: { type: 'boolean' },
        },
      },
    },
  },
];
const task: ChatMessage[] = [
  { role: 'system', content: 'You are a careful agent.' },
  { role: 'user', content: 'How many lines does notes.txt have?' },
];
const args = { command: 'wc -l notes.txt\necho "done"', timeout: 30, flags: ['-a', '-l'], verbose: true };

/** The sampled ids of an assistant turn as the template writes it (after the generation prompt), closed by <|im_end|>. */
function sampledTurn(message: ChatMessage): number[] {
  const prompt = coder.renderText(task, { tools });
  const full = coder.renderText([...task, message], { tools, addGenerationPrompt: false });
  assert.ok(full.startsWith(prompt));
  const completion = full.slice(prompt.length).replace(/\n$/, '');
  assert.ok(completion.endsWith('<|im_end|>'));
  return coder.encode(completion);
}

describe('qwen3_coder family', () => {
  test('detected from the template, parsed with stop ids and markers', () => {
    assert.equal(coder.family.name, 'qwen3_coder');
    assert.equal(coder.family.supported, true);
    assert.equal(detectFamily(coder.files.chatTemplate).toolParser, 'qwen3_coder');
    assert.ok(coder.stopIds.includes(IM_END));
  });

  test('round trip: a rendered tool call parses back to the same call, arguments typed by the schema', () => {
    const message: ChatMessage = {
      role: 'assistant',
      content: 'Counting.',
      tool_calls: [{ id: 'a', type: 'function', function: { name: 'bash', arguments: JSON.stringify(args) } }],
    };
    const ids = sampledTurn(message);
    assert.equal(ids[ids.length - 1], IM_END);
    const parsed = coder.parseAnswer(ids, { tools, parseToolCalls: true });
    assert.equal(parsed.toolCallParse, 'ok');
    assert.equal(parsed.content, 'Counting.');
    assert.equal(parsed.toolCalls.length, 1);
    assert.equal(parsed.toolCalls[0]!.function.name, 'bash');
    assert.deepEqual(JSON.parse(parsed.toolCalls[0]!.function.arguments), args);
  });

  test('typing and refusals of the XML body', () => {
    assert.deepEqual(parseXmlToolCall('<function=f>\n<parameter=n>\n7\n</parameter>\n<parameter=x>\nnull\n</parameter>\n</function>', []), {
      name: 'f',
      arguments: { n: '7', x: null },
    });
    assert.deepEqual(parseXmlToolCall('<function=bash>\n<parameter=timeout>\nsoon\n</parameter>\n</function>', tools), {
      name: 'bash',
      arguments: { timeout: 'soon' },
    });
    assert.equal(parseXmlToolCall('{"name": "bash", "arguments": {}}', tools), null);
    assert.equal(parseXmlToolCall('<function=bash>\nstray text\n</function>', tools), null);
    const bad = [...coder.encode('<tool_call>\n{"name": "bash"}\n</tool_call>'), IM_END];
    const parsed = coder.parseAnswer(bad, { tools, parseToolCalls: true });
    assert.equal(parsed.toolCallParse, 'failed');
    assert.deepEqual(parsed.toolCallStatuses, ['malformed_structure']);
    assert.match(parsed.content!, /<tool_call>/);
  });

  test('a tool loop bridges onto the sampled ids, and a full render of the echoed call agrees', async () => {
    const bridge = new Bridge(new InThreadRenderer(coder), { fullRenderCheck: 'always' });
    const owner = {};
    const p0 = await bridge.plan(owner, [], { messages: task, tools, kwargs: undefined });
    assert.equal(p0.info.kind, 'full');
    assert.equal(p0.info.family, 'qwen3_coder');
    const sampled = sampledTurn({
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'a', type: 'function', function: { name: 'bash', arguments: JSON.stringify(args) } }],
    });
    const parsed = coder.parseAnswer(sampled, { tools, parseToolCalls: true });
    const answer: ChatMessage = { role: 'assistant', content: parsed.content, tool_calls: parsed.toolCalls };
    const r0 = {
      call_id: 'call0',
      index: 0,
      error: null,
      findings: [],
      engine_request: { messages: task, tools },
      engine_response: { choices: [{ index: 0, finish_reason: 'tool_calls', message: answer }] },
      prompt_token_ids: p0.promptIds,
      completion_token_ids: sampled,
      render: { mode: 'proxy', kind: 'full' },
    } as unknown as CallRecord;
    // The harness echoes the call with its own argument spacing and a new id.
    const echoed: ChatMessage = {
      role: 'assistant',
      content: null,
      tool_calls: [
        {
          id: 'h1',
          type: 'function',
          function: { name: 'bash', arguments: JSON.stringify(JSON.parse(parsed.toolCalls[0]!.function.arguments), null, 2) },
        },
      ],
    };
    const p1 = await bridge.plan(owner, [r0], {
      messages: [...task, echoed, { role: 'tool', tool_call_id: 'h1', content: '3 notes.txt' }],
      tools,
      kwargs: undefined,
    });
    assert.equal(p1.info.kind, 'bridge');
    // The record reads the prompt it had (p1 grew p0's array in place).
    const end0 = [...r0.prompt_token_ids!, ...sampled];
    assert.deepEqual(p1.promptIds.slice(0, end0.length), end0);
    assert.equal(
      coder.decode(p1.promptIds.slice(end0.length)),
      '\n<|im_start|>user\n<tool_response>\n3 notes.txt\n</tool_response>\n<|im_end|>\n<|im_start|>assistant\n',
    );
    assert.equal(p1.info.full_render!.equal, true);
  });
});
