// SessionRegistry: counters move only through its methods, the store keeps what they count, and a
// data dir opened read-only (and `harness-lab export --session` on it) gives the same rollout as the live registry.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { traceToJsonl } from '../../src/capture/rollout.js';
import { ReadOnlyRegistryError, SessionExistsError, SessionRegistry } from '../../src/capture/session-registry.js';
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

function liveRegistry(dataDir: string | undefined, engine: { level: CaptureLevel; graded: boolean } = { level: 'tokens', graded: true }): SessionRegistry {
  return SessionRegistry.open({ defaults: { model: 'm', engineUrl: 'http://127.0.0.1:1', maxModelCalls: 2 }, dataDir, engineLevel: () => engine });
}

/** What model-call.ts does for two answered calls, one engine failure and one budget stop. */
async function captureOneSession(sessions: SessionRegistry): Promise<string> {
  const info = sessions.create({ session_id: 'sess', metadata: { harness: 'test' } });
  const session = sessions.get(info.session_id)!;
  assert.equal(await sessions.captureLevel(session, 'tokens'), 'tokens');
  for (const [id, prompt, sampled] of [['a', [1, 2], [3]], ['b', [1, 2, 3, 4], [5, 6]]] as const) {
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
  assert.deepEqual(stored.list().map((s) => s.session_id), [id]);
  assert.throws(() => stored.create(), ReadOnlyRegistryError);
  await assert.rejects(stored.delete(id), ReadOnlyRegistryError);

  const out = join(tempDir(), 'traces.jsonl');
  const r = spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'src', 'cli', 'main.ts'), 'export', '--data-dir', dataDir, '--session', id, '--out', out], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
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
