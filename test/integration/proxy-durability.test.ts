// kill -9 mid-rollout loses nothing that was answered; a restart on the same data dir brings it all back.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, test } from 'node:test';
import { startFakeEngine, type FakeEngine } from '../../src/engine/fake-engine.js';
import { createSession } from './helpers.js';

const CLI = join(__dirname, '../../src/cli/main.ts');

function startProxyProcess(engineUrl: string, dataDir: string): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', CLI, 'proxy', '--engine-url', engineUrl, '--model', 'fake/qwen3-tiny', '--data-dir', dataDir],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    lines.once('line', (line) => {
      const match = /^proxy listening on (http:\/\/\S+)$/.exec(line);
      if (match) resolve({ child, url: match[1]! });
      else reject(new Error(`unexpected first line: ${line}`));
    });
    child.once('exit', (code) => reject(new Error(`proxy exited with ${code}: ${stderr}`)));
  });
}

function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

async function chat(url: string, key: string, content: string): Promise<Response> {
  return fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content }] }),
  });
}

let engine: FakeEngine;
let dataDir: string;
before(async () => {
  engine = await startFakeEngine({ thinkMs: 0, script: (req) => ({ content: `echo ${JSON.stringify(req.messages.at(-1)?.content)}` }) });
  dataDir = mkdtempSync(join(tmpdir(), 'hl-durable-'));
});
after(async () => {
  await engine.close();
  rmSync(dataDir, { recursive: true, force: true });
});

test('kill -9 mid-rollout: every answered call survives a restart', async () => {
  const first = await startProxyProcess(engine.url, dataDir);
  const { session_id } = await createSession(first.url, { session_id: 'durable-1', metadata: { harness: 'test' } });
  const answered: string[] = [];
  for (let i = 0; i < 5; i++) {
    const res = await chat(first.url, session_id, `call ${i}`);
    assert.equal(res.status, 200);
    answered.push(((await res.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content);
  }
  // Fire a burst and kill the process while those calls are in flight.
  const inFlight = Array.from({ length: 8 }, (_, i) =>
    chat(first.url, session_id, `burst ${i}`)
      .then(async (r) =>
        r.status === 200 ? ((await r.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content : null,
      )
      .catch(() => null),
  );
  await new Promise((r) => setTimeout(r, 5));
  // Listen for the exit before killing: it can fire before the in-flight fetches settle, and a
  // listener added after it would wait forever.
  const firstExited = exited(first.child);
  first.child.kill('SIGKILL');
  const burst = await Promise.all(inFlight);
  await firstExited;
  const answeredBurst = burst.filter((b): b is string => b !== null);

  const second = await startProxyProcess(engine.url, dataDir);
  try {
    const res = await fetch(`${second.url}/sessions/${session_id}/calls`);
    assert.equal(res.status, 200, 'the session is back after the restart');
    const { calls } = (await res.json()) as {
      calls: { response_body: { choices: { message: { content: string } }[] }; prompt_token_ids: number[] }[];
    };
    const stored = new Set(calls.map((c) => c.response_body.choices[0]!.message.content));
    for (const text of [...answered, ...answeredBurst]) assert.ok(stored.has(text), `answered call "${text}" was lost`);
    assert.ok(calls.every((c) => Array.isArray(c.prompt_token_ids) && c.prompt_token_ids.length > 0));
    const summary = (await (await fetch(`${second.url}/sessions/${session_id}`)).json()) as { metadata: { harness: string } };
    assert.equal(summary.metadata.harness, 'test');
    // A follower (a cluster batch's mirror) pages through the calls: from an arrival position, at most `limit`.
    const page = (await (await fetch(`${second.url}/sessions/${session_id}/calls?from=2&limit=2`)).json()) as {
      from: number;
      total: number;
      calls: { call_id: string }[];
    };
    assert.deepEqual([page.from, page.total], [2, calls.length]);
    assert.deepEqual(
      page.calls.map((c) => c.call_id),
      (calls as unknown as { call_id: string }[]).slice(2, 4).map((c) => c.call_id),
    );
    const tail = (await (await fetch(`${second.url}/sessions/${session_id}/calls?from=${calls.length}`)).json()) as { calls: unknown[] };
    assert.deepEqual(tail.calls, []);
    for (const bad of ['from=-1', 'from=x', 'limit=0'])
      assert.equal((await fetch(`${second.url}/sessions/${session_id}/calls?${bad}`)).status, 400, bad);
    // The restarted proxy keeps serving the same session.
    assert.equal((await chat(second.url, session_id, 'after restart')).status, 200);
  } finally {
    const secondExited = exited(second.child);
    second.child.kill('SIGTERM');
    await secondExited;
  }
  const lines = readFileSync(join(dataDir, 'sessions', `${session_id}.jsonl`), 'utf8')
    .trim()
    .split('\n');
  assert.equal(JSON.parse(lines[0]!).type, 'session');
});
