// Token-in mode's renderer off the event loop and incremental (#25): the tokenizer threads give the
// same ids and parses as the renderer on this thread, leave the event loop free while a long
// conversation is tokenized, are shared per model and closed by the last user; the piece cache gives
// exactly the library's ids for the whole text while tokenizing only pieces it has not seen; the
// full-render check is sampled by default.
import assert from 'node:assert/strict';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Bridge, FULL_RENDER_SAMPLE_EVERY, FULL_RENDER_SAMPLE_GROWTH } from '../../src/capture/render/bridge.js';
import { acquireRenderWorkers, RenderWorkers } from '../../src/capture/render/render-workers.js';
import { InThreadRenderer, Renderer } from '../../src/capture/render/renderer.js';
import { cutTokens, SegmentCache } from '../../src/capture/render/segment-cache.js';
import type { CallRecord, ChatMessage, ChatTool } from '../../src/capture/types.js';
import { renderAssistantText } from '../../src/engine/assistant-output.js';
import { ensureTinyModel, IM_END } from '../../src/engine/tiny-model.js';

const DATA_DIR = process.env.HARNESS_LAB_DATA_DIR ?? join(tmpdir(), 'harness-lab-test-data');
let modelPath: string;
let renderer: Renderer;
before(async () => {
  modelPath = (await ensureTinyModel({ dataDir: DATA_DIR })).path;
  renderer = await Renderer.load(modelPath);
});

const tools: ChatTool[] = [
  {
    type: 'function',
    function: {
      name: 'bash',
      description: 'Run a shell command',
      parameters: { type: 'object', properties: { command: { type: 'string' } } },
    },
  },
];
const SENTENCE = 'The agent reads files, runs commands and edits code until every test passes: ünïcödé 日本語 😀 12345.\n  ';
const longSystem = (n: number) => `You are careful.\n${SENTENCE.repeat(n)}`;

function toolLoop(system: string, turns: number): ChatMessage[] {
  const messages: ChatMessage[] = [
    { role: 'system', content: system },
    { role: 'user', content: 'Find the failing test and fix it.' },
  ];
  for (let t = 0; t < turns; t++) {
    messages.push({
      role: 'assistant',
      content: t % 2 ? 'Checking.' : '',
      tool_calls: [{ id: `c${t}`, type: 'function', function: { name: 'bash', arguments: `{"command": "ls -la dir${t}"}` } }],
    });
    messages.push({
      role: 'tool',
      tool_call_id: `c${t}`,
      content: `total ${t}\n${'-rw-r--r-- 1 agent agent  220 notes.txt\n'.repeat(t + 1)}`,
    });
  }
  return messages;
}

describe('piece cache', () => {
  test('cut at special tokens, the pieces tokenize to exactly the ids of the whole text', () => {
    const cuts = cutTokens([
      { content: '<|im_end|>', special: true },
      { content: '<|im_start|>', special: true },
      { content: '<think>', special: false },
      { content: '<strip>', special: true, lstrip: true },
    ]);
    assert.deepEqual(cuts, ['<|im_end|>', '<|im_start|>']);
    for (const turns of [0, 1, 3, 8]) {
      const text = renderer.renderText(toolLoop(longSystem(40), turns), { tools });
      const cache = new SegmentCache(cuts, (t) => renderer.encodeUncached(t), 1_000_000, 16);
      assert.equal(cache.pieces(text).join(''), text);
      assert.deepEqual([...cache.encode(text)], renderer.encodeUncached(text), `${turns} turns`);
      const again = cache.encode(text);
      assert.deepEqual([...again], renderer.encodeUncached(text), `${turns} turns, from the cache`);
      // The caller owns what it gets (the tokenizer thread transfers it): changing it leaves the cache.
      again.fill(0);
      assert.deepEqual([...cache.encode(text)], renderer.encodeUncached(text), `${turns} turns, after the caller wrote over its copy`);
    }
  });

  test('a longer history tokenizes only its new pieces; the budget evicts the oldest', () => {
    const cache = new SegmentCache(['<|im_end|>'], (t) => renderer.encodeUncached(t), 10_000, 16);
    const system = longSystem(60);
    const first = renderer.renderText(toolLoop(system, 2), { tools });
    cache.encode(first);
    const before = cache.snapshot();
    const second = renderer.renderText(toolLoop(system, 3), { tools });
    assert.deepEqual([...cache.encode(second)], renderer.encodeUncached(second));
    const after = cache.snapshot();
    assert.ok(after.hits > before.hits, 'the system prompt piece came from the cache');
    assert.ok(after.encodedChars - before.encodedChars < second.length - system.length, 'the system prompt was not tokenized again');
    const small = new SegmentCache(['<|im_end|>'], (t) => renderer.encodeUncached(t), system.length + 10, 16);
    small.encode(first);
    small.encode(renderer.renderText(toolLoop(longSystem(61), 0), { tools }));
    assert.ok(small.snapshot().cachedChars <= system.length + 10);
  });
});

describe('tokenizer threads', () => {
  let workers: RenderWorkers;
  before(async () => {
    workers = await RenderWorkers.load(modelPath, { size: 2 });
  });
  after(async () => {
    await workers?.close();
  });

  test('the same ids, full renders and parses as the renderer on this thread', async () => {
    assert.equal(workers.size, 2);
    assert.equal(workers.family.name, 'qwen3');
    assert.deepEqual([...workers.stopIds].sort(), [...renderer.stopIds].sort());
    assert.equal(workers.turnCloseId, IM_END);
    const messages = toolLoop(longSystem(20), 4);
    const text = renderer.renderText(messages, { tools });
    assert.equal(workers.renderText(messages, { tools }), text);
    assert.deepEqual(await workers.encode(text), renderer.encodeUncached(text));
    assert.deepEqual(await workers.renderIds(messages, { tools }), renderer.encodeUncached(text));
    // The second time from the thread's piece cache: a transferred reply never detaches what it keeps.
    assert.deepEqual(await workers.renderIds(messages, { tools }), renderer.encodeUncached(text));
    // A full render set against a prompt, in the thread: its length and the prefix they share.
    const full = renderer.encodeUncached(text);
    assert.deepEqual(await workers.compareRender(messages, { tools }, full), { tokens: full.length, commonPrefix: full.length });
    const changed = [...full];
    changed[100] = changed[100]! + 1;
    assert.deepEqual(await workers.compareRender(messages, { tools }, changed), { tokens: full.length, commonPrefix: 100 });
    assert.deepEqual(await workers.compareRender(messages, { tools }, full.slice(0, 50)), { tokens: full.length, commonPrefix: 50 });
    assert.deepEqual(
      await new InThreadRenderer(renderer).compareRender(messages, { tools }, changed),
      await workers.compareRender(messages, { tools }, changed),
    );
    const answer = {
      reasoning: 'List first.',
      content: 'Looking.',
      toolCalls: [{ name: 'bash', arguments: { command: 'ls' } }],
    };
    const ids = [...renderer.encode(renderAssistantText(answer)), IM_END];
    assert.deepEqual(
      await workers.parseAnswer(ids, { tools, parseToolCalls: true }),
      renderer.parseAnswer(ids, { tools, parseToolCalls: true }),
    );
    const stats = await workers.cacheStats();
    assert.equal(stats.length, 2);
  });

  test('a long conversation is tokenized while this thread keeps running', async () => {
    const text = renderer.renderText(toolLoop(longSystem(3000), 2), { tools }); // about 90k tokens
    let settled = false;
    const ids = workers.encode(text).then((v) => ((settled = true), v));
    // On this thread the call would have tokenized before returning; on a tokenizer thread, the
    // event loop turns while it works.
    await new Promise((r) => setImmediate(r));
    assert.equal(settled, false);
    assert.ok((await ids).length > 50_000);
  });

  test('one pool per model, closed by its last user; a closed pool refuses calls', async () => {
    const a = await acquireRenderWorkers(modelPath);
    const b = await acquireRenderWorkers(modelPath);
    assert.equal(a.renderer, b.renderer);
    await a.release();
    assert.deepEqual(await b.renderer.encode('<|im_start|>user\nhi'), renderer.encode('<|im_start|>user\nhi'));
    await b.release();
    await assert.rejects(b.renderer.encode('hi'), /disposed/);
    const c = await acquireRenderWorkers(modelPath);
    assert.notEqual(c.renderer, a.renderer);
    await c.release();
  });

  test('a path that is no model fails the load with the reason', async () => {
    await assert.rejects(RenderWorkers.load(join(tmpdir(), 'no-such-model-dir')), /tokenizer\.json/);
  });
});

describe('full-render check', () => {
  function record(index: number, messages: ChatMessage[], promptIds: number[], sampled: number[]): CallRecord {
    const parsed = renderer.parseAnswer(sampled, { tools, parseToolCalls: true });
    const message: ChatMessage = { role: 'assistant', content: parsed.content, reasoning: parsed.reasoning, tool_calls: parsed.toolCalls };
    return {
      call_id: `call${index}`,
      index,
      error: null,
      findings: [],
      engine_request: { messages, tools },
      engine_response: {
        choices: [{ index: 0, finish_reason: 'tool_calls', message }],
      },
      prompt_token_ids: promptIds,
      completion_token_ids: sampled,
      render: { mode: 'proxy', kind: 'full' },
    } as unknown as CallRecord;
  }

  /** Which bridged turns of a tool loop of `turns` calls (after a system prompt) were checked. */
  async function checkedTurns(system: string, turns: number): Promise<boolean[]> {
    const bridge = new Bridge(new InThreadRenderer(renderer));
    const owner = {};
    const messages: ChatMessage[] = toolLoop(system, 0);
    const calls: CallRecord[] = [];
    const checked: boolean[] = [];
    for (let t = 0; t < turns; t++) {
      const plan = await bridge.plan(owner, calls, { messages: [...messages], tools, kwargs: undefined });
      if (t > 0) {
        assert.equal(plan.info.kind, 'bridge');
        checked.push(plan.info.full_render !== null);
      }
      const sampled = [
        ...renderer.encode(renderAssistantText({ toolCalls: [{ name: 'bash', arguments: { command: `ls ${t}` } }] })),
        IM_END,
      ];
      const rec = record(t, [...messages], plan.promptIds, sampled);
      calls.push(rec);
      const answered = rec.engine_response!.choices[0]!.message.tool_calls!;
      messages.push({ role: 'assistant', content: null, tool_calls: answered });
      messages.push({ role: 'tool', tool_call_id: answered[0]!.id, content: `out ${t}` });
    }
    return checked;
  }

  test('sampled by default: the first bridge of a session and every FULL_RENDER_SAMPLE_EVERY-th after it', async () => {
    // A short system prompt: the context grows by far more than a quarter within 16 turns.
    const checked = await checkedTurns('You are careful.', FULL_RENDER_SAMPLE_EVERY + 2);
    const expected = checked.map((_, i) => i % FULL_RENDER_SAMPLE_EVERY === 0);
    assert.deepEqual(checked, expected);
    assert.equal(checked.filter(Boolean).length, 2);
  });

  test('a long system prompt resent as a new string each turn still bridges; one character changed does not', async () => {
    const bridge = new Bridge(new InThreadRenderer(renderer));
    const owner = {};
    // 20 KB: hashed once, then found again by comparing the text (bridge.ts, longTextDigest).
    const system = 'You are careful and you check your work. '.repeat(500);
    const messages = toolLoop(system, 0);
    const calls: CallRecord[] = [];
    // Each request as a harness sends it: parsed anew, so every message and string is a new object.
    const resent = (): ChatMessage[] => JSON.parse(JSON.stringify(messages)) as ChatMessage[];
    const first = await bridge.plan(owner, calls, { messages: resent(), tools, kwargs: undefined });
    const sampled = [...renderer.encode(renderAssistantText({ toolCalls: [{ name: 'bash', arguments: { command: 'ls' } }] })), IM_END];
    const rec = record(0, resent(), first.promptIds, sampled);
    calls.push(rec);
    const answered = rec.engine_response!.choices[0]!.message.tool_calls!;
    messages.push({ role: 'assistant', content: null, tool_calls: answered });
    messages.push({ role: 'tool', tool_call_id: answered[0]!.id, content: 'out' });
    const second = await bridge.plan(owner, calls, { messages: resent(), tools, kwargs: undefined });
    assert.equal(second.info.kind, 'bridge');
    const edited = resent();
    edited[0]!.content = system.replace('careful', 'carefix');
    const third = await bridge.plan(owner, calls, { messages: edited, tools, kwargs: undefined });
    assert.notEqual(third.info.kind, 'bridge', 'a system prompt of the same length with one word changed is another conversation');
  });

  test('a long context is checked again only once it grew by FULL_RENDER_SAMPLE_GROWTH: the checks cost what the new tokens cost', async () => {
    // About 3,000 tokens of system prompt and a few dozen new tokens a turn: a quarter more is ~25 turns away.
    const checked = await checkedTurns('You are careful and you check your work. '.repeat(330), FULL_RENDER_SAMPLE_EVERY + 2);
    assert.ok(FULL_RENDER_SAMPLE_GROWTH > 0);
    assert.deepEqual(
      checked.map((c, i) => (c ? i : -1)).filter((i) => i >= 0),
      [0],
      'only the first bridge was checked',
    );
  });
});

describe('token engine: the echo of the prompt', () => {
  test('an echo equal to the ids sent passes; one id changed is a FATAL finding on the call', async () => {
    const { createServer } = await import('node:http');
    const { EngineClient } = await import('../../src/capture/engine-client.js');
    const { TokenInEngine } = await import('../../src/capture/render/token-engine.js');
    let alter = false;
    const received: number[][] = [];
    const sampled = [...renderer.encode('Done.'), IM_END];
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        const prompt = (JSON.parse(body) as { prompt: number[] }).prompt;
        received.push(prompt);
        const echo = alter ? [...prompt.slice(0, -1), prompt[prompt.length - 1]! + 1] : prompt;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            model: 'm',
            choices: [
              {
                index: 0,
                finish_reason: 'stop',
                token_ids: sampled,
                prompt_token_ids: echo,
                logprobs: { tokens: sampled.map((id) => `token_id:${id}`), token_logprobs: sampled.map(() => -0.1) },
              },
            ],
          }),
        );
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const port = (server.address() as { port: number }).port;
    const client = new EngineClient(`http://127.0.0.1:${port}`);
    try {
      const engine = new TokenInEngine(client, new InThreadRenderer(renderer), { route: '/v1/completions', maxModelLen: 4096 });
      const request = { model: 'm', messages: [{ role: 'user', content: 'Hi.' }] as ChatMessage[], max_tokens: 64 };
      const ok = await engine.complete({}, [], request);
      assert.equal(ok.status, 200);
      assert.deepEqual(received[0], (ok.body as { prompt_token_ids: number[] }).prompt_token_ids);
      assert.equal((ok.body as { choices: { message: ChatMessage }[] }).choices[0]!.message.content, 'Done.');
      assert.ok(!ok.findings.some((f) => f.startsWith('[FATAL]')));
      alter = true;
      const bad = await engine.complete({}, [], request);
      assert.ok(bad.findings.some((f) => f.startsWith('[FATAL] prompt_ids_mismatch')));
    } finally {
      await client.close();
      server.close();
    }
  });
});
