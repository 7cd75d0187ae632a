// The proxy and the embedded engine survive what users do (#28): a restarted proxy binds its port
// again and a keyed session created before still answers; an engine swap under a running proxy moves
// traffic to the new engine without closing the port; the owned engine is remembered outside settings.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CaptureProxy, type ProxyLogger } from '../../src/capture/proxy.js';
import { startFakeEngine } from '../../src/engine/fake-engine.js';
import { EngineSlot, OwnedEngineSchema, type OwnedEngine } from '../../src/extension/embedded-engine-process.js';
import { ProxyController } from '../../src/extension/proxy-controller.js';
import { readSettings } from '../../src/extension/settings.js';

const dirs: string[] = [];
after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'hl-life-'));
  dirs.push(d);
  return d;
}

function recordingLogger(): ProxyLogger & { lines: string[] } {
  const lines: string[] = [];
  return { lines, info: (m) => lines.push(`info ${m}`), warn: (m) => lines.push(`warn ${m}`), error: (m) => lines.push(`error ${m}`) };
}

const settings = (over: Record<string, unknown>) => readSettings((k) => over[k]);

async function chat(proxyUrl: string, key: string): Promise<{ status: number; body: { choices?: { message: { content: string } }[] } }> {
  const res = await fetch(`${proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }),
  });
  return { status: res.status, body: (await res.json()) as { choices?: { message: { content: string } }[] } };
}

test('a restarted proxy listens on its former port and a keyed session made before still answers', async () => {
  const engine = await startFakeEngine({ model: 'fake/m' });
  const dataDir = tempDir();
  const log = recordingLogger();
  const controller = new ProxyController({
    startProxy: (o) => CaptureProxy.start({ ...o, captureLevel: 'tokens' }),
    logger: log,
    defaultDataDir: dataDir,
  });
  try {
    const s = settings({ engineUrl: engine.url, model: engine.model, dataDir });
    const first = await controller.start(s, undefined);
    const port = first.port;
    const created = first.sessions.create({ mint_key: true, metadata: { source: 'terminal' } });
    assert.equal((await chat(first.url, created.api_key!)).status, 200);
    await controller.stop();
    assert.equal(controller.rememberedPort, port, 'the port is remembered while stopped');
    const second = await controller.start(s, undefined);
    assert.equal(second.port, port, 'proxyPort 0 binds the former port again');
    const again = await chat(second.url, created.api_key!);
    assert.equal(again.status, 200, `the terminal's key still opens its session: ${JSON.stringify(again.body)}`);
    assert.equal(controller.getCalls(created.session_id).length, 2, 'both calls are in the same session');
  } finally {
    await controller.stop();
    controller.dispose();
    await engine.close();
  }
});

test('a remembered port that is taken now falls back to any free port, and says so', async () => {
  const engine = await startFakeEngine({ model: 'fake/m' });
  const blocker = createServer();
  await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', () => r()));
  const taken = (blocker.address() as { port: number }).port;
  const log = recordingLogger();
  const controller = new ProxyController({
    startProxy: (o) => CaptureProxy.start({ ...o, captureLevel: 'tokens' }),
    logger: log,
    defaultDataDir: tempDir(),
    rememberedPort: taken,
  });
  try {
    const proxy = await controller.start(settings({ engineUrl: engine.url, model: engine.model }), undefined);
    assert.notEqual(proxy.port, taken);
    assert.equal(controller.rememberedPort, proxy.port);
    assert.ok(
      log.lines.some((l) => l.startsWith('warn') && l.includes(`port ${taken}`) && /captured terminals/.test(l)),
      log.lines.join('\n'),
    );
  } finally {
    await controller.stop();
    controller.dispose();
    blocker.close();
    await engine.close();
  }
});

test('an explicit proxyPort setting wins over the remembered port', async () => {
  const seen: (number | undefined)[] = [];
  const controller = new ProxyController({
    startProxy: async (o) => (
      seen.push(o.port),
      { url: `http://127.0.0.1:${o.port}`, port: o.port!, sessions: {} as never, close: async () => undefined }
    ),
    logger: recordingLogger(),
    defaultDataDir: '/d',
    rememberedPort: 40001,
  });
  await controller.start(settings({ engineUrl: 'http://127.0.0.1:9', model: 'm', proxyPort: 40555 }), undefined).catch(() => undefined);
  assert.deepEqual(seen, [40555]);
  controller.dispose();
});

test('an engine swap under a running proxy: same port, same session, the next call answered by the new engine', async () => {
  const oldEngine = await startFakeEngine({ model: 'fake/m', script: () => ({ content: 'from the old engine' }) });
  const newEngine = await startFakeEngine({ model: 'fake/m', script: () => ({ content: 'from the new engine' }) });
  const controller = new ProxyController({
    startProxy: (o) => CaptureProxy.start({ ...o, captureLevel: 'tokens' }),
    logger: recordingLogger(),
    defaultDataDir: tempDir(),
  });
  try {
    const proxy = await controller.start(settings({ engineUrl: oldEngine.url, model: 'fake/m' }), undefined);
    const { api_key: key } = proxy.sessions.create({ mint_key: true });
    assert.equal((await chat(proxy.url, key!)).body.choices?.[0]?.message.content, 'from the old engine');
    assert.equal(await controller.retarget(newEngine.url), true);
    assert.equal(controller.runningEngineUrl, newEngine.url);
    assert.equal(controller.running, proxy, 'the same proxy (and port) keeps running');
    await oldEngine.close(); // the old engine stops only after the proxy moved off it
    const after = await chat(proxy.url, key!);
    assert.equal(after.status, 200, JSON.stringify(after.body));
    assert.equal(after.body.choices?.[0]?.message.content, 'from the new engine');
    assert.equal(proxy.engineUrl, newEngine.url.replace(/\/+$/, ''));
    const health = (await (await fetch(`${proxy.url}/health`)).json()) as { upstream: string };
    assert.equal(health.upstream, proxy.engineUrl, '/health names the new engine');
    const fresh = proxy.sessions.create({});
    assert.equal(proxy.sessions.get(fresh.session_id)?.info.engine_url, proxy.engineUrl, 'new sessions record the new engine');
    assert.equal(controller.engineReachability(oldEngine.url), 'unknown', 'the old engine is no longer said reachable');
  } finally {
    await controller.stop();
    controller.dispose();
    await newEngine.close();
  }
});

test('retarget is a no-op without a running proxy', async () => {
  const controller = new ProxyController({
    startProxy: async () => Promise.reject(new Error('unused')),
    logger: recordingLogger(),
    defaultDataDir: '/d',
  });
  assert.equal(await controller.retarget('http://127.0.0.1:1'), false);
  controller.dispose();
});

test('EngineSlot remembers the owned engine in its memory (not settings), forgets it on stop, keeps it over dispose', () => {
  let stored: unknown;
  const memory = { get: () => stored, set: (v: OwnedEngine | undefined) => void (stored = v) };
  const slot = new EngineSlot(memory);
  assert.equal(slot.remembered(), undefined);
  stored = { url: 'http://127.0.0.1:41234', port: 41234, policy: '/w/tasks/a/policy.json' };
  assert.deepEqual(slot.remembered(), stored, 'a record from the window before the reload');
  assert.equal(slot.url, undefined, 'a remembered engine is not in use until it runs again');
  stored = { url: 'http://evil.example:1', port: 1, policy: null };
  assert.equal(slot.remembered(), undefined, 'a malformed or non-loopback record is dropped');
  assert.equal(OwnedEngineSchema.safeParse({ url: 'http://127.0.0.1:5', port: 5, policy: null }).success, true);
  stored = { url: 'http://127.0.0.1:5', port: 5, policy: null };
  slot.replace(undefined);
  assert.equal(stored, undefined, 'Stop Embedded Engine forgets it: no restart after the next reload');
  stored = { url: 'http://127.0.0.1:5', port: 5, policy: null };
  slot.dispose();
  assert.notEqual(stored, undefined, 'closing the window keeps the record for the reload');
});
