// `harness-lab serve` as a command: usage errors, the admin key off loopback and on every route but
// /health, and the JSON-RPC discovery methods. No rollout runs here (serve-openenv.test.ts runs them).
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import WebSocket from 'ws';
import { cli, waitFor } from './sandbox-fixtures.js';
import { REPO, postJson, startServe, tempDir } from './serve-fixtures.js';

const EXAMPLES = join(REPO, 'examples', 'tasks');

test('serve: usage errors exit 2 with a message', async () => {
  let r = await cli(['serve']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--dataset NAME=DIR is required/);
  r = await cli(['serve', '--dataset', 'nodir']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--dataset wants NAME=DIR, got 'nodir'/);
  r = await cli(['serve', '--dataset', `a=${EXAMPLES}`, '--host', '0.0.0.0']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /beyond loopback: give --admin-key/);
  r = await cli(['serve', '--dataset', `a=${EXAMPLES}`, '--run', 'grpo-1']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--run labels what the server makes in a cluster: it needs --backend k8s, not docker/);
  r = await cli(['serve', '--help']);
  assert.equal(r.code, 0);
  assert.match(r.stdout, /usage: harness-lab serve --dataset NAME=DIR/);
});

test('serve: with an admin key every route but /health wants it; JSON-RPC lists the one tool', { timeout: 60_000 }, async () => {
  const serve = await startServe(['--dataset', `ex=${EXAMPLES}`, '--admin-key', 'k-123', '--state-dir', tempDir('hl-serve-cli-')]);
  try {
    const health = await fetch(`${serve.url}/health`);
    assert.equal(health.status, 200);
    assert.equal(((await health.json()) as { status: string }).status, 'healthy');
    assert.equal((await fetch(`${serve.url}/harbor_env/splits`)).status, 401);
    assert.equal((await fetch(`${serve.url}/harbor_env/splits`, { headers: { authorization: 'Bearer wrong' } })).status, 401);
    const ok = await fetch(`${serve.url}/harbor_env/splits`, { headers: { authorization: 'Bearer k-123' } });
    assert.deepEqual(await ok.json(), [
      { name: 'ex', num_tasks: readdirSync(EXAMPLES).filter((d) => existsSync(join(EXAMPLES, d, 'task.toml'))).length },
    ]);
    const refused = await new Promise<number>((resolve) => {
      const ws = new WebSocket(`${serve.url.replace(/^http/, 'ws')}/ws`);
      ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
      ws.on('open', () => resolve(101));
      ws.on('error', () => {});
    });
    assert.equal(refused, 401, 'a WebSocket without the key is refused');
    const opened = await new Promise<number>((resolve) => {
      const ws = new WebSocket(`${serve.url.replace(/^http/, 'ws')}/ws`, { headers: { authorization: 'Bearer k-123' } });
      ws.on('open', () => {
        ws.close();
        resolve(101);
      });
      ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
    });
    assert.equal(opened, 101);
    const tools = await postJson(`${serve.url}/mcp`, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { 'x-admin-key': 'k-123' });
    assert.deepEqual(
      tools.body.result.tools.map((t: { name: string }) => t.name),
      ['run_rollout'],
    );
  } finally {
    serve.child.kill('SIGTERM');
    const e = await serve.exited;
    assert.equal(e.code, 0, serve.stderr());
  }
});

/**
 * What an unchanged TRL client sends for `HarborSessionFactory(server_url=URL)` when URL carries user
 * info: httpx (the task API, /mcp) turns `http://USER:PASS@host` into `Authorization: Basic
 * base64(USER:PASS)` on a request to the same URL without it (Node's fetch refuses user info, so that
 * step is done here as httpx does it); the /ws URL keeps the user info, and the `ws` library, like
 * Python's websockets, sends it as Basic auth on the upgrade by itself.
 */
function asHttpx(serverUrl: string, path: string): { url: string; headers: Record<string, string> } {
  const u = new URL(serverUrl);
  const basic = Buffer.from(`${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`).toString('base64');
  u.username = '';
  u.password = '';
  return { url: `${u.origin}${path}`, headers: { authorization: `Basic ${basic}` } };
}

test(
  'serve: a keyed server takes the key in the server URL (http://trainer:KEY@host:port), as an unchanged TRL client sends it',
  { timeout: 60_000 },
  async () => {
    const serve = await startServe(['--dataset', `ex=${EXAMPLES}`, '--admin-key', 'k-123', '--state-dir', tempDir('hl-serve-url-key-')]);
    try {
      const port = new URL(serve.url).port;
      const keyed = `http://trainer:k-123@127.0.0.1:${port}`;
      const wrong = `http://trainer:k-999@127.0.0.1:${port}`;
      const splits = asHttpx(keyed, '/harbor_env/splits');
      assert.equal((await fetch(splits.url, { headers: splits.headers })).status, 200);
      const bad = asHttpx(wrong, '/harbor_env/splits');
      assert.equal((await fetch(bad.url, { headers: bad.headers })).status, 401);
      const mcp = asHttpx(keyed, '/mcp');
      const created = await postJson(mcp.url, { jsonrpc: '2.0', id: 1, method: 'openenv/session/create', params: {} }, mcp.headers);
      assert.match(created.body.result.session_id, /\S/);
      const wsStatus = (base: string) =>
        new Promise<number>((resolve) => {
          // OpenEnv's convert_to_ws_url: http:// -> ws://, user info kept, then /ws.
          const ws = new WebSocket(`${base.replace(/^http/, 'ws')}/ws`);
          ws.on('open', () => {
            ws.close();
            resolve(101);
          });
          ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
          ws.on('error', () => {});
        });
      assert.equal(await wsStatus(keyed), 101, 'the /ws upgrade carries the key from the URL');
      assert.equal(await wsStatus(wrong), 401);
      assert.equal(await wsStatus(`http://127.0.0.1:${port}`), 401);
    } finally {
      serve.child.kill('SIGTERM');
      await serve.exited;
    }
  },
);

test('serve: a session created over /mcp and left unused is reclaimed, freeing its slot', { timeout: 60_000 }, async () => {
  const serve = await startServe([
    '--dataset',
    `ex=${EXAMPLES}`,
    '--max-concurrent',
    '1',
    '--session-idle',
    '1',
    '--state-dir',
    tempDir('hl-serve-idle-'),
  ]);
  try {
    const created = await postJson(`${serve.url}/mcp`, { jsonrpc: '2.0', id: 1, method: 'openenv/session/create', params: {} });
    const sessionId = created.body.result.session_id as string;
    const full = await postJson(`${serve.url}/mcp`, { jsonrpc: '2.0', id: 2, method: 'openenv/session/create', params: {} });
    assert.equal(full.body.error.data.code, 'CAPACITY_REACHED');
    await waitFor(
      'the idle session reclaimed',
      async () =>
        ((await (await fetch(`${serve.url}/health`)).json()) as { active_sessions: number }).active_sessions === 0 ? true : undefined,
      30_000,
    );
    const gone = await postJson(`${serve.url}/mcp`, {
      jsonrpc: '2.0',
      id: 3,
      method: 'openenv/session/close',
      params: { session_id: sessionId },
    });
    assert.equal(gone.body.error.data.code, 'SESSION_ERROR');
    const again = await postJson(`${serve.url}/mcp`, { jsonrpc: '2.0', id: 4, method: 'openenv/session/create', params: {} });
    assert.match(again.body.result.session_id, /\S/);
    assert.match(serve.stderr(), new RegExp(`session ${sessionId} idle for \\d+ s: closed`));
  } finally {
    serve.child.kill('SIGTERM');
    await serve.exited;
  }
});
