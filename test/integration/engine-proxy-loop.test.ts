// A real harness loop on CPU: the capture proxy in front of the embedded engine with a scripted
// policy. Two tool calls and an answer give three calls with exact, aligned tokens and a linear graph.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { CaptureProxy } from '../../src/capture/proxy.js';
import type { CallRecord, RolloutDocumentLike } from './engine-proxy-types.js';
import type { EmbeddedEngine } from '../../src/engine/embedded-engine.js';
import { IM_END } from '../../src/engine/tiny-model.js';
import { bashTool, createSession } from './helpers.js';
import { startTestEngine } from './engine-fixture.js';

let lab: EmbeddedEngine;
let proxy: CaptureProxy;
let dataDir: string;
before(async () => {
  lab = await startTestEngine({ policy: 'two-tool-calls' });
  dataDir = mkdtempSync(join(tmpdir(), 'hl-engine-loop-'));
  proxy = await CaptureProxy.start({ engineUrl: `${lab.url}/v1`, model: lab.engine.modelName, dataDir });
});
after(async () => {
  await proxy.close();
  await lab.close();
  rmSync(dataDir, { recursive: true, force: true });
});

test('the proxy grades the embedded engine as tokens level with processed logprobs', async () => {
  const { session_id } = await createSession(proxy);
  const openai = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: session_id });
  await openai.chat.completions.create({ model: 'anything', messages: [{ role: 'user', content: 'hi' }] });
  const health = (await (await fetch(`${proxy.url}/health`)).json()) as { capture_level: string; logprobs_mode: string };
  assert.equal(health.capture_level, 'tokens');
  assert.equal(health.logprobs_mode, 'processed');
});

test('a scripted two-tool-call loop: three calls, aligned tokens, one linear chain', async () => {
  const { session_id } = await createSession(proxy, { metadata: { harness: 'engine-loop-test' } });
  const openai = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: session_id });
  const messages: OpenAI.ChatCompletionMessageParam[] = [
    { role: 'system', content: 'You are a careful agent.' },
    { role: 'user', content: 'How many lines does notes.txt have?' },
  ];
  const finishes: string[] = [];
  for (let turn = 0; turn < 5; turn++) {
    const completion = await openai.chat.completions.create({ model: 'anything', messages, tools: [bashTool], temperature: 0.8 });
    const choice = completion.choices[0]!;
    finishes.push(choice.finish_reason);
    messages.push({ role: 'assistant', content: choice.message.content, tool_calls: choice.message.tool_calls });
    if (!choice.message.tool_calls?.length) break;
    for (const call of choice.message.tool_calls) {
      assert.equal(call.type, 'function');
      const output = call.type === 'function' && call.function.arguments.includes('wc') ? '3 notes.txt\n' : 'notes.txt\n';
      messages.push({ role: 'tool', tool_call_id: call.id, content: output });
    }
  }
  assert.deepEqual(finishes, ['tool_calls', 'tool_calls', 'stop']);
  const toolCalls = messages.flatMap((m) => (m.role === 'assistant' ? (m.tool_calls ?? []) : []));
  assert.deepEqual(
    toolCalls.map((c) => (c.type === 'function' ? JSON.parse(c.function.arguments) : null)),
    [{ command: 'ls' }, { command: 'wc -l notes.txt' }],
  );

  const doc = (await (await fetch(`${proxy.url}/sessions/${session_id}/rollout`)).json()) as RolloutDocumentLike;
  assert.equal(doc.calls.length, 3);
  assert.equal(doc.capture_level, 'tokens');
  for (const call of doc.calls as CallRecord[]) {
    assert.deepEqual(
      call.findings.filter((f) => f.startsWith('[FATAL]')),
      [],
    );
    assert.ok(call.prompt_token_ids!.length > 0);
    assert.equal(call.completion_token_ids!.at(-1), IM_END);
    assert.equal(call.logprobs!.length, call.completion_token_ids!.length, 'one logprob per sampled token');
    assert.ok(call.logprobs!.every((lp) => Number.isFinite(lp) && lp < 0));
  }
  // Linear: each call's prompt extends the previous call's prompt + completion, and the graph agrees.
  const calls = doc.calls as CallRecord[];
  for (let i = 1; i < calls.length; i++) {
    const end = [...calls[i - 1]!.prompt_token_ids!, ...calls[i - 1]!.completion_token_ids!];
    assert.deepEqual(calls[i]!.prompt_token_ids!.slice(0, end.length), end, `call ${i + 1} extends call ${i}`);
  }
  assert.equal(doc.graph.roots.length, 1);
  assert.equal(doc.graph.leaves.length, 1);
  assert.deepEqual(doc.graph.forks, []);
  const byIndex = [...doc.graph.nodes].sort((a, b) => a.index - b.index);
  byIndex.forEach((n, i) => assert.equal(n.parent_id, i === 0 ? null : byIndex[i - 1]!.node_id));
  assert.equal(doc.traces.length, 1);
  const trace = doc.traces[0]!;
  assert.ok(trace.trainable);
  assert.equal(trace.input_ids.length, trace.loss_mask.length);
  const last = calls.at(-1)!;
  assert.deepEqual(trace.input_ids, [...last.prompt_token_ids!, ...last.completion_token_ids!]);
  assert.equal(
    trace.loss_mask.filter((m) => m === 1).length,
    calls.reduce((s, c) => s + c.completion_token_ids!.length, 0),
  );
});

test('streamed straight from the engine, a scripted tool call arrives as OpenAI tool-call deltas', async () => {
  const openai = new OpenAI({ baseURL: `${lab.url}/v1`, apiKey: 'unused' });
  const stream = await openai.chat.completions.create({
    model: lab.engine.modelName,
    messages: [{ role: 'user', content: 'List the files.' }],
    tools: [bashTool],
    stream: true,
  });
  let finish: string | null = null;
  let content = '';
  const calls = new Map<number, { id?: string; name: string; args: string }>();
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    content += choice.delta.content ?? '';
    for (const d of choice.delta.tool_calls ?? []) {
      const c = calls.get(d.index) ?? { name: '', args: '' };
      if (d.id) c.id = d.id;
      c.name += d.function?.name ?? '';
      c.args += d.function?.arguments ?? '';
      calls.set(d.index, c);
    }
    finish = choice.finish_reason ?? finish;
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(content, 'Let me look at the files.');
  assert.deepEqual(
    [...calls.values()].map((c) => [c.name, c.args]),
    [['bash', '{"command": "ls"}']],
  );
  assert.match([...calls.values()][0]!.id!, /^chatcmpl-tool-/);
});
