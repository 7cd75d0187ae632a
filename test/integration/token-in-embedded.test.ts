// Token in, token out against the embedded engine: the proxy renders with the GGUF's own tokenizer and
// chat template, bridges each turn onto the exact tokens of the turn it continues, and the engine
// generates from token ids. A policy that reasons before every action, driven through all four
// dialects by their SDKs (streamed and not), each dropping or re-serialising what it echoes, must give
// ONE training sequence per rollout holding every sampled token of every turn.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import { GoogleGenAI, type Content } from '@google/genai';
import OpenAI from 'openai';
import { CaptureProxy } from '../../src/capture/proxy.js';
import type { RolloutDocument } from '../../src/capture/rollout.js';
import type { EmbeddedEngine } from '../../src/engine/embedded-engine.js';
import { ScriptedPolicy } from '../../src/engine/policy.js';
import { IM_END } from '../../src/engine/tiny-model.js';
import { startTestEngine } from './engine-fixture.js';
import { createSession } from './helpers.js';

const TOOL = 'bash|exec|shell';
const REASONING_POLICY = ScriptedPolicy.parse(
  {
    name: 'reason-then-act',
    turns: [
      { think: 'The user wants a line count. First I list the files.', say: 'Let me look.', call: { tool: TOOL, input: 'ls' } },
      { think: 'notes.txt is there; count its lines.', call: { tool: TOOL, arguments: { command: 'wc -l notes.txt', timeout: 10 } } },
      { think: 'wc printed 3.', say: 'notes.txt has 3 lines.' },
    ],
  },
  'inline:reason-then-act',
);
const TASK = 'How many lines does notes.txt have?';
const shellSchema = { type: 'object', properties: { command: { type: 'string' }, timeout: { type: 'number' } }, required: ['command'] };
const toolOutput = (command: string) => (command.includes('wc') ? '3 notes.txt' : 'notes.txt');

let lab: EmbeddedEngine;
let proxy: CaptureProxy;
let dataDir: string;
before(async () => {
  lab = await startTestEngine({ policy: REASONING_POLICY });
  dataDir = mkdtempSync(join(tmpdir(), 'hl-token-in-'));
  // Every bridge compared with a full render (the default samples it), so the drift test sees each turn.
  proxy = await CaptureProxy.start({
    engineUrl: lab.url,
    model: lab.engine.modelName,
    dataDir,
    render: 'proxy',
    fullRenderCheck: 'always',
  });
});
after(async () => {
  await proxy?.close();
  await lab?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

type Driver = (key: string, stream: boolean) => Promise<string>;

/** OpenAI chat: the harness sends back content and tool calls, never the reasoning, and re-serialises arguments compactly. */
const openaiChat: Driver = async (key, stream) => {
  const client = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: key, maxRetries: 0 });
  const tools: OpenAI.ChatCompletionTool[] = [
    { type: 'function', function: { name: 'bash', description: 'Run a shell command', parameters: shellSchema } },
  ];
  const messages: OpenAI.ChatCompletionMessageParam[] = [
    { role: 'system', content: 'You are a careful agent.' },
    { role: 'user', content: TASK },
  ];
  for (let turn = 0; turn < 5; turn++) {
    const message = stream
      ? (await client.chat.completions.stream({ model: 'm', messages, tools }).finalChatCompletion()).choices[0]!.message
      : (await client.chat.completions.create({ model: 'm', messages, tools })).choices[0]!.message;
    const calls = (message.tool_calls ?? []).filter((c) => c.type === 'function');
    messages.push({
      role: 'assistant',
      content: message.content,
      ...(calls.length
        ? {
            tool_calls: calls.map((c) => ({
              ...c,
              function: { ...c.function, arguments: JSON.stringify(JSON.parse(c.function.arguments)) },
            })),
          }
        : {}),
    });
    if (!calls.length) return message.content ?? '';
    for (const c of calls) messages.push({ role: 'tool', tool_call_id: c.id, content: toolOutput(c.function.arguments) });
  }
  throw new Error('no final answer in 5 turns');
};

/** Anthropic: the SDK hands back the whole assistant content (thinking blocks included). */
const anthropic: Driver = async (key, stream) => {
  const client = new Anthropic({ apiKey: key, baseURL: proxy.url, maxRetries: 0 });
  const tools: Anthropic.Tool[] = [
    { name: 'Bash', description: 'Run a shell command', input_schema: shellSchema as Anthropic.Tool.InputSchema },
  ];
  const messages: Anthropic.MessageParam[] = [{ role: 'user', content: TASK }];
  for (let turn = 0; turn < 5; turn++) {
    const params = { model: 'claude-test', max_tokens: 2048, system: 'You are Claude Code.', tools, messages };
    const answer = stream ? await client.messages.stream(params).finalMessage() : await client.messages.create(params);
    messages.push({ role: 'assistant', content: answer.content });
    const uses = answer.content.filter((b) => b.type === 'tool_use');
    if (!uses.length) return answer.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
    messages.push({
      role: 'user',
      content: uses.map((u) => ({ type: 'tool_result' as const, tool_use_id: u.id, content: toolOutput(JSON.stringify(u.input)) })),
    });
  }
  throw new Error('no final answer in 5 turns');
};

/** OpenAI Responses: output items are sent back as input (reasoning items included). */
const responses: Driver = async (key, stream) => {
  const client = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: key, maxRetries: 0 });
  const tools: OpenAI.Responses.Tool[] = [
    { type: 'function', name: 'exec_command', description: 'Run a command', parameters: shellSchema, strict: false },
  ];
  const input: OpenAI.Responses.ResponseInputItem[] = [{ role: 'user', content: TASK }];
  for (let turn = 0; turn < 5; turn++) {
    const params = { model: 'gpt-codex', instructions: 'You are Codex.', input, tools, store: false };
    const answer = stream ? await client.responses.stream(params).finalResponse() : await client.responses.create(params);
    input.push(...(answer.output as OpenAI.Responses.ResponseInputItem[]));
    const calls = (answer.output as OpenAI.Responses.ResponseOutputItem[]).filter(
      (o): o is OpenAI.Responses.ResponseFunctionToolCall => o.type === 'function_call',
    );
    if (!calls.length) return answer.output_text;
    for (const c of calls) input.push({ type: 'function_call_output', call_id: c.call_id, output: toolOutput(c.arguments) });
  }
  throw new Error('no final answer in 5 turns');
};

/** Gemini: the model's content goes back as sent; function calls carry their args as objects. */
const gemini: Driver = async (key, stream) => {
  const client = new GoogleGenAI({ apiKey: key, httpOptions: { baseUrl: proxy.url } });
  const config = {
    systemInstruction: 'You are Gemini CLI.',
    tools: [
      { functionDeclarations: [{ name: 'run_shell_command', description: 'Runs a shell command', parametersJsonSchema: shellSchema }] },
    ],
  };
  const contents: Content[] = [{ role: 'user', parts: [{ text: TASK }] }];
  for (let turn = 0; turn < 5; turn++) {
    let parts: NonNullable<Content['parts']> = [];
    if (stream) {
      for await (const chunk of await client.models.generateContentStream({ model: 'gemini-test', contents, config }))
        parts.push(...(chunk.candidates?.[0]?.content?.parts ?? []));
    } else parts = (await client.models.generateContent({ model: 'gemini-test', contents, config })).candidates?.[0]?.content?.parts ?? [];
    contents.push({ role: 'model', parts });
    const calls = parts.filter((p) => p.functionCall).map((p) => p.functionCall!);
    if (!calls.length)
      return parts
        .filter((p) => !p.thought)
        .map((p) => p.text ?? '')
        .join('');
    contents.push({
      role: 'user',
      parts: calls.map((c) => ({ functionResponse: { id: c.id, name: c.name, response: { output: toolOutput(JSON.stringify(c.args)) } } })),
    });
  }
  throw new Error('no final answer in 5 turns');
};

async function rollout(sessionId: string): Promise<RolloutDocument> {
  const res = await fetch(`${proxy.url}/sessions/${sessionId}/rollout`);
  assert.equal(res.status, 200);
  return (await res.json()) as RolloutDocument;
}

function assertOneSample(doc: RolloutDocument): void {
  const calls = doc.calls;
  assert.equal(calls.length, 3, 'three model calls');
  for (const c of calls) {
    assert.deepEqual(
      c.findings.filter((f) => f.startsWith('[FATAL]')),
      [],
      `call ${c.index} has no FATAL finding`,
    );
    assert.equal(c.render?.mode, 'proxy');
    assert.equal(c.completion_token_ids!.at(-1), IM_END);
    assert.equal(c.logprobs!.length, c.completion_token_ids!.length);
    assert.ok(c.render?.tokens_digest);
  }
  assert.deepEqual(
    calls.map((c) => c.render!.kind),
    ['full', 'bridge', 'bridge'],
  );
  for (let i = 1; i < calls.length; i++) {
    const prev = calls[i - 1]!;
    const end = [...prev.prompt_token_ids!, ...prev.completion_token_ids!];
    assert.equal(calls[i]!.render!.anchor_call_id, prev.call_id);
    assert.equal(calls[i]!.render!.anchor_tokens, end.length);
    assert.deepEqual(calls[i]!.prompt_token_ids!.slice(0, end.length), end, `call ${i} extends call ${i - 1} token for token`);
    assert.deepEqual(calls[i]!.render!.bridge_span, [end.length, calls[i]!.prompt_token_ids!.length]);
  }
  assert.equal(doc.graph.roots.length, 1, 'one root');
  const agent = doc.sequences.filter((s) => s.role === 'agent');
  assert.equal(agent.length, 1, 'ONE training sequence per rollout');
  const seq = agent[0]!;
  assert.ok(seq.trainable, seq.validation.join('; '));
  const last = calls.at(-1)!;
  assert.deepEqual(seq.input_ids, [...last.prompt_token_ids!, ...last.completion_token_ids!]);
  const sampled = calls.reduce((n, c) => n + c.completion_token_ids!.length, 0);
  assert.equal(seq.loss_mask.filter((m) => m === 1).length, sampled, 'every sampled token of every turn is trained');
  assert.deepEqual(
    seq.turn_lengths,
    calls.map((c) => c.completion_token_ids!.length),
  );
  // Mask 1 exactly on sampled positions, with their behaviour logprobs; bridge and tool tokens are mask 0.
  let at = 0;
  for (const c of calls) {
    const start = c.prompt_token_ids!.length;
    for (let i = at; i < start; i++) assert.equal(seq.loss_mask[i], 0);
    c.completion_token_ids!.forEach((_, k) => {
      assert.equal(seq.loss_mask[start + k], 1);
      assert.equal(seq.logprobs[start + k], c.logprobs![k]);
    });
    at = start + c.completion_token_ids!.length;
  }
}

const drivers: [string, Driver, string][] = [
  ['openai_chat', openaiChat, 'openai_chat'],
  ['anthropic_messages', anthropic, 'anthropic_messages'],
  ['openai_responses', responses, 'openai_responses'],
  ['google_gemini', gemini, 'google_gemini'],
];

describe('token-in against the embedded engine: a reasoning policy, four dialects, one sample per rollout', () => {
  for (const [name, drive, dialect] of drivers) {
    for (const stream of [false, true]) {
      test(`${name}${stream ? ', streamed' : ''}`, async () => {
        const { session_id } = await createSession(proxy, { metadata: { harness: `token-in-${name}` } });
        const final = await drive(session_id, stream);
        assert.match(final, /3 lines/);
        const doc = await rollout(session_id);
        assert.ok(doc.calls.every((c) => c.dialect === dialect));
        assertOneSample(doc);
      });
    }
  }

  test('the OpenAI chat harness drops the reasoning: the full render drifts, the bridge keeps the sampled tokens', async () => {
    const { session_id } = await createSession(proxy);
    await openaiChat(session_id, false);
    const doc = await rollout(session_id);
    const bridged = doc.calls.slice(1);
    for (const c of bridged) {
      assert.ok(c.render!.full_render, 'every bridge is checked against a full render');
      assert.equal(c.render!.full_render!.equal, false);
      assert.ok(c.render!.full_render!.drift_tokens > 0, 'a re-render would rewrite sampled tokens');
      assert.ok(c.findings.some((f) => f.startsWith('[INFO] render_drift')));
    }
    assert.equal(doc.calls[0]!.render!.tool_call_parse, 'ok');
    assert.equal(doc.calls[2]!.render!.tool_call_parse, 'none');
  });

  test('a new user turn after reasoning follows the template: full render, a new root with a finding', async () => {
    const { session_id } = await createSession(proxy);
    const client = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: session_id, maxRetries: 0 });
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: TASK }];
    const tools: OpenAI.ChatCompletionTool[] = [{ type: 'function', function: { name: 'bash', parameters: shellSchema } }];
    const first = (await client.chat.completions.create({ model: 'm', messages, tools })).choices[0]!.message;
    messages.push(
      { role: 'assistant', content: first.content, tool_calls: first.tool_calls },
      { role: 'user', content: 'Actually, just say hi.' },
    );
    await client.chat.completions.create({ model: 'm', messages, tools });
    const calls = proxy.sessions.calls(session_id);
    assert.equal(calls[1]!.render!.kind, 'full');
    assert.equal(calls[1]!.render!.new_root_reason, 'template_drops_reasoning');
    assert.ok(calls[1]!.findings.some((f) => /bridge_new_root: template_drops_reasoning/.test(f)));
  });

  test("a prompt at the context limit gets the dialect's stop answer without an engine call", async () => {
    const { session_id } = await createSession(proxy);
    const client = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: session_id, maxRetries: 0 });
    const long = 'word '.repeat(lab.engine.contextSize + 10);
    const answer = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: long }] });
    assert.ok(answer.choices[0]!.message.content);
    assert.equal(proxy.sessions.calls(session_id).length, 0);
    assert.ok(proxy.sessions.get(session_id)!.findings.some((f) => f.includes('context_budget_exhausted')));
  });
});
