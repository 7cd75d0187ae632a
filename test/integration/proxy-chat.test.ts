// The capture proxy with the official `openai` SDK as the client, against the in-repo fake vLLM.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { fakeEncode } from '../../src/engine/fake-tokenizer.js';
import { bashTool, createSession, sseFrames, startLab, type Lab } from './helpers.js';

describe('chat completions through the proxy (openai SDK)', () => {
  let lab: Lab;
  before(async () => {
    lab = await startLab();
  });
  after(() => lab.close());

  const client = (key: string) => new OpenAI({ baseURL: `${lab.proxy.url}/v1`, apiKey: key, maxRetries: 0 });

  test('non-streaming tool call: the SDK sees the engine tool call; the record holds exact ids and aligned logprobs', async () => {
    const { session_id } = await createSession(lab.proxy);
    const before = lab.engine.requests.length;
    const completion = await client(session_id).chat.completions.create({
      model: 'intercepted/whatever',
      messages: [
        { role: 'system', content: 'You are a coding agent.' },
        { role: 'user', content: 'Say hello with bash.' },
      ],
      tools: [bashTool],
      temperature: 0.7,
      top_p: 0.9,
      max_completion_tokens: 64000,
    });
    const call = completion.choices[0]!.message.tool_calls?.[0];
    assert.equal(completion.choices[0]!.finish_reason, 'tool_calls');
    assert.ok(call && call.type === 'function');
    assert.equal(call.function.name, 'bash');
    assert.deepEqual(JSON.parse(call.function.arguments), { command: 'echo hello' });
    assert.equal(completion.model, 'intercepted/whatever', 'model echoed in the client name');
    assert.equal((completion as unknown as Record<string, unknown>).prompt_token_ids, undefined, 'token data is not leaked to the harness');

    const sent = lab.engine.requests[before]!;
    assert.equal(sent.model, lab.engine.model, 'model overwritten with the served model');
    assert.equal(sent.stream, false);
    assert.equal(sent.logprobs, true);
    assert.equal(sent.top_logprobs, 0);
    assert.equal(sent.return_token_ids, true);
    assert.equal(sent.top_p, 1);
    assert.equal(sent.top_k, -1);
    assert.equal(sent.min_p, 0);
    assert.equal(sent.max_tokens, 8192, 'output tokens clamped');

    const [record] = lab.proxy.sessions.calls(session_id);
    assert.ok(record);
    assert.equal(record.dialect, 'openai_chat');
    assert.deepEqual(record.requested_sampling_params.top_p, 0.9);
    assert.equal(record.request.headers.authorization, '[redacted]');
    const engineAnswer = lab.engine.responses[before] as unknown as {
      prompt_token_ids: number[];
      choices: { token_ids: number[]; logprobs: { content: { logprob: number }[] } }[];
    };
    const stored = record.engine_response as unknown as {
      prompt_token_ids?: unknown;
      choices: { token_ids?: unknown; message: { tool_calls: unknown[] } }[];
    };
    assert.equal(stored.prompt_token_ids, undefined, 'token arrays are stored once, in the record');
    assert.equal(stored.choices[0]!.message.tool_calls.length, 1, 'the rest of the engine answer is stored as sent');
    assert.deepEqual(record.prompt_token_ids, engineAnswer.prompt_token_ids, 'prompt ids exactly as the engine returned them');
    assert.deepEqual(record.completion_token_ids, engineAnswer.choices[0]!.token_ids);
    assert.equal(record.completion_token_ids!.at(-1), fakeEncode('<|im_end|>')[0], 'sampled ids end in the stop token');
    assert.deepEqual(
      record.logprobs,
      engineAnswer.choices[0]!.logprobs.content.map((e) => e.logprob),
    );
    assert.equal(record.finish_reason, 'tool_calls');
    assert.deepEqual(record.findings, []);
  });

  test('streaming: the SDK reassembles the replayed chunks; the stream ends with [DONE]', async () => {
    const { session_id } = await createSession(lab.proxy);
    const stream = await client(session_id).chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'Say hello with bash.' }],
      tools: [bashTool],
      stream: true,
      stream_options: { include_usage: true },
    });
    let name = '';
    let args = '';
    let finish: string | null = null;
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta;
      for (const tc of delta?.tool_calls ?? []) {
        name += tc.function?.name ?? '';
        args += tc.function?.arguments ?? '';
      }
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(name, 'bash');
    assert.deepEqual(JSON.parse(args), { command: 'echo hello' });
    assert.equal(finish, 'tool_calls');
    const sent = lab.engine.requests.at(-1)!;
    assert.equal(sent.stream, false, 'upstream is never streamed');
    assert.equal(sent.stream_options, undefined, 'stream_options dropped');

    const raw = await fetch(`${lab.proxy.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${session_id}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }], tools: [] }),
    });
    assert.equal(raw.headers.get('content-type'), 'text/event-stream');
    const frames = sseFrames(await raw.text());
    assert.equal(frames.at(-1), 'data: [DONE]');
    assert.equal(lab.engine.requests.at(-1)!.tools, undefined, 'empty tools array dropped');
  });

  test('a multi-turn tool loop links into one linear chain and one trainable sequence', async () => {
    const { session_id } = await createSession(lab.proxy, { metadata: { harness: 'test' } });
    const openai = client(session_id);
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Say hello with bash.' }];
    for (let turn = 0; turn < 3; turn++) {
      const completion = await openai.chat.completions.create({ model: 'm', messages, tools: [bashTool] });
      const message = completion.choices[0]!.message;
      messages.push({ role: 'assistant', content: message.content, tool_calls: message.tool_calls });
      if (!message.tool_calls?.length) break;
      for (const call of message.tool_calls) messages.push({ role: 'tool', tool_call_id: call.id, content: 'hello\n' });
    }
    const res = await fetch(`${lab.proxy.url}/sessions/${session_id}/rollout`);
    assert.equal(res.status, 200);
    const doc = (await res.json()) as {
      session_id: string;
      calls: unknown[];
      graph: { roots: string[]; nodes: { node_id: string; parent_id: string | null }[] };
      traces: { trainable: boolean; loss_mask: number[]; input_ids: number[] }[];
    };
    assert.equal(doc.session_id, session_id);
    assert.equal(doc.calls.length, 2);
    assert.equal(doc.graph.roots.length, 1, 'the second call extends the first');
    assert.equal(doc.graph.nodes[1]!.parent_id, doc.graph.nodes[0]!.node_id);
    assert.equal(doc.traces.length, 1);
    assert.equal(doc.traces[0]!.input_ids.length, doc.traces[0]!.loss_mask.length);
    assert.ok(doc.traces[0]!.trainable);
  });

  test('reasoning goes back to the engine as `reasoning`, so the next prompt still extends the last call', async () => {
    const thinking = await startLab({
      script: (_req, turn) =>
        turn === 0 ? { reasoning: 'List it first.', tool_calls: [{ name: 'bash', arguments: { command: 'ls' } }] } : { content: 'Done.' },
    });
    try {
      const { session_id } = await createSession(thinking.proxy);
      const openai = new OpenAI({ baseURL: `${thinking.proxy.url}/v1`, apiKey: session_id, maxRetries: 0 });
      const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'What is here?' }];
      const first = (await openai.chat.completions.create({ model: 'm', messages, tools: [bashTool] })).choices[0]!
        .message as OpenAI.ChatCompletionMessage & { reasoning_content?: string };
      assert.equal(first.reasoning_content, 'List it first.', 'vLLM `reasoning` reaches the client as reasoning_content');
      messages.push({
        role: 'assistant',
        content: first.content,
        tool_calls: first.tool_calls,
        reasoning_content: first.reasoning_content,
      } as OpenAI.ChatCompletionMessageParam);
      messages.push({ role: 'tool', tool_call_id: first.tool_calls![0]!.id, content: 'a.txt' });
      await openai.chat.completions.create({ model: 'm', messages, tools: [bashTool] });
      const sent = thinking.engine.requests.at(-1)!.messages[1]!;
      assert.equal(sent.reasoning, 'List it first.');
      assert.equal(sent.reasoning_content, undefined);
      const doc = thinking.proxy.sessions.rollout(session_id)!;
      assert.equal(doc.graph.roots.length, 1);
      assert.equal(doc.graph.nodes[1]!.parent_id, doc.graph.nodes[0]!.node_id);
    } finally {
      await thinking.close();
    }
  });

  test('unknown key: 401 in the OpenAI error shape naming the fix', async () => {
    await assert.rejects(
      () => client('not-a-session').chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }] }),
      (err: unknown) => {
        assert.ok(err instanceof OpenAI.AuthenticationError);
        assert.match(err.message, /POST \/sessions/);
        return true;
      },
    );
  });

  test('model-call budget: past it the harness gets a normal stop answer that is not recorded', async () => {
    const { session_id } = await createSession(lab.proxy, { max_model_calls: 1 });
    const openai = client(session_id);
    await openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'one' }] });
    const second = await openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'two' }] });
    assert.equal(second.choices[0]!.message.content, 'Step budget exhausted; stopping.');
    assert.equal(second.choices[0]!.finish_reason, 'stop');
    const stream = await openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'three' }], stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    assert.equal(text, 'Step budget exhausted; stopping.');
    assert.equal(lab.proxy.sessions.calls(session_id).length, 1, 'stop answers are not training data');
    const summary = (await (await fetch(`${lab.proxy.url}/sessions/${session_id}`)).json()) as { budget_stop_count: number };
    assert.equal(summary.budget_stop_count, 2);
  });

  test('a harness that asks for logprobs gets them; others do not', async () => {
    const { session_id } = await createSession(lab.proxy);
    const withLogprobs = await client(session_id).chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      logprobs: true,
    });
    assert.ok(withLogprobs.choices[0]!.logprobs?.content?.length);
    const without = await client(session_id).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(without.choices[0]!.logprobs ?? null, null);
  });
});
