// Dormant sessions: past its known limit the registry forgets idle sessions (their file remembers
// everything) and finds them again by id, by key, in the listing and after a restart, with the same
// counters, so a days-long run's memory follows its active sessions, not every session it opened.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { SessionExistsError, SessionKeyInUseError, SessionRegistry, type DormancyLimits } from '../../src/capture/session-registry.js';
import type { CaptureSession } from '../../src/capture/sessions.js';
import { call } from './rollout-fixtures.js';

const dirs: string[] = [];
after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'hl-dormant-'));
  dirs.push(d);
  return d;
}

function registry(dataDir: string, dormancy: DormancyLimits): SessionRegistry {
  return SessionRegistry.open({
    defaults: { model: 'm', engineUrl: 'http://127.0.0.1:1', maxModelCalls: 0 },
    dataDir,
    engineLevel: () => ({ level: 'tokens', graded: true }),
    dormancy,
  });
}

/** A forwarded call as model-call.ts makes it: reserve, index, record. */
async function answer(sessions: SessionRegistry, session: CaptureSession, id: string): Promise<number> {
  await sessions.captureLevel(session, 'tokens');
  assert.ok(session.tryReserveCall());
  const index = session.takeIndex();
  await sessions.record(session, call({ id, index, prompt: [1, 2, 3], sampled: [4, 5] }));
  return index;
}

test('idle sessions beyond the known limit go dormant and come back by id, by key and in the listing', async () => {
  const dataDir = tempDir();
  const sessions = registry(dataDir, { known: 4, idleMs: 0 });
  const keys = new Map<string, string>();
  for (let i = 0; i < 20; i++) {
    const created = await sessions.createStored({ session_id: `s${i}`, ...(i % 2 ? { mint_key: true } : {}) });
    if (created.api_key) keys.set(created.session_id, created.api_key);
    const s = sessions.get(created.session_id)!;
    await answer(sessions, s, `c${i}a`);
    await answer(sessions, s, `c${i}b`);
  }
  sessions.sweepDormant();
  assert.equal(sessions.knownCount, 4, 'only the known limit stays in memory');
  assert.equal(sessions.size, 20, 'dormant sessions still count');
  assert.ok(readdirSync(join(dataDir, 'keys')).length >= 8, 'dormant keyed sessions have a key index entry');

  const listed = sessions.list();
  assert.equal(listed.length, 20);
  for (const row of listed) assert.equal(row.n_calls, 2, JSON.stringify(row));
  assert.equal(sessions.knownCount, 4, 'listing does not wake them');

  // A keyed dormant session is found by its key only, with its counters, and its next call
  // continues its indices.
  const keyedId = 's1';
  assert.equal(sessions.get(keyedId) !== undefined, true);
  const again = registry(dataDir, { known: 4, idleMs: 0 });
  again.sweepDormant();
  const byKey = again.findByKey(keys.get(keyedId)!);
  assert.ok(byKey, 'the key opens the dormant session');
  assert.equal(byKey.id, keyedId);
  assert.equal(again.findByKey(keyedId), undefined, "a keyed session's id opens nothing");
  assert.equal(await answer(again, byKey, 'c1c'), 2, 'the next index follows the stored ones');
  assert.equal(again.get(keyedId)!.calls.length, 3);
  // An unkeyed dormant session: its id is its key.
  const unkeyed = again.findByKey('s0');
  assert.equal(unkeyed?.id, 's0');
  assert.equal(unkeyed.summary().n_calls, 2);

  // Creating over a dormant id or key is refused as for a held one.
  // Restored in file-name order, the last four (s6..s9) stay held: s12 and s13 are dormant.
  assert.equal(again.knownCount, 6, 's6..s9 held, s1 and s0 woken');
  assert.throws(() => again.create({ session_id: 's12' }), SessionExistsError);
  const dormantKeyed: [string, string] = ['s13', keys.get('s13')!];
  assert.throws(() => again.create({ api_key: dormantKeyed[1] }), SessionKeyInUseError);

  // Deleting a dormant session removes its file and key entry; the count follows.
  const before = again.size;
  assert.equal(await again.delete(dormantKeyed[0]), true);
  assert.equal(again.size, before - 1);
  assert.equal(again.findByKey(dormantKeyed[1]), undefined);
  assert.equal(existsSync(join(dataDir, 'sessions', `${dormantKeyed[0]}.jsonl`)), false);
  await sessions.close();
  await again.close();
});

test('a session with a call in flight, calls in memory, or an in-memory finding stays; a busy one is not forgotten before it is idle', async () => {
  const dataDir = tempDir();
  const sessions = registry(dataDir, { known: 1, idleMs: 60_000 });
  const a = sessions.get((await sessions.createStored({ session_id: 'a' })).session_id)!;
  const b = sessions.get((await sessions.createStored({ session_id: 'b' })).session_id)!;
  await answer(sessions, a, 'a1');
  await answer(sessions, b, 'b1');
  assert.equal(sessions.sweepDormant(), 0, 'both were used within the idle time');
  await sessions.close();

  const idle = registry(dataDir, { known: 1, idleMs: 0 });
  const x = idle.get('a')!;
  const y = idle.get('b')!;
  assert.ok(x.tryReserveCall(), 'a call of a is in flight');
  void y.calls; // b's calls are read (resident)
  assert.equal(idle.sweepDormant(), 0);
  x.settleCall();
  y.unload();
  assert.equal(idle.sweepDormant(), 1);
  assert.equal(idle.knownCount, 1);
  await idle.close();
});

test('a restart holds at most the known limit: restored sessions are idle until used', async () => {
  const dataDir = tempDir();
  const first = registry(dataDir, { known: 1000, idleMs: 60_000 });
  for (let i = 0; i < 30; i++) {
    const s = first.get((await first.createStored({ session_id: `r${i}` })).session_id)!;
    await answer(first, s, `r${i}`);
  }
  await first.close();
  const restarted = registry(dataDir, { known: 5, idleMs: 60_000 });
  assert.equal(restarted.knownCount, 5);
  assert.equal(restarted.size, 30);
  assert.equal(restarted.get('r0')!.summary().n_calls, 1);
  await restarted.close();
});
