// A cluster rollout trains on what the batch directory holds: when the final mirror of its session
// is short of the calls the in-cluster proxy answered (a page lost, the proxy restarted) or fails
// outright, the rollout is never trainable and is classed as an infra error naming the mirror.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { K8sCapture } from '../../src/batch/backends/k8s/proxy.js';
import { classify } from '../../src/batch/classify.js';
import { chain, solvedAttempt } from './rollout-fixtures.js';

const cleanup: (() => void)[] = [];
after(() => cleanup.forEach((f) => f()));

/** The in-cluster proxy's admin routes: the rollout says 3 calls; the call pages hold `listed` of them (or fail). */
async function fakeProxy(listed: number | 'fail'): Promise<string> {
  const calls = chain(3).map((c) => ({ ...c, session_id: 's1' }));
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://proxy');
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (req.method === 'POST' && url.pathname === '/sessions') return send(201, { session_id: 's1', api_key: 'k-s1' });
    if (url.pathname === '/sessions/s1/rollout') return send(200, { calls, trainable: true, validation: [] });
    if (url.pathname === '/sessions/s1')
      return send(200, {
        session_id: 's1',
        created_at: '2026-01-01T00:00:00.000Z',
        model: 'm',
        max_model_calls: 50,
        metadata: {},
        capture_level: null,
        n_calls: calls.length,
        sampling: {},
      });
    if (url.pathname === '/sessions/s1/calls') {
      if (listed === 'fail') return send(500, { error: 'store unavailable' });
      const from = Number(url.searchParams.get('from') ?? 0);
      const page = calls.slice(0, listed).slice(from);
      return send(200, { session_id: 's1', from, total: listed, calls: page });
    }
    send(404, { error: 'no route' });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanup.push(() => server.close());
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function factsWith(listed: number | 'fail') {
  const dir = mkdtempSync(join(tmpdir(), 'hl-short-mirror-'));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  const capture = new K8sCapture(await fakeProxy(listed), 'admin', dir, 'http://engine/v1');
  cleanup.push(() => void capture.close());
  await capture.createSession({ sessionId: 's1', metadata: {}, sampling: {}, maxModelCalls: 50 });
  return capture.sessionFacts('s1');
}

const honest = solvedAttempt();

test('a whole mirror keeps the proxy’s verdict: trainable', async () => {
  const facts = await factsWith(3);
  assert.deepEqual([facts.nCalls, facts.trainable, facts.findings], [3, true, []]);
  assert.equal(classify(honest, facts, 'discard').class, 'completed');
});

test('a mirror short of the proxy’s calls is never trainable: an infra error naming the mirror', async () => {
  const facts = await factsWith(2);
  assert.equal(facts.trainable, false);
  assert.match(facts.findings[0] ?? '', /^\[FATAL mirror\] 2 of the proxy's 3 call\(s\) in .*s1\.jsonl$/);
  const verdict = classify(honest, facts, 'discard');
  assert.deepEqual([verdict.state, verdict.class, verdict.cause], ['discarded', 'infra_error', 'capture']);
  assert.match(verdict.error ?? '', /FATAL mirror/);
});

test('a final mirror that fails is never trainable either', async () => {
  const facts = await factsWith('fail');
  assert.equal(facts.trainable, false);
  assert.match(facts.findings[0] ?? '', /^\[FATAL mirror\] the final mirror failed \(.*500.*\)/);
  assert.equal(classify(honest, facts, 'discard').class, 'infra_error');
});
