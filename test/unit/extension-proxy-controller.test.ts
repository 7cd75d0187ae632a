// ProxyController without vscode: state transitions and messages with a fake proxy, and the real
// CaptureProxy + fake engine for live updates, the stopped-proxy view of the durable store, export
// and delete.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { Emitter } from '../../src/capture/events.js';
import { CaptureProxy, type ProxyLogger, type ProxyOptions } from '../../src/capture/proxy.js';
import type { CallRecord, SessionInfo } from '../../src/capture/types.js';
import { startFakeEngine } from '../../src/engine/fake-engine.js';
import {
  NotRunningError,
  ProxyController,
  toSessionRows,
  type ProxyLike,
  type ProxyState,
  type SessionsLike,
} from '../../src/extension/proxy-controller.js';
import { readSettings } from '../../src/extension/settings.js';
import { call } from './rollout-fixtures.js';

const dirs: string[] = [];
after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'hl-ext-'));
  dirs.push(d);
  return d;
}

function recordingLogger(): ProxyLogger & { lines: string[] } {
  const lines: string[] = [];
  return { lines, info: (m) => lines.push(`info ${m}`), warn: (m) => lines.push(`warn ${m}`), error: (m) => lines.push(`error ${m}`) };
}

class FakeProxy implements ProxyLike {
  readonly url = 'http://127.0.0.1:5555';
  readonly port = 5555;
  readonly calls = new Emitter<CallRecord>();
  readonly changes = new Emitter<void>();
  closed = false;
  readonly sessions: SessionsLike = {
    list: () => [{ session_id: 's1', created_at: '2026-01-01T00:00:00Z', n_calls: 1 }, { bogus: true }],
    calls: () => [],
    create: (): SessionInfo => ({ session_id: 's1', created_at: '', model: 'm', engine_url: '', max_model_calls: 0, metadata: {} }),
    delete: async () => true,
    rollout: () => undefined,
    onDidRecordCall: this.calls.event,
    onDidChange: this.changes.event,
  };
  close = async () => {
    this.closed = true;
  };
}

const settings = (over: Record<string, unknown> = {}) => readSettings((k) => ({ engineUrl: 'http://127.0.0.1:9', model: 'm', ...over })[k]);

test('start -> running with the port, stop -> stopped, and both are idempotent', async () => {
  const fake = new FakeProxy();
  let starts = 0;
  let seen: ProxyOptions | undefined;
  const controller = new ProxyController({
    startProxy: async (o) => ((seen = o), starts++, fake),
    logger: recordingLogger(),
    defaultDataDir: '/default/dir',
  });
  const states: ProxyState['kind'][] = [];
  controller.onDidChangeState((s) => states.push(s.kind));
  const [a, b] = await Promise.all([controller.start(settings(), 'admin-secret'), controller.start(settings(), undefined)]);
  assert.equal(a, fake);
  assert.equal(b, fake);
  assert.equal(starts, 1, 'a second start while starting joins the first');
  assert.deepEqual(controller.state, { kind: 'running', url: fake.url, port: 5555 });
  assert.equal(seen?.dataDir, '/default/dir', 'empty dataDir setting -> the extension storage');
  assert.equal(seen?.host, '127.0.0.1');
  assert.equal(seen?.port, 0);
  assert.equal(seen?.adminKey, 'admin-secret');
  assert.deepEqual(
    controller.listSessions(),
    [{ session_id: 's1', created_at: '2026-01-01T00:00:00Z', n_calls: 1 }],
    'malformed summaries are dropped',
  );
  await controller.stop();
  await controller.stop();
  assert.equal(fake.closed, true);
  assert.deepEqual(states, ['starting', 'running', 'stopped']);
  assert.throws(
    () => controller.requireRunning('copy its URL'),
    (e: Error) => e instanceof NotRunningError && /Start Proxy.*copy its URL/.test(e.message),
  );
  controller.dispose();
});

test('without a stored admin key the proxy still runs with one, minted for this start and readable from the controller', async () => {
  const fake = new FakeProxy();
  const seen: ProxyOptions[] = [];
  const controller = new ProxyController({
    startProxy: async (o) => (seen.push(o), fake),
    logger: recordingLogger(),
    defaultDataDir: '/d',
  });
  assert.equal(controller.adminKey, undefined, 'no key before the proxy runs');
  await controller.start(settings(), undefined);
  const minted = seen[0]?.adminKey;
  assert.match(minted ?? '', /^hla-[A-Za-z0-9_-]{32}$/);
  assert.equal(controller.adminKey, minted);
  await controller.stop();
  assert.equal(controller.adminKey, undefined);
  await controller.start(settings(), '');
  assert.notEqual(seen[1]?.adminKey, minted, 'each start mints its own (an empty stored key counts as none)');
  assert.match(seen[1]?.adminKey ?? '', /^hla-/);
  await controller.stop();
  controller.dispose();
});

test('start failures become a failed state with a message in settings terms', async () => {
  const log = recordingLogger();
  const busy = Object.assign(new Error('listen EADDRINUSE'), { code: 'EADDRINUSE' });
  const controller = new ProxyController({ startProxy: async () => Promise.reject(busy), logger: log, defaultDataDir: '/d' });
  await assert.rejects(
    controller.start(settings({ proxyPort: 8787 }), undefined),
    /Port 8787 on 127\.0\.0\.1 is already in use.*harnessLab\.proxyPort/,
  );
  assert.equal(controller.state.kind, 'failed');
  assert.match(log.lines.join('\n'), /error proxy failed to start: Port 8787/);
  await assert.rejects(controller.start(settings({ engineUrl: '' }), undefined), /Set Engine URL/);
  controller.dispose();
  // The real proxy refuses a non-loopback bind without an admin key; the message names the command.
  const real = new ProxyController({ startProxy: (o) => CaptureProxy.start(o), logger: recordingLogger(), defaultDataDir: tempDir() });
  await assert.rejects(real.start(settings({ proxyHost: '0.0.0.0' }), undefined), /needs an admin key.*Harness Lab: Set Admin Key/);
  assert.equal(real.state.kind, 'failed');
  real.dispose();
});

test('recorded calls drive data events and engine reachability', async () => {
  const fake = new FakeProxy();
  const controller = new ProxyController({ startProxy: async () => fake, logger: recordingLogger(), defaultDataDir: '/d' });
  await controller.start(settings(), undefined);
  const data: (CallRecord | undefined)[] = [];
  controller.onDidChangeData((r) => data.push(r));
  const url = 'http://127.0.0.1:9';
  const failed = call({ id: 'x', index: 0, prompt: null, sampled: null, error: true });
  fake.calls.fire(failed);
  assert.equal(controller.engineReachability(url), 'unreachable');
  fake.calls.fire(call({ id: 'y', index: 1, prompt: [1], sampled: [2] }));
  assert.equal(controller.engineReachability(url), 'reachable');
  fake.changes.fire();
  assert.deepEqual(
    data.map((r) => r?.call_id),
    ['x', 'y', undefined],
  );
  assert.deepEqual(
    controller.engineStatuses([url, '']).map((s) => s.reachability),
    ['reachable'],
  );
  controller.noteEngine(url, { captureLevel: 'tokens', detail: 'probed' });
  assert.equal(controller.engineStatuses([url])[0]?.captureLevel, 'tokens');
  await controller.stop();
  controller.dispose();
});

test('probe results from an earlier window are shown again, without claiming reachability', () => {
  const url = 'http://gpu:8000';
  const controller = new ProxyController({
    startProxy: async () => new FakeProxy(),
    logger: recordingLogger(),
    defaultDataDir: '/d',
    rememberedEngines: [
      { url, reachability: 'reachable', captureLevel: 'tokens', detail: 'no findings', checkedAt: '2026-01-01T00:00:00Z' },
      { url: 'http://never', reachability: 'unreachable', captureLevel: null, detail: 'x', checkedAt: null },
    ],
  });
  const [status] = controller.engineStatuses([url]);
  assert.equal(status?.captureLevel, 'tokens');
  assert.equal(status?.reachability, 'unknown');
  assert.match(status?.detail ?? '', /probed 2026-01-01T00:00:00Z: no findings/);
  assert.deepEqual(
    controller.probedEngines().map((e) => e.url),
    [url],
    'unprobed entries are not remembered',
  );
  controller.dispose();
});

test('toSessionRows keeps well-formed rows only', () => {
  assert.deepEqual(toSessionRows([{ session_id: 'a', created_at: 't', n_calls: 2, extra: 1 }, { session_id: 3 }, null]), [
    { session_id: 'a', created_at: 't', n_calls: 2, extra: 1 },
  ]);
});

test('real proxy: live calls, stored sessions while stopped, export and delete', async () => {
  const engine = await startFakeEngine({ model: 'fake/m' });
  const dataDir = tempDir();
  const controller = new ProxyController({
    startProxy: (o) => CaptureProxy.start(o),
    logger: recordingLogger(),
    defaultDataDir: tempDir(),
  });
  try {
    const proxy = await controller.start(settings({ engineUrl: engine.url, model: engine.model, dataDir }), undefined);
    const recorded = new Promise<CallRecord>((resolve) => {
      const sub = controller.onDidChangeData((r) => r && (sub.dispose(), resolve(r)));
    });
    const info = proxy.sessions.create({ metadata: { source: 'terminal' } });
    const res = await fetch(`${proxy.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${info.session_id}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(res.status, 200);
    const rec = await recorded;
    assert.equal(rec.session_id, info.session_id);
    assert.equal(controller.listSessions().find((s) => s.session_id === info.session_id)?.n_calls, 1);

    const live = controller.exportTraces(info.session_id);
    assert.equal(live.calls, 1);
    assert.ok(live.traces >= 1);

    await controller.stop();
    // Stopped: the tree keeps showing what the store holds (also what a reloaded window sees).
    const stored = controller.listSessions();
    assert.equal(stored.length, 1);
    assert.equal(stored[0]?.n_calls, 1);
    assert.deepEqual(stored[0]?.metadata, { source: 'terminal' });
    assert.deepEqual(
      controller.getCalls(info.session_id).map((c) => c.call_id),
      [rec.call_id],
    );
    assert.equal(controller.exportTraces(info.session_id).jsonl, live.jsonl, 'the store exports exactly what the live proxy did');
    assert.throws(() => controller.exportTraces('nope'), /No session 'nope'/);
    controller.useStoredSessions(tempDir());
    assert.deepEqual(controller.listSessions(), [], 'another data dir shows its own (empty) store');
    controller.useStoredSessions(dataDir);

    assert.equal(await controller.deleteSession(info.session_id), true);
    assert.deepEqual(controller.listSessions(), []);
    await controller.start(settings({ engineUrl: engine.url, model: engine.model, dataDir }), undefined);
    assert.deepEqual(controller.listSessions(), [], 'a session deleted while stopped stays deleted');
  } finally {
    await controller.stop();
    controller.dispose();
    await engine.close();
  }
});

test("the Engines view shows the proxy's own grade of its engine once it has probed", async () => {
  class GradedProxy extends FakeProxy {
    engineReport: ProxyLike['engineReport'] = undefined;
    ensureProbed = async () => {
      this.engineReport = {
        reachable: true,
        capture_level: 'tokens',
        findings: ['[WARN] truncated_turn: finish reason is length'],
        probed_at: '2026-01-01T00:00:00Z',
      };
    };
  }
  const controller = new ProxyController({ startProxy: async () => new GradedProxy(), logger: recordingLogger(), defaultDataDir: '/d' });
  const graded = new Promise<void>((resolve) =>
    controller.onDidChangeEngines(() => controller.engineStatuses(['http://127.0.0.1:9'])[0]?.captureLevel && resolve()),
  );
  await controller.start(settings(), undefined);
  await graded;
  const status = controller.engineStatuses(['http://127.0.0.1:9'])[0]!;
  assert.equal(status.reachability, 'reachable');
  assert.equal(status.captureLevel, 'tokens');
  assert.match(status.detail, /graded by the proxy at start: \[WARN\] truncated_turn/);
  assert.equal(status.checkedAt, '2026-01-01T00:00:00Z');
  await controller.stop();
  // Started again with the engine down: unreachable, and the earlier grade is kept (and remembered).
  class DownProxy extends FakeProxy {
    engineReport: ProxyLike['engineReport'] = undefined;
    ensureProbed = async () => {
      this.engineReport = { reachable: false, capture_level: 'text', findings: [], probed_at: '2026-01-02T00:00:00Z' };
    };
  }
  const again = new ProxyController({
    startProxy: async () => new DownProxy(),
    logger: recordingLogger(),
    defaultDataDir: '/d',
    rememberedEngines: controller.probedEngines(),
  });
  const down = new Promise<void>((resolve) =>
    again.onDidChangeEngines(() => again.engineReachability('http://127.0.0.1:9') === 'unreachable' && resolve()),
  );
  await again.start(settings(), undefined);
  await down;
  assert.equal(again.engineStatuses(['http://127.0.0.1:9'])[0]!.captureLevel, 'tokens');
  assert.equal(again.probedEngines().length, 1);
  await again.stop();
});
