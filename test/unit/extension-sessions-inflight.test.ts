// A call the engine is still thinking about shows in the Sessions tree as in flight (a spinning
// "calling engine…" child and "1 in flight" on its session), not as "0 calls", and turns into a
// recorded call once answered. The engine is held by a gate the test opens, so nothing is timed.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CaptureProxy } from '../../src/capture/proxy.js';
import type { CallActivity } from '../../src/capture/session-registry.js';
import { startFakeEngine } from '../../src/engine/fake-engine.js';
import { ProxyController } from '../../src/extension/proxy-controller.js';
import { InFlightCalls, SessionsTreeModel } from '../../src/extension/sessions-model.js';
import { readSettings } from '../../src/extension/settings.js';

const dirs: string[] = [];
after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
const tempDir = () => {
  const d = mkdtempSync(join(tmpdir(), 'hl-inflight-'));
  dirs.push(d);
  return d;
};
const quiet = { info() {}, warn() {}, error() {} };

/** An engine in front of the fake one that holds chat calls carrying `marker` until `open()`. */
async function gatedEngine(marker: string) {
  const inner = await startFakeEngine({ model: 'fake/m' });
  let open!: () => void;
  const gate = new Promise<void>((resolve) => (open = resolve));
  let held!: () => void;
  const reachedEngine = new Promise<void>((resolve) => (held = resolve));
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      void (async () => {
        if (body.includes(marker)) {
          held();
          await gate;
        }
        const upstream = await fetch(`${inner.url}${req.url ?? '/'}`, {
          method: req.method,
          headers: { 'content-type': 'application/json' },
          ...(req.method === 'GET' || req.method === 'HEAD' ? {} : { body }),
        });
        res.writeHead(upstream.status, { 'content-type': upstream.headers.get('content-type') ?? 'application/json' });
        res.end(Buffer.from(await upstream.arrayBuffer()));
      })();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    model: inner.model,
    open: () => open(),
    reachedEngine,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await inner.close();
    },
  };
}

test('in-flight calls: start adds, end removes, per session and in index order', () => {
  const calls = new InFlightCalls();
  const a = (index: number, state: CallActivity['state'], session_id = 's1'): CallActivity => ({
    session_id,
    index,
    started_at: '2026-01-01T10:00:00.000Z',
    state,
  });
  assert.equal(calls.note(a(1, 'started')), true);
  assert.equal(calls.note(a(0, 'started')), true);
  assert.equal(calls.note(a(0, 'started', 's2')), true);
  assert.deepEqual(
    calls.of('s1').map((c) => c.index),
    [0, 1],
  );
  assert.equal(calls.note(a(0, 'ended')), true);
  assert.equal(calls.note(a(0, 'ended')), false, 'a second end changes nothing');
  assert.deepEqual(
    calls.of('s1').map((c) => c.index),
    [1],
  );
  assert.deepEqual(
    calls.of('s2').map((c) => c.index),
    [0],
  );
  calls.clear();
  assert.deepEqual(calls.of('s1'), []);
});

test('a slow engine: the tree shows the call in flight while the engine thinks, then the recorded call', async () => {
  const engine = await gatedEngine('think-slowly');
  const controller = new ProxyController({ startProxy: (o) => CaptureProxy.start(o), logger: quiet, defaultDataDir: tempDir() });
  const tree = new SessionsTreeModel(() => controller);
  try {
    const proxy = await controller.start(
      readSettings((k) => ({ engineUrl: engine.url, model: engine.model, dataDir: tempDir() })[k]),
      undefined,
    );
    const info = proxy.sessions.create({ metadata: { source: 'terminal' } });
    const changed = () =>
      new Promise<void>((resolve) => {
        const sub = controller.onDidChangeData(() => (sub.dispose(), resolve()));
      });
    const started = changed();
    const answered = fetch(`${proxy.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${info.session_id}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'think-slowly please' }] }),
    });
    await started;
    await engine.reachedEngine;

    const [session] = tree.roots();
    assert.ok(session);
    assert.equal(session.nCalls, 0);
    assert.equal(session.nInFlight, 1);
    assert.match(session.description, /^captured terminal · 0 calls · 1 in flight · /);
    const [child, ...rest] = tree.children(session);
    assert.equal(rest.length, 0);
    assert.equal(child?.kind, 'inflight');
    assert.equal(child?.label, '#0 calling engine…');
    assert.match(child?.description ?? '', /^since \d\d:\d\d:\d\d$/);
    assert.equal(child?.contextValue, 'harnessLab.inFlightCall');
    assert.deepEqual(tree.children(child), []);

    engine.open();
    const res = await answered;
    assert.equal(res.status, 200);
    await res.json();
    // The answer is written only after the record and the end event (model-call's finally ran).
    const [after] = tree.roots();
    assert.equal(after?.nCalls, 1);
    assert.equal(after?.nInFlight, 0);
    assert.doesNotMatch(after?.description ?? '', /in flight/);
    assert.deepEqual(
      tree.children(after).map((n) => n.kind),
      ['call'],
    );
    assert.deepEqual(controller.inFlight(info.session_id), []);
  } finally {
    engine.open();
    await controller.stop();
    controller.dispose();
    await engine.close();
  }
});
