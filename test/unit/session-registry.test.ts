// SessionRegistry: counters move only through its methods, the store keeps what they count, and a
// data dir opened read-only (and `harness-lab export --session` on it) gives the same rollout as the live registry.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { traceToJsonl } from '../../src/capture/rollout.js';
import { ReadOnlyRegistryError, SessionExistsError, SessionKeyInUseError, SessionRegistry } from '../../src/capture/session-registry.js';
import { CreateSessionSchema, sessionKeyHash } from '../../src/capture/sessions.js';
import type { CaptureLevel } from '../../src/capture/types.js';
import { call } from './rollout-fixtures.js';

const ROOT = join(__dirname, '..', '..');
const dirs: string[] = [];
after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'hl-registry-'));
  dirs.push(d);
  return d;
}

function liveRegistry(
  dataDir: string | undefined,
  engine: { level: CaptureLevel; graded: boolean } = { level: 'tokens', graded: true },
): SessionRegistry {
  return SessionRegistry.open({
    defaults: { model: 'm', engineUrl: 'http://127.0.0.1:1', maxModelCalls: 2 },
    dataDir,
    engineLevel: () => engine,
  });
}

/** What model-call.ts does for two answered calls, one engine failure and one budget stop. */
async function captureOneSession(sessions: SessionRegistry): Promise<string> {
  const info = sessions.create({ session_id: 'sess', metadata: { harness: 'test' } });
  const session = sessions.get(info.session_id)!;
  assert.equal(await sessions.captureLevel(session, 'tokens'), 'tokens');
  for (const [id, prompt, sampled] of [
    ['a', [1, 2], [3]],
    ['b', [1, 2, 3, 4], [5, 6]],
  ] as const) {
    assert.ok(session.tryReserveCall());
    const index = session.takeIndex();
    await sessions.record(session, call({ id, index, prompt: [...prompt], sampled: [...sampled] }));
  }
  assert.equal(session.tryReserveCall(), false, 'the budget of 2 is spent');
  await sessions.recordBudgetStop(session);
  await sessions.record(session, call({ id: 'e', index: session.takeIndex(), prompt: null, sampled: null, error: true }));
  return info.session_id;
}

test('counters change through the registry and the session only, and survive a restart', async () => {
  const dataDir = tempDir();
  const live = liveRegistry(dataDir);
  const recorded: string[] = [];
  let changes = 0;
  live.onDidRecordCall((r) => recorded.push(r.call_id));
  live.onDidChange(() => changes++);
  const id = await captureOneSession(live);
  assert.deepEqual(recorded, ['a', 'b', 'e']);
  assert.equal(changes, 1);
  assert.throws(() => live.create({ session_id: id }), SessionExistsError);
  const summary = live.get(id)!.summary();
  assert.equal(summary.model_calls, 2);
  assert.equal(summary.budget_stop_count, 1);
  assert.equal(summary.upstream_errors, 1);
  assert.equal(summary.n_calls, 3);
  await live.close();

  const restarted = liveRegistry(dataDir);
  const again = restarted.get(id)!;
  assert.deepEqual(
    [again.modelCalls, again.budgetStopCount, again.upstreamErrors, again.takeIndex()],
    [3, 1, 1, 3],
    'restored: calls on disk, budget stops, engine errors, the next index',
  );
  await restarted.close();
});

test('a data dir opened read-only gives the live rollout; export --session writes its traces', async () => {
  const dataDir = tempDir();
  const live = liveRegistry(dataDir);
  const id = await captureOneSession(live);
  const liveDoc = live.rollout(id)!;
  assert.equal(liveDoc.budget_stop_count, 1, "the rollout reads the session's own budget stops");
  assert.equal(liveDoc.capture_level, 'tokens');
  await live.close();

  const stored = SessionRegistry.openReadOnly(dataDir);
  assert.deepEqual(stored.rollout(id), liveDoc);
  assert.deepEqual(stored.rollout(id, { includeTraces: false })?.traces, []);
  assert.equal(stored.rollout('nope'), undefined);
  assert.equal(stored.get('../sessions/sess'), undefined, 'ids outside the id pattern name no file');
  assert.deepEqual(
    stored.list().map((s) => s.session_id),
    [id],
  );
  assert.throws(() => stored.create(), ReadOnlyRegistryError);
  await assert.rejects(stored.delete(id), ReadOnlyRegistryError);

  const out = join(tempDir(), 'traces.jsonl');
  const r = spawnSync(
    process.execPath,
    ['--import', 'tsx', join(ROOT, 'src', 'cli', 'main.ts'), 'export', '--data-dir', dataDir, '--session', id, '--out', out],
    { cwd: ROOT, encoding: 'utf8', timeout: 60_000 },
  );
  assert.equal(r.status, 0, r.stderr);
  assert.equal(readFileSync(out, 'utf8'), traceToJsonl(liveDoc.traces));
});

test('read-only opening writes nothing; a session that never fixed its level reads at the engine level', async () => {
  const absent = join(tempDir(), 'never-created');
  const stored = SessionRegistry.openReadOnly(absent);
  assert.deepEqual(stored.list(), []);
  assert.equal(existsSync(absent), false);

  const engine = { level: 'text' as CaptureLevel, graded: false };
  const sessions = liveRegistry(undefined, engine);
  const info = sessions.create();
  assert.equal(info.capture_level, undefined, 'no level before the engine is graded');
  assert.equal(sessions.rollout(info.session_id)?.capture_level, 'text');
  engine.graded = true;
  engine.level = 'logprobs';
  assert.equal(sessions.create().capture_level, 'logprobs');
  await sessions.close();
});

/** Every byte under a directory, as text (the store's files are JSONL). */
function everythingUnder(dir: string): string {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => readFileSync(join(e.parentPath, e.name), 'utf8'))
    .join('\n');
}

test('a keyed session is found by its key only; its id opens nothing; a session without a key keeps id = key', async () => {
  const sessions = liveRegistry(undefined);
  const minted = sessions.create({ mint_key: true });
  assert.ok(minted.api_key && minted.api_key !== minted.session_id);
  assert.equal(minted.key_sha256, sessionKeyHash(minted.api_key));
  assert.equal(sessions.findByKey(minted.api_key)?.id, minted.session_id);
  assert.equal(sessions.findByKey(minted.session_id), undefined, "a keyed session's id is not its key");
  assert.equal(sessions.findByKey(`${minted.api_key}x`), undefined);
  assert.equal(sessions.get(minted.session_id)?.info.key_sha256, minted.key_sha256);
  assert.equal((sessions.get(minted.session_id)!.info as { api_key?: string }).api_key, undefined, 'the session keeps no clear key');
  assert.equal(sessions.get(minted.session_id)!.summary().keyed, true);

  const given = sessions.create({ session_id: 'given', api_key: 'k'.repeat(32) });
  assert.equal(given.api_key, 'k'.repeat(32));
  assert.equal(sessions.findByKey('k'.repeat(32))?.id, 'given');
  assert.equal(sessions.findByKey('given'), undefined);
  assert.throws(() => sessions.create({ api_key: 'k'.repeat(32) }), SessionKeyInUseError);

  const plain = sessions.create({ session_id: 'plain' });
  assert.equal(plain.api_key, undefined);
  assert.equal(plain.key_sha256, undefined);
  assert.equal(sessions.findByKey('plain')?.id, 'plain', 'OpenEnv convention: the id is the key');
  assert.equal(sessions.get('plain')!.summary().keyed, undefined);

  await sessions.delete(minted.session_id);
  assert.equal(sessions.findByKey(minted.api_key), undefined, 'a deleted session answers to its key no more');
  await sessions.close();
});

test('the create request refuses short keys and api_key with mint_key', () => {
  assert.equal(CreateSessionSchema.safeParse({ api_key: 'short' }).success, false);
  assert.equal(CreateSessionSchema.safeParse({ api_key: 'has space in it, long enough' }).success, false);
  assert.equal(CreateSessionSchema.safeParse({ api_key: 'a'.repeat(20), mint_key: true }).success, false);
  assert.equal(CreateSessionSchema.safeParse({ api_key: 'a'.repeat(20) }).success, true);
  assert.equal(CreateSessionSchema.safeParse({ mint_key: true }).success, true);
});

test('a restart on the same data dir keeps the key working through its hash; the clear key is never on disk', async () => {
  const dataDir = tempDir();
  const live = liveRegistry(dataDir);
  const info = await live.createStored({ mint_key: true, metadata: { harness: 'test' } });
  const key = info.api_key!;
  const session = live.get(info.session_id)!;
  await live.captureLevel(session, 'tokens'); // rewrites the header line
  assert.ok(session.tryReserveCall());
  await live.record(session, call({ id: 'a', index: session.takeIndex(), prompt: [1, 2], sampled: [3] }));
  await live.close();
  const disk = everythingUnder(dataDir);
  assert.ok(disk.includes(info.session_id));
  assert.ok(disk.includes(sessionKeyHash(key)), 'the header keeps key_sha256');
  assert.equal(disk.includes(key), false, 'the clear key is nowhere in the data dir');

  const restarted = liveRegistry(dataDir);
  assert.equal(restarted.findByKey(key)?.id, info.session_id);
  assert.equal(restarted.findByKey(info.session_id), undefined);
  assert.equal(restarted.findByKey(key)?.calls.length, 1);
  await restarted.close();
});
