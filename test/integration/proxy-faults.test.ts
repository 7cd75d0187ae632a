// The fault matrix: every fault, through the real proxy, with each dialect's official SDK. Each fault
// gives the harness an error in its dialect, is recorded as an errored call (or, when the disk is full
// or read-only, is not claimed as stored), and loses no earlier call: a restart on the same data dir
// brings back exactly what the proxy held.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CaptureProxy, type ProxyLogger } from '../../src/capture/proxy.js';
import type { CallRecord } from '../../src/capture/types.js';
import {
  DIALECT_CLIENTS,
  mountSmallDisk,
  startFaultyEngine,
  type DialectClient,
  type FaultyEngine,
  type Outcome,
  type SmallDisk,
} from './fault-fixtures.js';
import { createSession } from './helpers.js';

function collectingLogger(): ProxyLogger & { errors: string[]; warnings: string[] } {
  const errors: string[] = [];
  const warnings: string[] = [];
  return { errors, warnings, info() {}, warn: (m) => warnings.push(m), error: (m) => errors.push(m) };
}

/** Waits (without a deadline assertion: the suite's own timeout is the limit) until a session holds n calls. */
async function callsOnceThere(proxy: CaptureProxy, sessionId: string, n: number): Promise<CallRecord[]> {
  for (let i = 0; i < 2000; i++) {
    const calls = proxy.sessions.calls(sessionId);
    if (calls.length >= n) return calls;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`session ${sessionId} never reached ${n} recorded call(s); it has ${proxy.sessions.calls(sessionId).length}`);
}

function assertApiError(outcome: Outcome, status: number, message: RegExp, what: string): void {
  assert.equal(outcome.ok, false, `${what}: the harness got an answer instead of an error`);
  if (outcome.ok) return;
  assert.equal(outcome.kind, 'api', `${what}: the SDK read an API error (got ${outcome.kind}: ${outcome.message})`);
  assert.equal(outcome.status, status, `${what}: status (message: ${outcome.message})`);
  assert.match(outcome.message, message, `${what}: the SDK surfaced the proxy's message`);
}

const summary = (calls: CallRecord[]) =>
  calls.map((c) => ({
    call_id: c.call_id,
    index: c.index,
    dialect: c.dialect,
    error: c.error?.status ?? null,
    text: JSON.stringify(c.response_body),
  }));

/** Every session's calls as a fresh proxy on the same data dir sees them. */
async function restoredCalls(
  dataDir: string,
  engineUrl: string,
  ids: string[],
): Promise<{ calls: Map<string, CallRecord[]>; warnings: string[] }> {
  const logger = collectingLogger();
  const proxy = await CaptureProxy.start({ engineUrl, model: 'fake/qwen3-tiny', dataDir, captureLevel: 'tokens', logger });
  try {
    return { calls: new Map(ids.map((id) => [id, proxy.sessions.calls(id)])), warnings: logger.warnings };
  } finally {
    await proxy.close();
  }
}

describe('fault matrix: engine and connection faults, each dialect through its official SDK', () => {
  let engine: FaultyEngine;
  let proxy: CaptureProxy;
  let dataDir: string;
  const logger = collectingLogger();
  const sessions: string[] = [];

  before(async () => {
    engine = await startFaultyEngine({ slowMs: 1500 });
    dataDir = mkdtempSync(join(tmpdir(), 'hl-faults-'));
    proxy = await CaptureProxy.start({
      engineUrl: engine.url,
      model: engine.model,
      dataDir,
      captureLevel: 'tokens',
      keepaliveGraceMs: 50,
      keepaliveIntervalMs: 50,
      logger,
    });
  });
  after(async () => {
    await proxy.close();
    await engine.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  /** A fresh session with one answered call in it, so every fault has an earlier call to lose. */
  async function sessionWithAnAnswer(dialect: DialectClient): Promise<string> {
    const { session_id } = await createSession(proxy);
    sessions.push(session_id);
    const first = await dialect.call(proxy.url, session_id, 'hello before the fault');
    assert.deepEqual(first, { ok: true, text: 'Hello from the fake engine.' });
    return session_id;
  }

  async function lastCall(sessionId: string): Promise<CallRecord> {
    const calls = await callsOnceThere(proxy, sessionId, 2);
    assert.equal(calls.length, 2);
    assert.equal(calls[0]!.error, null, 'the earlier call is still there, answered');
    return calls[1]!;
  }

  for (const dialect of DIALECT_CLIENTS) {
    describe(dialect.name, () => {
      test('engine down: 502 naming the engine URL, recorded as an engine error', async () => {
        const id = await sessionWithAnAnswer(dialect);
        await engine.stop();
        let outcome: Outcome;
        try {
          outcome = await dialect.call(proxy.url, id, 'engine is down');
        } finally {
          await engine.start();
        }
        assertApiError(outcome, 502, new RegExp(engine.url.replace(/[.:/]/g, '\\$&')), 'engine down');
        const call = await lastCall(id);
        assert.equal(call.dialect, dialect.recorded);
        assert.deepEqual([call.error?.status, call.error?.kind], [502, 'engine']);
      });

      test('engine 5xx: 502 carrying the engine message, recorded with the engine answer', async () => {
        const id = await sessionWithAnAnswer(dialect);
        assertApiError(await dialect.call(proxy.url, id, 'fault:500'), 502, /CUDA out of memory/, 'engine 500');
        const call = await lastCall(id);
        assert.deepEqual([call.error?.status, call.error?.kind], [502, 'engine']);
        assert.match(JSON.stringify(call.engine_response), /CUDA out of memory/);
      });

      test('engine 4xx: passed through (harnesses must not retry it), recorded', async () => {
        const id = await sessionWithAnAnswer(dialect);
        assertApiError(await dialect.call(proxy.url, id, 'fault:400'), 400, /does not support the requested feature/, 'engine 400');
        const call = await lastCall(id);
        assert.deepEqual([call.error?.status, call.error?.kind], [400, 'engine']);
      });

      test('truncated JSON body from the engine: 502, recorded with the text it got', async () => {
        const id = await sessionWithAnAnswer(dialect);
        assertApiError(await dialect.call(proxy.url, id, 'fault:truncated'), 502, /not a chat completion/, 'truncated body');
        const call = await lastCall(id);
        assert.deepEqual([call.error?.status, call.error?.kind], [502, 'engine']);
        assert.equal(typeof call.engine_response, 'string', 'the unparseable text is kept for debugging');
        assert.equal(call.completion_token_ids, null, 'nothing of a half answer is taken as sampled');
      });

      test('connection reset mid-answer: 502, recorded as an engine error', async () => {
        const id = await sessionWithAnAnswer(dialect);
        assertApiError(
          await dialect.call(proxy.url, id, 'fault:reset'),
          502,
          /inference engine at .* (failed|unreachable)/,
          'reset mid-answer',
        );
        const call = await lastCall(id);
        assert.deepEqual([call.error?.status, call.error?.kind], [502, 'engine']);
      });

      test("engine slower than the harness's timeout: the SDK times out, the call is recorded as errored (499)", async () => {
        const id = await sessionWithAnAnswer(dialect);
        const outcome = await dialect.call(proxy.url, id, 'fault:slow', { timeoutMs: 300 });
        assert.equal(outcome.ok, false, 'the harness timed out');
        if (!outcome.ok) assert.ok(['timeout', 'aborted'].includes(outcome.kind), `a timeout, got ${outcome.kind}: ${outcome.message}`);
        const call = await lastCall(id);
        assert.deepEqual([call.error?.status, call.error?.kind], [499, 'client']);
        assert.equal(call.response_body, null);
      });

      test('harness disconnects mid-stream: the upstream call is cancelled and recorded as errored (499)', async () => {
        const id = await sessionWithAnAnswer(dialect);
        const before = engine.url; // the engine stays up; only the harness goes
        const outcome = await dialect.call(proxy.url, id, 'fault:slow', { stream: true, abortAfterHeaders: true });
        assert.ok(!outcome.ok || outcome.text === '', `the harness got no answer (${JSON.stringify(outcome)})`);
        const call = await lastCall(id);
        assert.deepEqual([call.error?.status, call.error?.kind], [499, 'client']);
        assert.equal(call.stream, true);
        assert.equal(engine.url, before);
        // The proxy keeps serving this session.
        assert.equal((await dialect.call(proxy.url, id, 'after the disconnect')).ok, true);
      });
    });
  }

  test('the proxy never crashed or logged an internal error, and a restart brings back every call of every session', async () => {
    assert.deepEqual(
      logger.errors.filter((e) => /request .* failed/.test(e)),
      [],
      'no request ended in an internal error',
    );
    const health = await fetch(`${proxy.url}/health`);
    assert.equal(health.status, 200);
    const held = new Map(sessions.map((id) => [id, summary(proxy.sessions.calls(id))]));
    const restored = await restoredCalls(dataDir, engine.url, sessions);
    for (const id of sessions) assert.deepEqual(summary(restored.calls.get(id)!), held.get(id), `session ${id} after restart`);
    assert.deepEqual(restored.warnings, [], 'no torn or unreadable lines');
  });
});

describe('fault matrix: a full disk (a real tmpfs, filled up)', () => {
  let engine: FaultyEngine;
  let disk: SmallDisk;
  let proxy: CaptureProxy;
  const logger = collectingLogger();
  const sessions = new Map<string, DialectClient>();
  // Records bigger than a page: a call cannot slip into the slack of the file's last page.
  const padding = ' pad'.repeat(1500);

  before(async () => {
    engine = await startFaultyEngine();
    disk = mountSmallDisk(2048);
    proxy = await CaptureProxy.start({ engineUrl: engine.url, model: engine.model, dataDir: disk.dir, captureLevel: 'tokens', logger });
  });
  after(async () => {
    await proxy?.close();
    await engine?.close();
    disk?.unmount();
  });

  test('with the disk full, every dialect gets a 507 in its shape, nothing is claimed as stored, and the proxy keeps serving', async () => {
    for (const dialect of DIALECT_CLIENTS) {
      const { session_id } = await createSession(proxy);
      sessions.set(session_id, dialect);
      assert.equal((await dialect.call(proxy.url, session_id, `before the disk fills${padding}`)).ok, true);
    }
    disk.fill();
    try {
      for (const [id, dialect] of sessions) {
        assertApiError(
          await dialect.call(proxy.url, id, `the disk is full${padding}`),
          507,
          /disk is full/,
          `${dialect.name} on a full disk`,
        );
        assertApiError(
          await dialect.call(proxy.url, id, `the disk is full, streamed${padding}`, { stream: true }),
          507,
          /disk is full/,
          `${dialect.name} streamed on a full disk`,
        );
        assert.equal(proxy.sessions.calls(id).length, 1, `${dialect.name}: the failed calls are not held as stored`);
        const summaryRes = (await (await fetch(`${proxy.url}/sessions/${id}/rollout`)).json()) as { validation: string[] };
        assert.ok(
          summaryRes.validation.some((v) => v.includes('store_failed')),
          'the session says calls were lost to the store',
        );
      }
      // Creating a session needs its header on disk: refused the same way, and not listed.
      const refused = await fetch(`${proxy.url}/sessions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ session_id: 'on-a-full-disk' }),
      });
      assert.equal(refused.status, 507);
      assert.match(((await refused.json()) as { error: { message: string } }).error.message, /disk is full/);
      assert.equal((await fetch(`${proxy.url}/sessions/on-a-full-disk`)).status, 404);
      assert.equal((await fetch(`${proxy.url}/health`)).status, 200);
    } finally {
      disk.free();
    }
    // Space again: the same sessions answer and store normally.
    for (const [id, dialect] of sessions) {
      assert.equal((await dialect.call(proxy.url, id, `after the disk was freed${padding}`)).ok, true, dialect.name);
      assert.equal(proxy.sessions.calls(id).length, 2);
    }
    assert.equal(
      (
        await fetch(`${proxy.url}/sessions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ session_id: 'on-a-full-disk' }),
        })
      ).status,
      201,
    );
    assert.deepEqual(
      logger.errors.filter((e) => /request .* failed/.test(e)),
      [],
      'no internal error',
    );
  });

  test('a restart on the same data dir brings back every stored call, and only those', async () => {
    const ids = [...sessions.keys()];
    const held = new Map(ids.map((id) => [id, summary(proxy.sessions.calls(id))]));
    await proxy.close();
    const restored = await restoredCalls(disk.dir, engine.url, ids);
    for (const id of ids) assert.deepEqual(summary(restored.calls.get(id)!), held.get(id), `session ${id}`);
    // A short write before ENOSPC was cut back: no torn line is left behind.
    assert.deepEqual(restored.warnings, []);
    proxy = undefined as unknown as CaptureProxy;
  });
});

describe('fault matrix: a read-only data dir (a tmpfs remounted read-only)', () => {
  let engine: FaultyEngine;
  let disk: SmallDisk;
  let proxy: CaptureProxy | undefined;
  const sessions = new Map<string, DialectClient>();

  before(async () => {
    engine = await startFaultyEngine();
    disk = mountSmallDisk(4096);
  });
  after(async () => {
    await proxy?.close();
    await engine?.close();
    try {
      disk?.readOnly(false);
    } catch {
      // already writable
    }
    disk?.unmount();
  });

  test('a proxy on a read-only data dir restores its sessions, answers every dialect 503, and stores again once writable', async () => {
    const first = await CaptureProxy.start({ engineUrl: engine.url, model: engine.model, dataDir: disk.dir, captureLevel: 'tokens' });
    for (const dialect of DIALECT_CLIENTS) {
      const { session_id } = await createSession(first);
      sessions.set(session_id, dialect);
      assert.equal((await dialect.call(first.url, session_id, 'before read-only')).ok, true);
    }
    await first.close(); // closes its files: a tmpfs cannot be remounted read-only under open writers
    disk.readOnly(true);
    const logger = collectingLogger();
    proxy = await CaptureProxy.start({ engineUrl: engine.url, model: engine.model, dataDir: disk.dir, captureLevel: 'tokens', logger });
    for (const [id, dialect] of sessions) {
      assert.equal(proxy.sessions.calls(id).length, 1, 'restored from the read-only dir');
      assertApiError(await dialect.call(proxy.url, id, 'read-only'), 503, /read-only/, `${dialect.name} on a read-only dir`);
      assertApiError(
        await dialect.call(proxy.url, id, 'read-only, streamed', { stream: true }),
        503,
        /read-only/,
        `${dialect.name} streamed on a read-only dir`,
      );
      assert.equal(proxy.sessions.calls(id).length, 1, 'nothing claimed as stored');
    }
    const refused = await fetch(`${proxy.url}/sessions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    assert.equal(refused.status, 503);
    assert.equal(
      ((await (await fetch(`${proxy.url}/sessions`)).json()) as { sessions: unknown[] }).sessions.length,
      sessions.size,
      'the refused session is not listed',
    );
    disk.readOnly(false);
    for (const [id, dialect] of sessions) assert.equal((await dialect.call(proxy.url, id, 'writable again')).ok, true, dialect.name);
    assert.deepEqual(
      logger.errors.filter((e) => /request .* failed/.test(e)),
      [],
      'no internal error',
    );

    const held = new Map([...sessions.keys()].map((id) => [id, summary(proxy!.sessions.calls(id))]));
    await proxy.close();
    proxy = undefined;
    const restored = await restoredCalls(disk.dir, engine.url, [...sessions.keys()]);
    for (const [id, calls] of held) {
      assert.deepEqual(summary(restored.calls.get(id)!), calls, `session ${id}`);
      assert.equal(calls.length, 2);
    }
    assert.deepEqual(restored.warnings, []);
  });
});
