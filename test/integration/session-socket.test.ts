// The session socket (src/capture/session-socket.ts) against a real proxy and the fake engine: its own
// key reaches every dialect's model route (streaming included) and /v1/models; any other key, the
// admin and session routes, /health and /engines are refused whatever key is shown; the call lands in
// the right session; closing it removes the socket and cuts it off.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { SessionSocket, isSessionSocketRoute, removeStaleSessionSocketDirs } from '../../src/capture/session-socket.js';
import { sseFrames, startLab, type Lab } from './helpers.js';

interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

function viaSocket(socketPath: string, method: string, path: string, headers: Record<string, string> = {}, body?: unknown): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const text = body === undefined ? undefined : JSON.stringify(body);
    const req = request(
      {
        socketPath,
        method,
        path,
        headers: { ...(text ? { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)) } : {}), ...headers },
      },
      (res) => {
        let data = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (data += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: data }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(text);
  });
}

const chat = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };

describe('session socket', () => {
  let lab: Lab;
  let mine: string;
  let sibling: string;
  let socket: SessionSocket;
  before(async () => {
    lab = await startLab({}, { adminKey: 'the-admin-key', captureLevel: 'tokens' });
    mine = lab.proxy.sessions.create({ metadata: { who: 'me' } }).session_id;
    sibling = lab.proxy.sessions.create({ metadata: { who: 'sibling' } }).session_id;
    socket = await SessionSocket.open(lab.proxy, mine);
  });
  after(async () => {
    await socket?.close();
    await lab?.close();
  });

  test('routes it serves, by method and path', () => {
    assert.equal(isSessionSocketRoute('POST', '/v1/chat/completions'), 'model-call');
    assert.equal(isSessionSocketRoute('POST', '/v1/responses'), 'model-call');
    assert.equal(isSessionSocketRoute('POST', '/v1/messages'), 'model-call');
    assert.equal(isSessionSocketRoute('POST', '/v1/messages/count_tokens'), 'model-call');
    assert.equal(isSessionSocketRoute('POST', '/v1beta/models/m:streamGenerateContent'), 'model-call');
    assert.equal(isSessionSocketRoute('GET', '/v1/models'), 'models');
    assert.equal(isSessionSocketRoute('HEAD', '/'), 'root');
    for (const [m, p] of [
      ['GET', '/sessions'],
      ['POST', '/sessions'],
      ['DELETE', '/sessions/x'],
      ['GET', '/health'],
      ['GET', '/engines'],
      ['POST', '/sessions/x/rollout'],
      ['GET', '/v1/chat/completions'],
      ['POST', '/v1/models'],
    ] as const) {
      assert.equal(isSessionSocketRoute(m, p), undefined, `${m} ${p}`);
    }
  });

  test('its own key gets model calls in all four dialects, streamed and not, recorded in its own session', async () => {
    const auth = { authorization: `Bearer ${mine}` };
    const r1 = await viaSocket(socket.path, 'POST', '/v1/chat/completions', auth, chat);
    assert.equal(r1.status, 200, r1.body);
    assert.equal(JSON.parse(r1.body).object, 'chat.completion');
    const r2 = await viaSocket(socket.path, 'POST', '/v1/chat/completions', auth, { ...chat, stream: true });
    assert.equal(r2.status, 200, r2.body);
    assert.match(String(r2.headers['content-type']), /text\/event-stream/);
    const frames = sseFrames(r2.body);
    assert.equal(frames.at(-1), 'data: [DONE]');
    const r3 = await viaSocket(socket.path, 'POST', '/v1/responses', auth, { model: 'm', input: 'hi', stream: true });
    assert.equal(r3.status, 200, r3.body);
    assert.match(r3.body, /event: response\.completed/);
    const r4 = await viaSocket(
      socket.path,
      'POST',
      '/v1/messages?beta=true',
      { 'x-api-key': mine, 'anthropic-version': '2023-06-01' },
      { model: 'm', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] },
    );
    assert.equal(r4.status, 200, r4.body);
    assert.equal(JSON.parse(r4.body).type, 'message');
    const r5 = await viaSocket(
      socket.path,
      'POST',
      '/v1beta/models/m:streamGenerateContent?alt=sse',
      { 'x-goog-api-key': mine },
      { contents: [{ role: 'user', parts: [{ text: 'hi' }] }] },
    );
    assert.equal(r5.status, 200, r5.body);
    assert.match(r5.body, /"candidates"/);
    const models = await viaSocket(socket.path, 'GET', '/v1/models', auth);
    assert.equal(models.status, 200);
    assert.ok(JSON.parse(models.body).data.length >= 1);
    assert.equal((await viaSocket(socket.path, 'HEAD', '/')).status, 200);
    assert.equal(lab.proxy.sessions.calls(mine).length, 5);
    assert.equal(lab.proxy.sessions.calls(sibling).length, 0);
  });

  test('another session id, a guessed key, the admin key and no key are refused on model routes', async () => {
    for (const headers of [
      { authorization: `Bearer ${sibling}` },
      { authorization: 'Bearer guess' },
      { authorization: 'Bearer the-admin-key' },
      {},
    ] as Record<string, string>[]) {
      const r = await viaSocket(socket.path, 'POST', '/v1/chat/completions', headers, chat);
      assert.equal(r.status, 401, JSON.stringify(headers));
      assert.match(JSON.parse(r.body).error.message, /API key/);
      assert.equal((await viaSocket(socket.path, 'GET', '/v1/models', headers)).status, 401);
    }
    // The Gemini ?key= form is a key too.
    assert.equal(
      (
        await viaSocket(
          socket.path,
          'POST',
          `/v1beta/models/m:generateContent?key=${sibling}`,
          {},
          { contents: [{ role: 'user', parts: [{ text: 'hi' }] }] },
        )
      ).status,
      401,
    );
    assert.equal(lab.proxy.sessions.calls(sibling).length, 0, 'nothing was recorded for the sibling');
  });

  test('admin, session, health and engine routes do not exist here, whatever key is presented', async () => {
    const keys: Record<string, string>[] = [
      {},
      { authorization: 'Bearer the-admin-key' },
      { 'x-admin-key': 'the-admin-key' },
      { authorization: `Bearer ${mine}` },
    ];
    for (const headers of keys) {
      for (const [method, path, body] of [
        ['GET', '/sessions'],
        ['POST', '/sessions', {}],
        ['GET', `/sessions/${sibling}/calls`],
        ['GET', `/sessions/${mine}/rollout`],
        ['DELETE', `/sessions/${mine}`],
        ['GET', '/health'],
        ['GET', '/engines'],
      ] as [string, string, unknown?][]) {
        const r = await viaSocket(socket.path, method, path, headers, body);
        assert.equal(r.status, 404, `${method} ${path} ${JSON.stringify(headers)}: ${r.body}`);
        assert.deepEqual(Object.keys(JSON.parse(r.body)), ['error'], 'an error and no data');
      }
    }
    assert.equal(lab.proxy.sessions.list().length, 2, 'no session was minted or deleted');
    assert.ok(lab.proxy.sessions.get(mine));
  });

  test('an unknown session cannot get a socket; closing removes the socket and its folder', async () => {
    await assert.rejects(SessionSocket.open(lab.proxy, 'snope'), /unknown session snope/);
    const s = await SessionSocket.open(lab.proxy, sibling);
    assert.ok(statSync(s.path).isSocket());
    assert.equal(statSync(s.dir).mode & 0o777, 0o700, 'only the lab user (and the container root) can reach it');
    await s.stop();
    assert.equal(s.closed, true);
    assert.equal(existsSync(s.path), false, 'stop() removes the socket');
    assert.ok(statSync(s.dir).isDirectory(), 'and keeps the folder a sandbox may still mount');
    await assert.rejects(viaSocket(s.path, 'GET', '/'), /ENOENT|ECONNREFUSED/);
    await s.close();
    await s.close();
    assert.equal(existsSync(s.dir), false, 'close() removes the folder');
    assert.match(s.dir, new RegExp(`hl-sock-${process.pid}-`), 'the folder names its lab process');
  });

  test('folders of lab processes that are gone are removed, live ones and strangers kept', () => {
    const root = mkdtempSync(join(tmpdir(), 'hl-sockroot-'));
    for (const name of ['hl-sock-111-aaaa', 'hl-sock-222-bbbb', 'hl-sock-x-cccc', 'other']) mkdirSync(join(root, name));
    assert.deepEqual(
      removeStaleSessionSocketDirs((pid) => pid === 111, root),
      ['hl-sock-222-bbbb'],
    );
    assert.deepEqual(readdirSync(root).sort(), ['hl-sock-111-aaaa', 'hl-sock-x-cccc', 'other']);
    rmSync(root, { recursive: true, force: true });
  });
});
