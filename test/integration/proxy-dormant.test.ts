// Through a real proxy: 300 sessions (keyed and not) with a known limit of 16 and no idle wait. After
// their calls the proxy holds at most the limit in memory, yet every session answers by its key,
// lists with its counters, its rollout reads back whole, /health counts it, and a call on a dormant
// session continues its indices; a restarted proxy does the same.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { CaptureProxy } from '../../src/capture/proxy.js';
import { createSession, startLab, type Lab } from './helpers.js';

let lab: Lab;
let restarted: CaptureProxy | undefined;
before(async () => {
  lab = await startLab({ thinkMs: 0 }, { dormancy: { known: 16, idleMs: 0 } });
});
after(async () => {
  // The test closes the first proxy itself; the lab closes the engine and removes the data dir.
  await restarted?.close();
  if (restarted) lab.proxy.close = async () => {};
  await lab.close();
});

async function chat(url: string, key: string, content: string): Promise<void> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content }] }),
  });
  assert.equal(res.status, 200, await res.clone().text());
  await res.text();
}

test('dormant sessions answer by key, list, read back and count, live and after a restart', { timeout: 300_000 }, async () => {
  const keys: { id: string; key: string }[] = [];
  for (let i = 0; i < 300; i++) {
    const created = (await createSession(lab.proxy, i % 3 ? { mint_key: true } : {})) as { session_id: string; api_key?: string };
    keys.push({ id: created.session_id, key: created.api_key ?? created.session_id });
    await chat(lab.proxy.url, keys[i]!.key, `first ${i}`);
    await chat(lab.proxy.url, keys[i]!.key, `second ${i}`);
  }
  lab.proxy.sessions.sweepDormant();
  assert.ok(lab.proxy.sessions.knownCount <= 16, `held ${lab.proxy.sessions.knownCount}`);
  const health = (await (await fetch(`${lab.proxy.url}/health`)).json()) as { sessions: number };
  assert.equal(health.sessions, 300);
  const listed = ((await (await fetch(`${lab.proxy.url}/sessions`)).json()) as { sessions: { session_id: string; n_calls: number }[] })
    .sessions;
  assert.equal(listed.length, 300);
  assert.ok(listed.every((s) => s.n_calls === 2));

  // A third call on the oldest (dormant) sessions: found by key, index 2, rollout of three calls.
  for (const { id, key } of keys.slice(0, 5)) {
    await chat(lab.proxy.url, key, 'third');
    const doc = (await (await fetch(`${lab.proxy.url}/sessions/${id}/rollout`)).json()) as { calls: { index: number }[] };
    assert.deepEqual(
      doc.calls.map((c) => c.index),
      [0, 1, 2],
      id,
    );
  }

  // Restarted on the same data dir: the same holds, and a dormant key still opens its session.
  await lab.proxy.close();
  restarted = await CaptureProxy.start({
    engineUrl: lab.engine.url,
    model: lab.engine.model,
    dataDir: lab.dataDir,
    dormancy: { known: 16, idleMs: 0 },
  });
  assert.ok(restarted.sessions.knownCount <= 16);
  assert.equal(restarted.sessions.size, 300);
  const last = keys[150]!;
  await chat(restarted.url, last.key, 'after restart');
  const doc = (await (await fetch(`${restarted.url}/sessions/${last.id}/rollout`)).json()) as { calls: { index: number }[] };
  assert.deepEqual(
    doc.calls.map((c) => c.index),
    [0, 1, 2],
  );
  const bad = await fetch(`${restarted.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: 'Bearer hlk-not-a-key-of-any-session', 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x' }] }),
  });
  assert.equal(bad.status, 401);
});
