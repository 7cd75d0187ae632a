// The loopback servers against a web page and a DNS-rebinding attacker, at the HTTP level (the same
// attacks from a real browser page: test/e2e/loopback-browser.e2e.test.ts). The capture proxy (its
// acceptor thread's /health included), `harness-lab serve` (the real CLI, /ws upgrades and /mcp) and
// the embedded engine refuse a Host that is not theirs, a foreign Origin and a POST that is not JSON,
// each in the caller's dialect; local tools (no Origin, a loopback Host, application/json with or
// without a charset) and names given with --allowed-host keep working. Admin keys come from headers
// only.
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { after, before, describe, test } from 'node:test';
import WebSocket from 'ws';
import { CaptureProxy } from '../../src/capture/proxy.js';
import { startTestEngine } from './engine-fixture.js';
import { EXAMPLES } from './sandbox-fixtures.js';
import { startServe, tempDir, type ServeProcess } from './serve-fixtures.js';
import type { EmbeddedEngine } from '../../src/engine/embedded-engine.js';
import { startFakeEngine, type FakeEngine } from '../../src/engine/fake-engine.js';

interface Answer {
  status: number;
  body: string;
}

/** A raw request: node:http lets a test set Host and Origin, as an attacker's browser would send them. */
function send(url: string, opts: { method?: string; path: string; headers?: Record<string, string>; body?: string }): Promise<Answer> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request(
      { host: u.hostname, port: u.port, method: opts.method ?? 'GET', path: opts.path, headers: opts.headers ?? {} },
      (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('error', reject);
    req.end(opts.body);
  });
}

const REBIND = { host: 'attacker.example' };
const chatBody = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });

describe('capture proxy', () => {
  let proxy: CaptureProxy;
  let engine: EmbeddedEngine;
  const admin = 'admin-key-for-the-guard-test';
  before(async () => {
    engine = await startTestEngine();
    proxy = await CaptureProxy.start({
      engineUrl: engine.url,
      model: engine.engine.modelName,
      adminKey: admin,
      captureLevel: 'tokens',
      allowedHosts: ['harness-lab-proxy.lab.svc'],
    });
  });
  after(async () => {
    await proxy?.close();
    await engine?.close();
  });

  test('DNS rebinding: a foreign Host is refused on every route, /health on the acceptor thread included', async () => {
    const port = proxy.port;
    for (const host of ['attacker.example', `attacker.example:${port}`, `127.0.0.1.attacker.example:${port}`]) {
      for (const path of ['/health', '/sessions', '/v1/models', '/']) {
        const r = await send(proxy.url, { path, headers: { host, authorization: `Bearer ${admin}` } });
        assert.equal(r.status, 403, `${host} ${path}: ${r.body}`);
        assert.match(r.body, /does not answer to Host 'attacker|does not answer to Host '127\.0\.0\.1\.attacker/);
        assert.doesNotMatch(r.body, /"sessions"|"instance"|"upstream"/, 'a refusal carries no data');
      }
    }
    // A model call is refused in its own dialect (Anthropic's error envelope here).
    const anthropic = await send(proxy.url, {
      method: 'POST',
      path: '/v1/messages',
      headers: { ...REBIND, 'content-type': 'application/json', 'x-api-key': 'k', 'anthropic-version': '2023-06-01' },
      body: chatBody,
    });
    assert.equal(anthropic.status, 403);
    assert.equal(JSON.parse(anthropic.body).type, 'error');
    // Its own names still work: loopback in any spelling, and the name it was told to serve.
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, 'LOCALHOST', `harness-lab-proxy.lab.svc:${port}`]) {
      const r = await send(proxy.url, { path: '/health', headers: { host } });
      assert.equal(r.status, 200, `${host}: ${r.body}`);
    }
  });

  test('a web page: a foreign Origin is refused, the own origin and no Origin are not', async () => {
    const headers = { authorization: `Bearer ${admin}` };
    for (const origin of ['http://evil.example', 'http://localhost:1', 'null', `http://127.0.0.1:${proxy.port}.evil.example`]) {
      const r = await send(proxy.url, { path: '/sessions', headers: { ...headers, origin } });
      assert.equal(r.status, 403, `${origin}: ${r.body}`);
      assert.match(r.body, /requests from web pages/);
    }
    assert.equal(
      (await send(proxy.url, { path: '/sessions', headers: { ...headers, origin: `http://127.0.0.1:${proxy.port}` } })).status,
      200,
    );
    assert.equal((await send(proxy.url, { path: '/sessions', headers })).status, 200);
  });

  test('POST bodies must be application/json (a charset is fine); text/plain, forms and no type are refused', async () => {
    const headers = { authorization: `Bearer ${admin}` };
    for (const type of ['text/plain', 'text/plain;charset=UTF-8', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
      const r = await send(proxy.url, { method: 'POST', path: '/sessions', headers: { ...headers, 'content-type': type }, body: '{}' });
      assert.equal(r.status, 415, `${type}: ${r.body}`);
      assert.match(JSON.parse(r.body).error.message, /must be application\/json/);
    }
    assert.equal(
      (await send(proxy.url, { method: 'POST', path: '/sessions', headers, body: '{}' })).status,
      415,
      'a body without a content type',
    );
    const created = await send(proxy.url, {
      method: 'POST',
      path: '/sessions',
      headers: { ...headers, 'content-type': 'application/json; charset=utf-8' },
      body: '{"mint_key":true}',
    });
    assert.equal(created.status, 201, created.body);
    const key = JSON.parse(created.body).api_key as string;
    // A model call in text/plain is refused in the OpenAI dialect; application/json goes through.
    const plain = await send(proxy.url, {
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'text/plain' },
      body: chatBody,
    });
    assert.equal(plain.status, 415);
    assert.equal(typeof JSON.parse(plain.body).error.message, 'string');
    const ok = await send(proxy.url, {
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: chatBody,
    });
    assert.equal(ok.status, 200, ok.body);
  });

  test('the admin key is taken from headers only: ?key= and ?admin_key= are refused', async () => {
    for (const path of [`/sessions?key=${admin}`, `/sessions?admin_key=${admin}`])
      assert.equal((await send(proxy.url, { path })).status, 401, path);
    assert.equal((await send(proxy.url, { path: '/sessions', headers: { 'x-admin-key': admin } })).status, 200);
    assert.equal(
      (await send(proxy.url, { path: '/sessions', headers: { authorization: `Basic ${Buffer.from(`lab:${admin}`).toString('base64')}` } }))
        .status,
      200,
    );
    assert.equal((await send(proxy.url, { path: '/sessions', headers: { 'x-admin-key': `${admin}x` } })).status, 401);
  });
});

describe('harness-lab serve', () => {
  let serve: ServeProcess;
  const key = 'serve-guard-key';
  before(async () => {
    serve = await startServe([
      '--dataset',
      `ex=${EXAMPLES}`,
      '--admin-key',
      key,
      '--allowed-host',
      'trainer-gateway.internal',
      '--state-dir',
      tempDir('hl-serve-guard-'),
    ]);
  });
  after(async () => {
    serve?.child.kill('SIGTERM');
    await serve?.exited;
  });
  const auth = () => ({ authorization: `Bearer ${key}` });

  test('DNS rebinding and foreign Origins are refused on HTTP routes and on the /ws upgrade', async () => {
    const r = await send(serve.url, { path: '/harbor_env/splits', headers: { ...auth(), ...REBIND } });
    assert.equal(r.status, 403);
    assert.match(JSON.parse(r.body).detail, /does not answer to Host 'attacker\.example'/);
    const mcp = await send(serve.url, {
      method: 'POST',
      path: '/mcp',
      headers: { ...auth(), origin: 'http://evil.example', 'content-type': 'application/json' },
      body: '{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
    });
    assert.equal(mcp.status, 403);
    for (const headers of [{ origin: 'http://evil.example' }, { host: 'attacker.example' }]) {
      const refused = await new Promise<number>((resolve) => {
        const ws = new WebSocket(`${serve.url.replace('http', 'ws')}/ws`, { headers: { ...auth(), ...headers } });
        ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
        ws.on('open', () => (ws.close(), resolve(101)));
        ws.on('error', () => resolve(-1));
      });
      assert.equal(refused, 403, JSON.stringify(headers));
    }
    assert.match(serve.stderr(), /refused upgrade \/ws/);
    // The trainer's client: no Origin, the server's own name or one it was told to serve.
    assert.equal(
      (await send(serve.url, { path: '/harbor_env/splits', headers: { ...auth(), host: 'trainer-gateway.internal:8000' } })).status,
      200,
    );
    const opened = await new Promise<boolean>((resolve) => {
      const ws = new WebSocket(`${serve.url.replace('http', 'ws')}/ws`, { headers: auth() });
      ws.on('open', () => (ws.close(), resolve(true)));
      ws.on('error', () => resolve(false));
    });
    assert.equal(opened, true);
  });

  test('a text/plain POST is refused; the admin key only from headers, compared whole', async () => {
    const plain = await send(serve.url, {
      method: 'POST',
      path: '/harbor_env/num_tasks',
      headers: { ...auth(), 'content-type': 'text/plain' },
      body: '{"split":"ex"}',
    });
    assert.equal(plain.status, 415);
    assert.match(JSON.parse(plain.body).detail, /must be application\/json/);
    const json = await send(serve.url, {
      method: 'POST',
      path: '/harbor_env/num_tasks',
      headers: { ...auth(), 'content-type': 'application/json' },
      body: '{"split":"ex"}',
    });
    assert.equal(json.status, 200, json.body);
    assert.equal((await send(serve.url, { path: `/harbor_env/splits?admin_key=${key}` })).status, 401);
    for (const wrong of [key.slice(0, -1), `${key}-`, ''])
      assert.equal(
        (await send(serve.url, { path: '/harbor_env/splits', headers: { authorization: `Bearer ${wrong}` } })).status,
        401,
        wrong,
      );
    assert.equal(
      (
        await send(serve.url, {
          path: '/harbor_env/splits',
          headers: { authorization: `Basic ${Buffer.from(`trainer:${key}`).toString('base64')}` },
        })
      ).status,
      200,
    );
  });
});

describe('embedded engine', () => {
  let engine: EmbeddedEngine;
  before(async () => {
    engine = await startTestEngine({ allowedHosts: ['engine.internal'] });
  });
  after(() => engine?.close());

  test("DNS rebinding, a foreign Origin and a text/plain POST are refused in vLLM's error shape", async () => {
    const rebound = await send(engine.url, { path: '/v1/models', headers: REBIND });
    assert.equal(rebound.status, 403);
    assert.equal(JSON.parse(rebound.body).error.type, 'PermissionDeniedError');
    const origin = await send(engine.url, {
      method: 'POST',
      path: '/tokenize',
      headers: { origin: 'http://evil.example', 'content-type': 'application/json' },
      body: '{"prompt":"hi"}',
    });
    assert.equal(origin.status, 403);
    const plain = await send(engine.url, {
      method: 'POST',
      path: '/tokenize',
      headers: { 'content-type': 'text/plain' },
      body: '{"prompt":"hi"}',
    });
    assert.equal(plain.status, 415);
    assert.equal(JSON.parse(plain.body).error.code, 415);
    assert.equal((await send(engine.url, { path: '/v1/models', headers: { host: 'engine.internal' } })).status, 200);
    assert.equal(
      (
        await send(engine.url, {
          method: 'POST',
          path: '/tokenize',
          headers: { 'content-type': 'application/json' },
          body: '{"prompt":"hi"}',
        })
      ).status,
      200,
    );
  });
});

describe('scripted-policy engine (task policies)', () => {
  let engine: FakeEngine;
  before(async () => {
    engine = await startFakeEngine();
  });
  after(() => engine?.close());

  test('DNS rebinding, a foreign Origin and a text/plain POST are refused; a local client is answered', async () => {
    const rebound = await send(engine.url, { path: '/v1/models', headers: REBIND });
    assert.equal(rebound.status, 403);
    assert.equal(JSON.parse(rebound.body).error.type, 'PermissionDeniedError');
    const headers = { origin: 'http://evil.example', 'content-type': 'application/json' };
    assert.equal((await send(engine.url, { method: 'POST', path: '/v1/chat/completions', headers, body: chatBody })).status, 403);
    const plain = { 'content-type': 'text/plain' };
    assert.equal((await send(engine.url, { method: 'POST', path: '/v1/chat/completions', headers: plain, body: chatBody })).status, 415);
    const local = { 'content-type': 'application/json' };
    assert.equal((await send(engine.url, { method: 'POST', path: '/v1/chat/completions', headers: local, body: chatBody })).status, 200);
    assert.equal(engine.requests.length, 1);
  });
});
