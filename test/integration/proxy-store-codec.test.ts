// Through a real proxy with a durable store: a session stored call against call reads back exactly
// as it was recorded (every field), across continuations, a retry, a subagent root, compaction and a
// second dialect, whether read by the live proxy after its calls left memory, by a read-only
// registry, or by a restarted proxy.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { CaptureProxy } from '../../src/capture/proxy.js';
import { SessionRegistry } from '../../src/capture/session-registry.js';
import type { CallRecord } from '../../src/capture/types.js';
import { createSession, startLab, type Lab } from './helpers.js';

let lab: Lab;
before(async () => {
  lab = await startLab({ thinkMs: 0 }, { resident: { sessions: 1 } });
});
after(async () => {
  await lab.close();
});

interface Msg {
  role: string;
  content: string;
}

async function chat(key: string, messages: Msg[], stream = false): Promise<string> {
  const res = await fetch(`${lab.proxy.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages, stream }),
  });
  assert.equal(res.status, 200);
  if (stream) {
    await res.text();
    return 'streamed answer';
  }
  return ((await res.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content;
}

async function anthropic(key: string, system: string, messages: Msg[]): Promise<string> {
  const res = await fetch(`${lab.proxy.url}/v1/messages`, {
    method: 'POST',
    headers: { 'x-api-key': key, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'claude', max_tokens: 64, system, messages }),
  });
  assert.equal(res.status, 200, await res.clone().text());
  const body = (await res.json()) as { content: { type: string; text?: string }[] };
  return body.content
    .filter((c) => c.type === 'text')
    .map((c) => c.text)
    .join('');
}

test('every recorded field reads back from the store: retries, a subagent root, compaction, two dialects', async () => {
  const recorded = new Map<string, CallRecord>();
  lab.proxy.sessions.onDidRecordCall((r) => recorded.set(r.call_id, JSON.parse(JSON.stringify(r)) as CallRecord));
  const a = (await createSession(lab.proxy)).session_id;
  const b = (await createSession(lab.proxy)).session_id;

  const history: Msg[] = [
    { role: 'system', content: 'You are the main agent.' },
    { role: 'user', content: 'Fix the bug.' },
  ];
  for (let t = 0; t < 4; t++) {
    history.push({ role: 'assistant', content: await chat(a, history, t === 2) }, { role: 'user', content: `tool result ${t}` });
    // Interleave the other session (the proxy keeps one session's calls resident): reads below load from disk.
    await anthropic(b, 'You are a reviewer.', [{ role: 'user', content: `review ${t}` }]);
  }
  await chat(a, history); // a retry: the same request again
  await chat(a, history);
  await chat(a, [
    { role: 'system', content: 'You are a subagent that searches.' },
    { role: 'user', content: 'find foo' },
  ]); // a subagent root
  const compacted: Msg[] = [history[0]!, { role: 'user', content: 'Summary of the work so far: fixed half.' }];
  compacted.push({ role: 'assistant', content: await chat(a, compacted) }, { role: 'user', content: 'continue' });
  await chat(a, compacted);
  const bHistory: Msg[] = [{ role: 'user', content: 'review 0' }];
  for (let t = 0; t < 3; t++)
    bHistory.push(
      { role: 'assistant', content: await anthropic(b, 'You are a reviewer.', bHistory) },
      { role: 'user', content: `more ${t}` },
    );

  const expected = (id: string) => [...recorded.values()].filter((r) => r.session_id === id).sort((x, y) => x.index - y.index);
  assert.equal(expected(a).length, 9);
  const fileA = readFileSync(join(lab.dataDir, 'sessions', `${a}.jsonl`), 'utf8');
  assert.ok(
    fileA.split('\n').some((l) => l.includes('"enc":{"p":')),
    'calls are stored against earlier calls',
  );

  // The live proxy: the calls left memory (one resident session) and come back from the store.
  for (const id of [a, b]) assert.deepEqual(JSON.parse(JSON.stringify(lab.proxy.sessions.get(id)!.calls)), expected(id), `live ${id}`);
  assert.ok(lab.proxy.sessions.residentCount <= 2);
  const liveDoc = lab.proxy.sessions.rollout(a)!;
  assert.ok(liveDoc.graph.roots.length >= 2, 'the subagent (and the compaction) start new roots');

  // A read-only registry over the data dir.
  const offline = SessionRegistry.openReadOnly(lab.dataDir);
  for (const id of [a, b]) assert.deepEqual(JSON.parse(JSON.stringify(offline.get(id)!.calls)), expected(id), `offline ${id}`);
  assert.deepEqual(JSON.parse(JSON.stringify(offline.rollout(a))), JSON.parse(JSON.stringify(liveDoc)));

  // A restarted proxy: the listing comes from the index, the calls from the store, and it goes on counting.
  const restarted = await CaptureProxy.start({
    engineUrl: lab.engine.url,
    model: lab.engine.model,
    dataDir: join(lab.dataDir, '..', lab.dataDir.split('/').pop()!),
  });
  try {
    const listed = restarted.sessions.list().find((s) => s.session_id === a)!;
    assert.equal(listed.n_calls, 9);
    assert.equal(
      listed.prompt_tokens,
      expected(a).reduce((n, c) => n + c.prompt_token_ids!.length, 0),
    );
    assert.equal(restarted.sessions.residentCount, 0, 'a restart reads no calls');
    for (const id of [a, b])
      assert.deepEqual(JSON.parse(JSON.stringify(restarted.sessions.get(id)!.calls)), expected(id), `restarted ${id}`);
    assert.equal(restarted.sessions.get(a)!.takeIndex(), 9, 'the next call index follows the stored ones');
  } finally {
    await restarted.close();
  }
});
