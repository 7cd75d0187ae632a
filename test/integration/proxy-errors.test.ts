// Bad input, engine failures, keepalive and late errors, admin key: every answer in the caller's terms.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CaptureProxy, ProxyConfigError } from '../../src/capture/proxy.js';
import { createSession, sseFrames, startLab, type Lab } from './helpers.js';

async function post(url: string, key: string, body: string, headers: Record<string, string> = {}) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body,
  });
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, text, json: json as Record<string, unknown> | undefined, headers: res.headers };
}

describe('bad input and engine failures', () => {
  let lab: Lab;
  before(async () => {
    lab = await startLab(
      {
        fail: (req) => {
          const last = JSON.stringify(req.messages.at(-1)?.content ?? '');
          if (last.includes('engine-400')) return { status: 400, message: 'This model does not support the requested feature' };
          if (last.includes('engine-500')) return { status: 500, message: 'CUDA out of memory' };
          if (last.includes('context-overflow')) return { status: 400, message: "This model's maximum context length is 32768 tokens" };
          return undefined;
        },
        thinkMs: 0,
      },
      { bodyLimit: 64 * 1024, keepaliveGraceMs: 30, keepaliveIntervalMs: 30 },
    );
  });
  after(() => lab.close());

  const chatUrl = () => `${lab.proxy.url}/v1/chat/completions`;

  test('malformed JSON and non-object bodies: 400 in the OpenAI error shape', async () => {
    const { session_id } = await createSession(lab.proxy);
    const bad = await post(chatUrl(), session_id, '{"model": ');
    assert.equal(bad.status, 400);
    assert.equal((bad.json?.error as Record<string, unknown>).message, 'body must be JSON');
    const arr = await post(chatUrl(), session_id, '[1,2]');
    assert.equal(arr.status, 400);
    assert.match(String((arr.json?.error as Record<string, unknown>).message), /JSON object/);
  });

  test('a body over the limit: 413, and the proxy keeps serving', async () => {
    const { session_id } = await createSession(lab.proxy);
    const big = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x'.repeat(100 * 1024) }] });
    const res = await post(chatUrl(), session_id, big);
    assert.equal(res.status, 413);
    assert.ok(res.json?.error);
    const health = await fetch(`${lab.proxy.url}/health`);
    assert.equal(health.status, 200);
  });

  test('n > 1 is refused with a clear 400', async () => {
    const { session_id } = await createSession(lab.proxy);
    const res = await post(chatUrl(), session_id, JSON.stringify({ model: 'm', n: 2, messages: [{ role: 'user', content: 'hi' }] }));
    assert.equal(res.status, 400);
    assert.match(String((res.json?.error as Record<string, unknown>).message), /n=1/);
  });

  test('engine 4xx passes through with its message; 5xx becomes 502; both are recorded as errors', async () => {
    const { session_id } = await createSession(lab.proxy);
    const four = await post(chatUrl(), session_id, JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'engine-400' }] }));
    assert.equal(four.status, 400);
    assert.match(String((four.json?.error as Record<string, unknown>).message), /does not support the requested feature/);
    const five = await post(chatUrl(), session_id, JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'engine-500' }] }));
    assert.equal(five.status, 502);
    assert.match(String((five.json?.error as Record<string, unknown>).message), /CUDA out of memory/);
    const calls = lab.proxy.sessions.calls(session_id);
    assert.deepEqual(
      calls.map((c) => c.error?.status),
      [400, 502],
    );
  });

  test('context overflow: a normal stop answer, not an error, with a session finding', async () => {
    const { session_id } = await createSession(lab.proxy);
    const res = await post(
      chatUrl(),
      session_id,
      JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'context-overflow' }] }),
    );
    assert.equal(res.status, 200);
    const choices = res.json?.choices as { message: { content: string } }[];
    assert.equal(choices[0]!.message.content, 'Step budget exhausted; stopping.');
    assert.equal(lab.proxy.sessions.calls(session_id).length, 0);
  });

  test('engine unreachable: 502 naming the engine URL', async () => {
    const proxy = await CaptureProxy.start({ engineUrl: 'http://127.0.0.1:9/v1', model: 'm' });
    try {
      const { session_id } = await createSession(proxy);
      const res = await post(
        `${proxy.url}/v1/chat/completions`,
        session_id,
        JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
      );
      assert.equal(res.status, 502);
      assert.match(String((res.json?.error as Record<string, unknown>).message), /http:\/\/127\.0\.0\.1:9/);
    } finally {
      await proxy.close();
    }
  });

  test('slow engine + streaming client: keepalive comments, then the replay', async () => {
    const slow = await startLab({ thinkMs: 150 }, { keepaliveGraceMs: 20, keepaliveIntervalMs: 20 });
    try {
      const { session_id } = await createSession(slow.proxy);
      const res = await post(
        `${slow.proxy.url}/v1/chat/completions`,
        session_id,
        JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
      );
      assert.equal(res.status, 200);
      const frames = sseFrames(res.text);
      assert.ok(frames[0]!.startsWith(':'), `first frame is a keepalive comment, got ${frames[0]}`);
      assert.equal(frames.at(-1), 'data: [DONE]');
    } finally {
      await slow.close();
    }
  });

  test('slow engine + streaming Gemini client: blank-line pings, no comment frames (its SDK cannot parse them)', async () => {
    const slow = await startLab({ thinkMs: 150 }, { keepaliveGraceMs: 20, keepaliveIntervalMs: 20 });
    try {
      const { session_id } = await createSession(slow.proxy);
      const res = await fetch(`${slow.proxy.url}/v1beta/models/m:streamGenerateContent?alt=sse`, {
        method: 'POST',
        headers: { 'x-goog-api-key': session_id, 'content-type': 'application/json' },
        body: JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'hi' }] }] }),
      });
      assert.equal(res.status, 200);
      const text = await res.text();
      assert.match(text, /^\n+data: /, 'blank-line pings came before the data');
      const frames = sseFrames(text);
      assert.ok(frames.length >= 1);
      for (const frame of frames) assert.match(frame.trimStart(), /^data: \{/, `every frame is a data event, got ${frame.slice(0, 40)}`);
    } finally {
      await slow.close();
    }
  });

  test('an engine failure after the stream started arrives as an in-stream error event', async () => {
    const slow = await startLab(
      { thinkMs: 120, fail: () => ({ status: 500, message: 'engine crashed' }) },
      { keepaliveGraceMs: 20, keepaliveIntervalMs: 20 },
    );
    try {
      const { session_id } = await createSession(slow.proxy);
      const res = await post(
        `${slow.proxy.url}/v1/chat/completions`,
        session_id,
        JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
      );
      assert.equal(res.status, 200, 'headers were already committed');
      const last = sseFrames(res.text).at(-1)!;
      assert.match(last, /^data: /);
      const event = JSON.parse(last.slice('data: '.length)) as { error: { message: string; code: number } };
      assert.match(event.error.message, /engine crashed/);
      assert.equal(event.error.code, 502);
    } finally {
      await slow.close();
    }
  });
});

describe('admin key and bind address', () => {
  test('binding beyond loopback without an admin key is refused with a clear message', async () => {
    await assert.rejects(
      () => CaptureProxy.start({ engineUrl: 'http://127.0.0.1:9', model: 'm', host: '0.0.0.0' }),
      (err: unknown) => {
        assert.ok(err instanceof ProxyConfigError);
        assert.match(err.message, /admin key/);
        return true;
      },
    );
  });

  test('session routes need the admin key when one is set; model calls use session keys', async () => {
    const lab = await startLab({}, { adminKey: 'sekrit' });
    try {
      const denied = await fetch(`${lab.proxy.url}/sessions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{}',
      });
      assert.equal(denied.status, 401);
      const wrong = await fetch(`${lab.proxy.url}/sessions`, { headers: { authorization: 'Bearer nope' } });
      assert.equal(wrong.status, 401);
      const { session_id } = await createSession(lab.proxy, {}, { 'x-admin-key': 'sekrit' });
      const listed = await fetch(`${lab.proxy.url}/sessions`, { headers: { authorization: 'Bearer sekrit' } });
      assert.equal(listed.status, 200);
      const ok = await post(
        `${lab.proxy.url}/v1/chat/completions`,
        session_id,
        JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
      );
      assert.equal(ok.status, 200);
      const health = (await (await fetch(`${lab.proxy.url}/health`)).json()) as { status: string; sessions: number };
      assert.equal(health.status, 'ok');
      assert.equal(health.sessions, 1);
    } finally {
      await lab.close();
    }
  });

  test('session ids are validated and unique', async () => {
    const lab = await startLab();
    try {
      const bad = await fetch(`${lab.proxy.url}/sessions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ session_id: '../etc' }),
      });
      assert.equal(bad.status, 400);
      await createSession(lab.proxy, { session_id: 'rollout-1' });
      const dup = await fetch(`${lab.proxy.url}/sessions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ session_id: 'rollout-1' }),
      });
      assert.equal(dup.status, 409);
      const del = (await (await fetch(`${lab.proxy.url}/sessions/rollout-1`, { method: 'DELETE' })).json()) as { deleted: boolean };
      assert.equal(del.deleted, true);
      const gone = await fetch(`${lab.proxy.url}/sessions/rollout-1`);
      assert.equal(gone.status, 404);
    } finally {
      await lab.close();
    }
  });
});
