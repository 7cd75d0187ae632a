// Token in, token out against the fake engine in vLLM's and SGLang's token-route shapes: the proxy
// finds the tokenizer through /v1/models `root`, sends ids with stop ids and a clamped max_tokens,
// parses the answer itself, and a multi-turn tool loop is one training sequence.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { RolloutGraph } from '../../src/capture/graph.js';
import { CaptureProxy } from '../../src/capture/proxy.js';
import { tokensDigestMatches } from '../../src/capture/render/digest.js';
import { Renderer } from '../../src/capture/render/renderer.js';
import { startFakeEngine, type FakeEngine, type FakeScript } from '../../src/engine/fake-engine.js';
import { ensureTinyModel } from '../../src/engine/tiny-model.js';
import { createSession } from './helpers.js';

const DATA_DIR = process.env.HARNESS_LAB_DATA_DIR ?? join(tmpdir(), 'harness-lab-test-data');
const MAX_MODEL_LEN = 4096;

const script: FakeScript = (request, turn) => {
  const last = request.messages.at(-1);
  if (typeof last?.content === 'string' && last.content.includes('break the call'))
    return { content: 'Calling.\n<tool_call>\n{"name": "bash", "arguments": {"command": \n</tool_call>' };
  if (turn === 0) return { reasoning: 'List the files first.', tool_calls: [{ name: 'bash', arguments: { command: 'ls', all: true } }] };
  if (turn === 1)
    return { reasoning: 'Now count.', content: 'Counting.', tool_calls: [{ name: 'bash', arguments: { command: 'wc -l notes.txt' } }] };
  return { reasoning: 'Done.', content: 'notes.txt has 3 lines.' };
};

const tools: OpenAI.ChatCompletionTool[] = [
  { type: 'function', function: { name: 'bash', parameters: { type: 'object', properties: { command: { type: 'string' } } } } },
];
let renderer: Renderer;
/** The next token-route call fails (500), after the proxy has sent it. */
let failNext = false;
before(async () => {
  renderer = await Renderer.load((await ensureTinyModel({ dataDir: DATA_DIR })).path);
});

for (const flavour of ['vllm', 'sglang'] as const) {
  describe(`token-in against the fake engine, ${flavour} shape`, () => {
    let engine: FakeEngine;
    let proxy: CaptureProxy;
    before(async () => {
      engine = await startFakeEngine({
        renderer,
        flavour,
        script,
        maxModelLen: MAX_MODEL_LEN,
        failTokens: () => (failNext ? ((failNext = false), { status: 500, message: 'engine failed' }) : undefined),
      });
      proxy = await CaptureProxy.start({ engineUrl: engine.url, model: engine.model, captureLevel: 'tokens' });
      // The render mode is resolved (and the token route probed) once, before the counts below.
      assert.ok(await proxy.tokenInEngine(), 'auto picks token-in: /v1/models names the tokenizer, the engine takes ids');
    });
    after(async () => {
      await proxy?.close();
      await engine?.close();
    });

    for (const stream of [false, true]) {
      test(`a three-turn tool loop${stream ? ', streamed' : ''}: token routes only, clamped, one sequence`, async () => {
        const { session_id } = await createSession(proxy);
        const client = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: session_id, maxRetries: 0 });
        const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'How many lines does notes.txt have?' }];
        const chatBefore = engine.requests.length;
        const tokenBefore = engine.tokenRequests.length;
        for (let turn = 0; turn < 4; turn++) {
          const params = { model: 'm', messages, tools, max_tokens: 100_000, temperature: 0.7 };
          const message = stream
            ? (await client.chat.completions.stream(params).finalChatCompletion()).choices[0]!.message
            : (await client.chat.completions.create(params)).choices[0]!.message;
          messages.push({ role: 'assistant', content: message.content, tool_calls: message.tool_calls });
          if (!message.tool_calls?.length) {
            assert.equal(message.content, 'notes.txt has 3 lines.');
            break;
          }
          for (const c of message.tool_calls) messages.push({ role: 'tool', tool_call_id: c.id, content: 'out' });
        }
        assert.equal(engine.requests.length, chatBefore, 'no chat completion reached the engine');
        const sent = engine.tokenRequests.slice(tokenBefore);
        assert.equal(sent.length, 3);
        const calls = proxy.sessions.calls(session_id);
        sent.forEach((body, i) => {
          const prompt = calls[i]!.prompt_token_ids!;
          if (flavour === 'vllm') {
            assert.deepEqual(body.prompt, prompt);
            assert.equal(body.max_tokens, MAX_MODEL_LEN - prompt.length, 'max_tokens clamped to the context left');
            assert.deepEqual([...(body.stop_token_ids as number[])].sort(), [151643, 151645]);
            assert.equal(body.temperature, 0.7);
            assert.equal(body.return_token_ids, true);
          } else {
            const sp = body.sampling_params as Record<string, unknown>;
            assert.deepEqual(body.input_ids, prompt);
            assert.equal(sp.max_new_tokens, MAX_MODEL_LEN - prompt.length - 1);
            assert.deepEqual([...(sp.stop_token_ids as number[])].sort(), [151643, 151645]);
            assert.equal(sp.temperature, 0.7);
            assert.equal(body.return_logprob, true);
          }
        });
        assert.deepEqual(
          calls.map((c) => c.render?.kind),
          ['full', 'bridge', 'bridge'],
        );
        // Each turn's record holds the prompt array its plan built, so the bridge keeps one per branch.
        assert.equal((await proxy.tokenInEngine())!.bridge.promptArrays(proxy.sessions.get(session_id)!), 1);
        // A bridged call's digest went on from its anchor's hash state: it must equal a fresh one.
        for (const c of calls) {
          assert.match(c.render!.tokens_digest!, /^2:/);
          assert.ok(tokensDigestMatches(c.render!.tokens_digest!, c.prompt_token_ids, c.completion_token_ids, c.logprobs));
        }
        assert.deepEqual(
          calls.map((c) => c.render?.engine_route),
          Array(3).fill(flavour === 'vllm' ? '/v1/completions' : '/generate'),
        );
        const doc = proxy.sessions.rollout(session_id)!;
        const agent = doc.sequences.filter((s) => s.role === 'agent');
        assert.equal(agent.length, 1, 'one training sequence');
        assert.ok(agent[0]!.trainable, agent[0]!.validation.join('; '));
        assert.equal(
          agent[0]!.n_trainable,
          calls.reduce((n, c) => n + c.completion_token_ids!.length, 0),
        );
      });
    }

    test('a retry and a fork each send their exact ids (a branch shares its serialised ids)', async () => {
      const { session_id } = await createSession(proxy);
      const client = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: session_id, maxRetries: 0 });
      const ask = async (messages: OpenAI.ChatCompletionMessageParam[]) =>
        (await client.chat.completions.create({ model: 'm', messages, tools, max_tokens: 200 })).choices[0]!.message;
      const after = (
        history: OpenAI.ChatCompletionMessageParam[],
        m: OpenAI.ChatCompletionMessage,
        out: string,
      ): OpenAI.ChatCompletionMessageParam[] => [
        ...history,
        { role: 'assistant', content: m.content, tool_calls: m.tool_calls },
        ...(m.tool_calls ?? []).map((c) => ({ role: 'tool' as const, tool_call_id: c.id, content: out })),
      ];
      const tokenBefore = engine.tokenRequests.length;
      const start: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'How many lines does notes.txt have?' }];
      const h1 = after(start, await ask(start), 'out');
      failNext = true;
      // Bridged on turn 1 and sent, then failed: turn 1 is still the end of its branch, but the ids
      // serialised after it are this call's.
      await assert.rejects(ask(h1), (err: unknown) => err instanceof OpenAI.APIError && err.status === 502);
      const first = await ask(h1); // bridges on turn 1
      const retry = await ask(h1); // bridges on turn 1 again: no longer the end of the branch
      await ask(after(h1, retry, 'out of the retry')); // goes on from the retry
      await ask(after(h1, first, 'out of the first')); // a fork: goes on from the first answer
      const sent = engine.tokenRequests.slice(tokenBefore);
      const calls = proxy.sessions.calls(session_id);
      assert.equal(sent.length, 6);
      // The failed call (the second sent) keeps no token ids: the engine gave none.
      const answered = calls.filter((c) => c.prompt_token_ids);
      assert.deepEqual(
        answered.map((c) => c.render?.kind),
        ['full', 'bridge', 'bridge', 'bridge', 'bridge'],
      );
      [sent[0]!, ...sent.slice(2)].forEach((body, i) =>
        assert.deepEqual(flavour === 'vllm' ? body.prompt : body.input_ids, answered[i]!.prompt_token_ids, `call ${i}`),
      );
      // The bridge grows a branch's prompt array in place; the live graph (built call by call as the
      // arrays grew) is the graph of the records as they read now, copied into arrays of their own.
      const live = proxy.sessions.get(session_id)!.graph('tokens');
      const rebuilt = RolloutGraph.fromRecords(structuredClone(calls), { captureLevel: 'tokens' });
      const shape = (g: RolloutGraph) =>
        g.nodes().map((n) => ({ id: n.node_id, parent: n.parent?.node_id ?? null, prompt: [...n.prompt_ids], length: n.promptLength }));
      assert.deepEqual(shape(live), shape(rebuilt));
      assert.deepEqual(
        rebuilt
          .nodes()
          .map((n) => n.parent?.node_id ?? null)
          .slice(0, 3),
        [null, answered[0]!.call_id, answered[0]!.call_id],
      );
    });

    test('a tool call that does not parse is answered as text and marked on the call', async () => {
      const { session_id } = await createSession(proxy);
      const client = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: session_id, maxRetries: 0 });
      const answer = await client.chat.completions.create({
        model: 'm',
        messages: [{ role: 'user', content: 'Please break the call.' }],
        tools,
      });
      const choice = answer.choices[0]!;
      assert.equal(choice.finish_reason, 'stop');
      assert.equal(choice.message.tool_calls, undefined);
      assert.match(choice.message.content!, /<tool_call>/);
      const call = proxy.sessions.calls(session_id)[0]!;
      assert.equal(call.render!.tool_call_parse, 'failed');
      assert.deepEqual(call.render!.tool_call_statuses, ['invalid_json']);
      assert.ok(call.findings.some((f) => f.startsWith('[WARN] tool_call_unparsed')));
    });

    test('/health says the proxy renders', async () => {
      const health = (await (await fetch(`${proxy.url}/health`)).json()) as { render: string };
      assert.equal(health.render, 'proxy');
      assert.equal(proxy.renderReport?.route, flavour === 'vllm' ? '/v1/completions' : '/generate');
      assert.equal(proxy.renderReport?.max_model_len, MAX_MODEL_LEN);
    });
  });
}

test('sessions kept only in the store bridge every turn without being read back', async () => {
  // More concurrent sessions than the proxy keeps in memory (here 1): the bridge takes each call in as
  // it is recorded, so a turn does not load its session's file (at 108k tokens and 24 turns that read
  // cost 7.4 ms a call, more than the turn's own work).
  const engine = await startFakeEngine({ renderer, flavour: 'vllm', script, maxModelLen: MAX_MODEL_LEN });
  const dataDir = mkdtempSync(join(tmpdir(), 'hl-tokenin-store-'));
  const proxy = await CaptureProxy.start({
    engineUrl: engine.url,
    model: engine.model,
    captureLevel: 'tokens',
    dataDir,
    resident: { sessions: 1 },
  });
  try {
    const runs = await Promise.all(
      [0, 1, 2].map(async () => {
        const { session_id } = await createSession(proxy);
        return {
          session_id,
          client: new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: session_id, maxRetries: 0 }),
          messages: [] as OpenAI.ChatCompletionMessageParam[],
        };
      }),
    );
    for (const run of runs) run.messages.push({ role: 'user', content: 'How many lines does notes.txt have?' });
    for (let turn = 0; turn < 3; turn++) {
      // One turn of every session, in turn: each session's call comes after the others' (interleaved).
      for (const run of runs) {
        const message = (await run.client.chat.completions.create({ model: 'm', messages: run.messages, tools })).choices[0]!.message;
        run.messages.push({ role: 'assistant', content: message.content, tool_calls: message.tool_calls });
        for (const c of message.tool_calls ?? []) run.messages.push({ role: 'tool', tool_call_id: c.id, content: 'out' });
      }
    }
    assert.equal(proxy.sessions.residentCount, 0, 'no session was read back from the store for a bridge');
    const sent = engine.tokenRequests.slice(-3 * runs.length); // after the proxy's probe
    runs.forEach((run, r) => {
      const stored = proxy.sessions.calls(run.session_id);
      assert.deepEqual(
        stored.map((c) => c.render?.kind),
        ['full', 'bridge', 'bridge'],
      );
      // Read back from the store: each call's prompt is the ids the engine received (turns interleave).
      assert.deepEqual(
        stored.map((c) => c.prompt_token_ids),
        [0, 1, 2].map((turn) => sent[turn * runs.length + r]!.prompt),
      );
    });
  } finally {
    await proxy.close();
    await engine.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('a long prompt is sent as its kept bytes between the body head and tail, and arrives whole', async () => {
  // Past SPLICE_PROMPT_BYTES (64 KB of id text, ~12k tokens) the request goes out in parts under one
  // content-length; the engine must receive the same ids the record holds, turn after turn.
  const engine = await startFakeEngine({ renderer, flavour: 'vllm', script, maxModelLen: 65_536 });
  const proxy = await CaptureProxy.start({ engineUrl: engine.url, model: engine.model, captureLevel: 'tokens' });
  try {
    const { session_id } = await createSession(proxy);
    const client = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: session_id, maxRetries: 0 });
    const words = Array.from({ length: 10_000 }, (_, i) => `w${(i * 7919) % 10_007}`).join(' ');
    const messages: OpenAI.ChatCompletionMessageParam[] = [
      { role: 'system', content: `You are careful.\n${words}` },
      { role: 'user', content: 'How many lines does notes.txt have?' },
    ];
    const before = engine.tokenRequests.length;
    for (let turn = 0; turn < 3; turn++) {
      const message = (await client.chat.completions.create({ model: 'm', messages, tools })).choices[0]!.message;
      messages.push({ role: 'assistant', content: message.content, tool_calls: message.tool_calls });
      if (!message.tool_calls?.length) break;
      for (const c of message.tool_calls) messages.push({ role: 'tool', tool_call_id: c.id, content: 'out' });
    }
    const calls = proxy.sessions.calls(session_id);
    // The proxy's probe of the token route (at its first call) comes first.
    const sent = engine.tokenRequests.slice(before).slice(-calls.length);
    assert.ok(calls.length >= 2);
    assert.ok(JSON.stringify(sent[0]!.prompt).length > 64 * 1024, 'the prompt is past the splice size');
    assert.deepEqual(
      calls.map((c) => c.prompt_token_ids),
      sent.map((b) => b.prompt),
    );
    assert.deepEqual(
      calls.map((c) => c.render?.kind),
      ['full', ...calls.slice(1).map(() => 'bridge')],
    );
  } finally {
    await proxy.close();
    await engine.close();
  }
});

test('--render engine keeps chat completions even where the engine takes token ids', async () => {
  const engine = await startFakeEngine({ renderer, script });
  const proxy = await CaptureProxy.start({ engineUrl: engine.url, model: engine.model, captureLevel: 'tokens', render: 'engine' });
  try {
    const { session_id } = await createSession(proxy);
    const client = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: session_id, maxRetries: 0 });
    await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }], tools });
    assert.equal(engine.requests.length, 1);
    assert.equal(engine.tokenRequests.length, 0);
    assert.equal(proxy.sessions.calls(session_id)[0]!.render, undefined);
  } finally {
    await proxy.close();
    await engine.close();
  }
});

test('--render proxy without the model files refuses calls, naming the fix', async () => {
  const engine = await startFakeEngine({ script });
  const proxy = await CaptureProxy.start({ engineUrl: engine.url, model: engine.model, captureLevel: 'tokens', render: 'proxy' });
  try {
    const { session_id } = await createSession(proxy);
    const client = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: session_id, maxRetries: 0 });
    await assert.rejects(
      client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
      (err: unknown) => err instanceof OpenAI.APIError && err.status === 503 && /--render-model/.test(err.message),
    );
    assert.equal(engine.requests.length, 0);
  } finally {
    await proxy.close();
    await engine.close();
  }
});
