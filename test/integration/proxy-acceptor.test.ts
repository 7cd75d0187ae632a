// The acceptor thread: /health keeps answering while the main thread is busy, says 503 once the main
// thread has gone silent, and every other connection reaches the main thread's HTTP server intact.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { createServer, request } from 'node:http';
import { after, test } from 'node:test';
import { Worker } from 'node:worker_threads';
import { AcceptorThread } from '../../src/capture/acceptor.js';
import { CaptureProxy, ProxyConfigError } from '../../src/capture/proxy.js';
import { startFakeEngine } from '../../src/engine/fake-engine.js';

/** GET from another thread on a fresh connection; resolves with status, body and when it finished. */
function getFromWorker(url: string, delayMs = 0): Promise<{ status: number; body: string; doneAt: number }> {
  const worker = new Worker(
    `const { parentPort, workerData } = require('node:worker_threads');
     new Promise((r) => setTimeout(r, workerData.delayMs)).then(() => fetch(workerData.url, { headers: { connection: 'close' } })).then(async (r) => parentPort.postMessage({ status: r.status, body: await r.text(), doneAt: Date.now() }), (e) => parentPort.postMessage({ status: 0, body: String(e), doneAt: Date.now() }));`,
    { eval: true, workerData: { url, delayMs } },
  );
  return new Promise((resolve, reject) => {
    worker.once('message', (m: { status: number; body: string; doneAt: number }) => {
      resolve(m);
      void worker.terminate();
    });
    worker.once('error', reject);
  });
}

function blockMainThread(ms: number): number {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    // a long synchronous task, as a huge record or a stuck loop would be
  }
  return end;
}

const closers: (() => Promise<unknown>)[] = [];
after(async () => {
  for (const close of closers.reverse()) await close();
});

test('/health on a fresh connection is answered while the main thread is blocked', async () => {
  const server = createServer((_req, res) => res.end('main'));
  const acceptor = await AcceptorThread.start({
    host: '127.0.0.1',
    port: 0,
    backlog: 64,
    hostNames: ['127.0.0.1', 'localhost'],
    health: () => JSON.stringify({ status: 'ok', marker: 42 }),
    onConnection: (s) => server.emit('connection', s),
  });
  closers.push(() => acceptor.close());
  const url = `http://127.0.0.1:${acceptor.address.port}`;
  const pending = getFromWorker(`${url}/health`);
  // Give the worker time to start and connect, then hold the main thread.
  await new Promise((r) => setTimeout(r, 300));
  const blockedUntil = blockMainThread(1_500);
  const health = await pending;
  assert.equal(health.status, 200);
  assert.deepEqual(JSON.parse(health.body), { status: 'ok', marker: 42 });
  assert.ok(health.doneAt < blockedUntil, 'the health answer came while the main thread was still blocked');
  // Other paths go to the main thread's server.
  assert.equal(await (await fetch(`${url}/other`)).text(), 'main');
  // So does a /health the acceptor cannot vouch for (another Host, a web page's Origin): the main
  // thread's RequestGuard decides there (the capture proxy refuses both; see proxy-origin.test.ts).
  const port = acceptor.address.port;
  const foreign: Record<string, string>[] = [
    { host: 'attacker.example' },
    { host: `attacker.example:${port}` },
    { origin: 'http://evil.localhost:9' },
  ];
  for (const headers of foreign) {
    assert.equal(await rawGet(port, '/health', headers), 'main', JSON.stringify(headers));
  }
  assert.match(await rawGet(port, '/health', { host: `LOCALHOST:${port}` }), /"marker":42/);
});

function rawGet(port: number, path: string, headers: Record<string, string>): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, headers, agent: false }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => resolve(text));
    });
    req.on('error', reject);
    req.end();
  });
}

test('/health answers 503 while the main thread is silent past the stall limit, 200 again once it beats', async () => {
  const server = createServer((_req, res) => res.end('main'));
  const acceptor = await AcceptorThread.start({
    host: '127.0.0.1',
    port: 0,
    backlog: 64,
    hostNames: ['127.0.0.1'],
    healthStallMs: 200,
    health: () => JSON.stringify({ status: 'ok' }),
    onConnection: (s) => server.emit('connection', s),
  });
  closers.push(() => acceptor.close());
  const url = `http://127.0.0.1:${acceptor.address.port}/health`;
  assert.equal((await getFromWorker(url)).status, 200);
  // The probe fires ~500 ms after its thread starts, in the middle of a 1.5 s block.
  const pending = getFromWorker(url, 500);
  const blockedUntil = blockMainThread(1_500);
  const stalled = await pending;
  assert.ok(stalled.doneAt < blockedUntil, 'answered during the block');
  assert.equal(stalled.status, 503);
  assert.match(stalled.body, /^\{"status":"stalled","main_thread_silent_ms":\d+\}$/);
  await new Promise((r) => setTimeout(r, 150));
  assert.equal((await getFromWorker(url)).status, 200, 'the heartbeat is back');
});

test('relayed connections: keep-alive requests, a streamed upload and a client that hangs up', async () => {
  let closedEarly = false;
  const server = createServer((req, res) => {
    if (req.url === '/slow') {
      res.on('close', () => (closedEarly = !res.writableFinished));
      return;
    }
    let n = 0;
    const hash = createHash('sha256');
    req.on('data', (c: Buffer) => {
      n += c.length;
      hash.update(c);
    });
    req.on('end', () => res.end(JSON.stringify({ url: req.url, bytes: n, sha256: hash.digest('hex'), remote: req.socket.remoteAddress })));
  });
  const acceptor = await AcceptorThread.start({
    host: '127.0.0.1',
    port: 0,
    backlog: 64,
    hostNames: ['127.0.0.1', 'localhost'],
    health: () => '{}',
    onConnection: (s) => server.emit('connection', s),
  });
  closers.push(() => acceptor.close());
  const { port } = acceptor.address;
  // Every byte checked, in order: the acceptor transfers a read's own buffer and copies the rest.
  const big = randomBytes(3 * 1024 * 1024 + 17);
  const sha256 = createHash('sha256').update(big).digest('hex');
  const answers = await Promise.all(
    [1, 2, 3].map((i) => fetch(`http://127.0.0.1:${port}/u${i}`, { method: 'POST', body: big }).then((r) => r.json())),
  );
  assert.deepEqual(
    answers,
    [1, 2, 3].map((i) => ({ url: `/u${i}`, bytes: big.length, sha256, remote: '127.0.0.1' })),
  );
  await new Promise<void>((resolve) => {
    const req = request({ host: '127.0.0.1', port, path: '/slow' });
    req.on('error', () => resolve());
    req.end();
    setTimeout(() => {
      req.destroy();
      resolve();
    }, 200);
  });
  for (let i = 0; i < 50 && !closedEarly; i++) await new Promise((r) => setTimeout(r, 20));
  assert.ok(closedEarly, 'the main thread saw the client hang up');
});

test('the proxy through its acceptor: /health counts a session at once; a taken port is a clear error', async () => {
  const engine = await startFakeEngine({ thinkMs: 0 });
  closers.push(() => engine.close());
  const proxy = await CaptureProxy.start({ engineUrl: engine.url, model: 'fake/qwen3-tiny' });
  closers.push(() => proxy.close());
  const health = async () =>
    (await (await fetch(`${proxy.url}/health`, { headers: { connection: 'close' } })).json()) as { sessions: number; status: string };
  assert.equal((await health()).sessions, 0);
  assert.equal(
    (await fetch(`${proxy.url}/sessions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })).status,
    201,
  );
  assert.deepEqual([(await health()).status, (await health()).sessions], ['ok', 1]);
  await assert.rejects(
    CaptureProxy.start({ engineUrl: engine.url, model: 'm', port: proxy.port }),
    (err: unknown) => err instanceof ProxyConfigError && /already in use/.test(err.message),
  );
});

test('if the acceptor thread dies, the proxy says so and listens again on the same port', async () => {
  const engine = await startFakeEngine({ thinkMs: 0 });
  closers.push(() => engine.close());
  const errors: string[] = [];
  const proxy = await CaptureProxy.start({
    engineUrl: engine.url,
    model: 'fake/qwen3-tiny',
    logger: { info() {}, warn() {}, error: (m) => errors.push(m) },
  });
  closers.push(() => proxy.close());
  const { session_id } = (await (
    await fetch(`${proxy.url}/sessions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })
  ).json()) as { session_id: string };
  // Stand-in for a crash: the thread ends without close().
  await (proxy as unknown as { acceptor: { worker: Worker } }).acceptor.worker.terminate();
  let status = 0;
  for (let i = 0; i < 100 && status !== 200; i++) {
    status = await fetch(`${proxy.url}/health`, { headers: { connection: 'close' } }).then(
      (r) => r.status,
      () => 0,
    );
    if (status !== 200) await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(status, 200, 'listening again');
  assert.match(errors.join('\n'), /the acceptor thread stopped \(exit code 1\); listening again on 127\.0\.0\.1:\d+/);
  const call = await fetch(`${proxy.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${session_id}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'still here?' }] }),
  });
  assert.equal(call.status, 200, 'sessions survive: the same key works on the new acceptor');
});
