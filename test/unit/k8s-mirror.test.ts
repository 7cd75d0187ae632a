// SessionMirror (a cluster batch's live follow): new calls land in `<batch>/capture` as the proxy
// gets them, each exactly once across polls, failed polls, a final re-sync, a new lab that finds the
// file, and a proxy that ignores `from`/`limit`; pages are bounded; the capture level's header update.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { MIRROR_PAGE, SessionMirror } from '../../src/batch/backends/k8s/mirror.js';
import { loadSessionFile } from '../../src/capture/store.js';
import type { CallRecord } from '../../src/capture/types.js';
import { chain } from './rollout-fixtures.js';

const dirs: string[] = [];
after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

/** The in-cluster proxy's admin GETs over in-memory sessions; `legacy` ignores from/limit as an older proxy does. */
class FakeProxy {
  readonly sessions = new Map<string, { calls: CallRecord[]; level: string | null }>();
  readonly paths: string[] = [];
  failNext = 0;
  legacy = false;
  maxPage = 0;

  get = async (path: string): Promise<unknown> => {
    this.paths.push(path);
    if (this.failNext > 0) {
      this.failNext--;
      throw new Error('the port-forward dropped');
    }
    const url = new URL(path, 'http://proxy');
    const parts = url.pathname.split('/').filter(Boolean);
    const summary = (id: string) => {
      const s = this.sessions.get(id)!;
      return {
        session_id: id,
        created_at: '2026-01-01T00:00:00.000Z',
        model: 'm',
        max_model_calls: 50,
        metadata: { batch: 'b' },
        capture_level: s.level,
        n_calls: s.calls.length,
        sampling: { temperature: 1 },
      };
    };
    if (parts.length === 1) return { sessions: [...this.sessions.keys()].map(summary) };
    const id = decodeURIComponent(parts[1]!);
    if (parts.length === 2) return summary(id);
    const all = this.sessions.get(id)!.calls;
    if (this.legacy) return { session_id: id, calls: all };
    const from = Number(url.searchParams.get('from') ?? 0);
    const limit = Number(url.searchParams.get('limit') ?? all.length);
    const calls = all.slice(from, from + limit);
    this.maxPage = Math.max(this.maxPage, calls.length);
    return { session_id: id, from, total: all.length, calls };
  };
}

function setup() {
  const dir = mkdtempSync(join(tmpdir(), 'hl-mirror-'));
  dirs.push(dir);
  const proxy = new FakeProxy();
  const calls = chain(150).map((c) => ({ ...c, session_id: 's1' }));
  proxy.sessions.set('s1', { calls: [], level: null });
  return { dir, proxy, calls, mirror: new SessionMirror(dir, proxy.get, 'http://engine/v1') };
}

const fileIds = (dir: string, id = 's1') => loadSessionFile(join(dir, 'sessions', `${id}.jsonl`))!.calls.map((c) => c.call_id);

test('calls are mirrored as they arrive, once each, across failed polls and the final sync', async () => {
  const { dir, proxy, calls, mirror } = setup();
  mirror.follow('s1');
  const live = proxy.sessions.get('s1')!;
  live.calls.push(calls[0]!);
  await mirror.tick();
  assert.deepEqual(fileIds(dir), ['c0'], 'the first call is on disk while the session is still running');
  live.calls.push(calls[1]!, calls[2]!);
  proxy.failNext = 2;
  await assert.rejects(mirror.tick());
  await assert.rejects(mirror.tick(), 'a poll through a dropped port-forward fails');
  await mirror.tick();
  assert.deepEqual(fileIds(dir), ['c0', 'c1', 'c2'], 'the poll after the drop resumes at the last mirrored call');
  assert.match(proxy.paths.at(-1)!, /calls\?from=1&limit=/, 'only the calls not yet seen are fetched');
  live.calls.push(...calls.slice(3));
  live.level = 'tokens';
  assert.equal(await mirror.sync('s1'), 150);
  assert.equal(await mirror.sync('s1'), 150, 'a second sync writes nothing new');
  await mirror.unfollow('s1');
  await mirror.tick();
  const loaded = loadSessionFile(join(dir, 'sessions', 's1.jsonl'))!;
  assert.deepEqual(
    loaded.calls.map((c) => c.call_id),
    calls.map((c) => c.call_id),
  );
  assert.deepEqual(loaded.calls[149], calls[149], 'a call reads back as the proxy had it');
  assert.equal(loaded.info.capture_level, 'tokens', 'the header the proxy fixed later is what the file says');
  assert.equal(loaded.info.engine_url, 'http://engine/v1');
  assert.ok(proxy.maxPage <= MIRROR_PAGE, `one response holds at most ${MIRROR_PAGE} calls (${proxy.maxPage})`);
  await mirror.close();
});

test('a new lab (or an older proxy that answers every call) adds only what the file lacks', async () => {
  const { dir, proxy, calls, mirror } = setup();
  const live = proxy.sessions.get('s1')!;
  live.calls.push(...calls.slice(0, 5));
  await mirror.sync('s1');
  await mirror.close();
  // The lab that wrote the file is gone; the next one follows the same session.
  live.calls.push(...calls.slice(5, 9));
  proxy.legacy = true;
  const next = new SessionMirror(dir, proxy.get, 'http://engine/v1');
  next.follow('s1');
  await next.tick();
  await next.sync('s1');
  assert.deepEqual(
    fileIds(dir),
    calls.slice(0, 9).map((c) => c.call_id),
  );
  const lines = readFileSync(join(dir, 'sessions', 's1.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { type: string });
  assert.equal(lines.filter((l) => l.type === 'session').length, 1, 'one header: the level did not change');
  assert.equal(lines.filter((l) => l.type === 'call').length, 9);
  await next.close();
});

test('unfollowed sessions are not polled; polling stops at close', async () => {
  const { proxy, calls, mirror } = setup();
  proxy.sessions.get('s1')!.calls.push(calls[0]!);
  await mirror.tick();
  assert.equal(proxy.paths.length, 0, 'nothing followed: no request');
  mirror.follow('s1');
  mirror.start(10);
  for (let i = 0; i < 200 && !proxy.paths.some((p) => p.includes('/calls')); i++) await new Promise((r) => setTimeout(r, 10));
  assert.ok(
    proxy.paths.some((p) => p.includes('/calls')),
    'the poller fetched the new call',
  );
  await mirror.close();
  const n = proxy.paths.length;
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(proxy.paths.length, n, 'no poll after close');
});
