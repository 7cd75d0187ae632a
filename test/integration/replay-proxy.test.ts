// The proxy answering from a record (RecordedEngine behind the ChatEngine seam): streamed answers come
// back as recorded in each dialect, a changed request halts with an error in the caller's dialect,
// and a fork takes its calls from a live engine from its turn on. No harness, no Docker.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { EngineClient } from '../../src/capture/engine-client.js';
import { CaptureProxy } from '../../src/capture/proxy.js';
import { startFakeEngine, type FakeEngine } from '../../src/engine/fake-engine.js';
import { RecordedEngine } from '../../src/replay/recorded-engine.js';
import { loadReplaySource, type ReplaySource } from '../../src/replay/source.js';
import { bashTool, createSession, sseFrames, startLab, type Lab } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'hl-replay-proxy-'));
let lab: Lab;
let source: ReplaySource;
/** What the original calls streamed back, per call. */
const originalStreams: string[] = [];

const chatBody = (system: string, extra: Record<string, unknown>[] = []) => ({
  model: 'whatever',
  stream: true,
  messages: [{ role: 'system', content: system }, { role: 'user', content: 'Count the lines of notes.txt' }, ...extra],
  tools: [bashTool],
});
const anthropicBody = (system: string) => ({
  model: 'claude-x',
  max_tokens: 512,
  stream: true,
  system,
  messages: [{ role: 'user', content: 'Say hi' }],
});

async function post(base: string, path: string, key: string, body: unknown): Promise<{ status: number; text: string }> {
  const res = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, 'x-api-key': key },
    body: JSON.stringify(body),
  });
  return { status: res.status, text: await res.text() };
}

before(async () => {
  lab = await startLab({}, { captureLevel: 'tokens' });
  const { session_id: id } = await createSession(lab.proxy, { metadata: { task: 'demo', harness: 'react' } });
  const first = await post(lab.proxy.url, '/v1/chat/completions', id, chatBody('You are terse.'));
  originalStreams.push(first.text);
  const call = JSON.parse(sseFrames(first.text)[0]!.slice(6)) as {
    choices: { delta: { tool_calls: { id: string; function: { name: string; arguments: string } }[] } }[];
  };
  const tc = call.choices[0]!.delta.tool_calls[0]!;
  const toolTurn = [
    { role: 'assistant', content: null, tool_calls: [{ id: tc.id, type: 'function', function: tc.function }] },
    { role: 'tool', tool_call_id: tc.id, content: '3 notes.txt' },
  ];
  originalStreams.push((await post(lab.proxy.url, '/v1/chat/completions', id, chatBody('You are terse.', toolTurn))).text);
  originalStreams.push((await post(lab.proxy.url, '/v1/messages', id, anthropicBody('Be brief.'))).text);
  const file = join(dir, 'session.rollout.json');
  writeFileSync(file, JSON.stringify(lab.proxy.sessions.rollout(id)));
  source = loadReplaySource(file);
  assert.equal(source.calls.length, 3);
  assert.equal(source.capture_level, 'tokens');
});

after(async () => {
  await lab.close();
  rmSync(dir, { recursive: true, force: true });
});

async function replayProxy(engine: RecordedEngine): Promise<CaptureProxy> {
  return CaptureProxy.start({
    engineUrl: engine.baseUrl,
    engine,
    model: source.model!,
    captureLevel: source.capture_level,
    acceptorThread: false,
  });
}

/** The SSE frames without what the dialect mints per answer (Anthropic message ids). */
const stable = (text: string) => text.replace(/msg_[0-9a-f-]+/g, 'msg_*');

test('every call is answered from the record, streamed exactly as the original was, with its token data recorded again', async () => {
  const engine = new RecordedEngine(source);
  const proxy = await replayProxy(engine);
  try {
    const { session_id: id } = await createSession(proxy);
    const first = await post(proxy.url, '/v1/chat/completions', id, chatBody('You are terse.'));
    assert.equal(first.status, 200);
    assert.equal(first.text, originalStreams[0]);
    const call = JSON.parse(sseFrames(first.text)[0]!.slice(6)) as {
      choices: { delta: { tool_calls: { id: string; function: { name: string; arguments: string } }[] } }[];
    };
    const tc = call.choices[0]!.delta.tool_calls[0]!;
    const toolTurn = [
      { role: 'assistant', content: null, tool_calls: [{ id: tc.id, type: 'function', function: tc.function }] },
      { role: 'tool', tool_call_id: tc.id, content: '3 notes.txt' },
    ];
    assert.equal((await post(proxy.url, '/v1/chat/completions', id, chatBody('You are terse.', toolTurn))).text, originalStreams[1]);
    const anthropic = await post(proxy.url, '/v1/messages', id, anthropicBody('Be brief.'));
    assert.equal(stable(anthropic.text), stable(originalStreams[2]!));
    assert.match(anthropic.text, /^event: message_start/);
    assert.deepEqual(
      engine.calls.map((c) => [c.level, c.recorded_index]),
      [
        ['exact', 0],
        ['exact', 1],
        ['exact', 2],
      ],
    );
    assert.deepEqual(engine.unasked, []);
    assert.equal(engine.halt, null);
    const replayed = proxy.sessions.calls(id);
    assert.deepEqual(
      replayed.map((c) => c.completion_token_ids),
      source.calls.map((c) => c.completion_token_ids),
    );
    assert.deepEqual(
      replayed.map((c) => c.prompt_token_ids),
      source.calls.map((c) => c.prompt_token_ids),
    );
    assert.deepEqual(
      replayed.map((c) => c.logprobs),
      source.calls.map((c) => c.logprobs),
    );
  } finally {
    await proxy.close();
  }
});

test('a changed system prompt halts at the first call: the harness gets an error in its dialect, later calls too', async () => {
  const engine = new RecordedEngine(source);
  let halted = 0;
  engine.onHalt(() => halted++);
  const proxy = await replayProxy(engine);
  try {
    const { session_id: id } = await createSession(proxy);
    const anthropic = await post(proxy.url, '/v1/messages', id, anthropicBody('Be verbose.'));
    assert.equal(anthropic.status, 400);
    const body = JSON.parse(anthropic.text) as { type: string; error: { type: string; message: string } };
    assert.equal(body.type, 'error');
    assert.match(
      body.error.message,
      /call 0 matches no recorded call; against recorded call 0 the first difference is messages\[0\]\.content/,
    );
    assert.equal(engine.halt?.position, 0);
    assert.equal(engine.halt?.expected_index, 0);
    assert.equal(engine.halt?.difference?.path, 'messages[0].content');
    const later = await post(proxy.url, '/v1/chat/completions', id, chatBody('You are terse.'));
    assert.equal(later.status, 400);
    assert.match(later.text, /the replay halted at call 0/);
    assert.equal(halted, 1);
    assert.deepEqual(engine.unasked, [0, 1, 2]);
  } finally {
    await proxy.close();
  }
});

test('calls sent in another order are matched to their recorded counterparts (concurrent title and turn)', async () => {
  const engine = new RecordedEngine(source);
  const proxy = await replayProxy(engine);
  try {
    const { session_id: id } = await createSession(proxy);
    assert.equal(stable((await post(proxy.url, '/v1/messages', id, anthropicBody('Be brief.'))).text), stable(originalStreams[2]!));
    assert.equal((await post(proxy.url, '/v1/chat/completions', id, chatBody('You are terse.'))).text, originalStreams[0]);
    assert.deepEqual(
      engine.calls.map((c) => c.recorded_index),
      [2, 0],
    );
    assert.deepEqual(engine.unasked, [1]);
  } finally {
    await proxy.close();
  }
});

test('a fork answers calls before its turn from the record and the rest from the live engine', async () => {
  const live: FakeEngine = await startFakeEngine({ script: () => ({ content: 'a different answer' }) });
  const engine = new RecordedEngine(source, { fromTurn: 1, engine: new EngineClient(live.url) });
  const proxy = await replayProxy(engine);
  try {
    const { session_id: id } = await createSession(proxy);
    assert.equal((await post(proxy.url, '/v1/chat/completions', id, chatBody('You are terse.'))).text, originalStreams[0]);
    const second = await post(proxy.url, '/v1/chat/completions', id, chatBody('You are terse.', [{ role: 'user', content: 'and now?' }]));
    assert.equal(second.status, 200);
    assert.match(second.text, /a different answer/);
    assert.deepEqual(
      engine.calls.map((c) => c.level),
      ['exact', 'live'],
    );
    assert.equal(live.requests.length, 1);
  } finally {
    await proxy.close();
    await live.close();
  }
});
