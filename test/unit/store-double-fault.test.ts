// The store's double fault: a commit's frames reach the journal, the session file write fails (a
// full disk), and so does the journal frame that would withdraw them. The caller is answered 507;
// a restart must not replay the call back into its session. Faults are injected at the file-system
// calls the store makes (fs.write for session files, FileHandle.writev/truncate for the journal).
import assert from 'node:assert/strict';
import fs, { mkdtempSync, readdirSync, readlinkSync, rmSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { syncBuiltinESMExports } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, before, test } from 'node:test';
import { CaptureStore, StoreWriteError } from '../../src/capture/store.js';
import type { CallRecord, SessionInfo } from '../../src/capture/types.js';

const dirs: string[] = [];
after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const info = (id: string): SessionInfo => ({
  session_id: id,
  created_at: '2026-01-01T00:00:00.000Z',
  model: 'm',
  engine_url: 'http://e',
  max_model_calls: 0,
  metadata: {},
});
const call = (id: string, index: number): CallRecord =>
  ({ call_id: `${id}-${index}`, session_id: id, index, payload: `call ${index}` }) as unknown as CallRecord;

const enospc = () => Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC', errno: -28, syscall: 'write' });
const originalWrite = fs.write;
type HandleProto = { writev: (...a: unknown[]) => Promise<unknown>; truncate: (...a: unknown[]) => Promise<unknown> };
let handleProto: HandleProto;
let originalHandleWrite: HandleProto['writev'];
let originalHandleTruncate: HandleProto['truncate'];
before(async () => {
  const handle = await open(tmpdir(), 'r');
  handleProto = Object.getPrototypeOf(handle) as HandleProto;
  await handle.close();
  originalHandleWrite = handleProto.writev;
  originalHandleTruncate = handleProto.truncate;
});

afterEach(() => {
  (fs as { write: unknown }).write = originalWrite;
  syncBuiltinESMExports();
  handleProto.writev = originalHandleWrite;
  handleProto.truncate = originalHandleTruncate;
});

/** Session-file writes of `sessionId` fail with ENOSPC; journal writes after the first `journalOk` ones fail too (and truncations, when asked). */
function injectDoubleFault(sessionId: string, opts: { journalOk: number; truncateFails?: boolean }): { journalWrites: () => number } {
  (fs as { write: unknown }).write = (fd: number, ...rest: unknown[]) => {
    const callback = rest.at(-1) as (err: Error | null, n?: number) => void;
    if (readlinkSync(`/proc/self/fd/${fd}`).endsWith(`/sessions/${sessionId}.jsonl`))
      return void process.nextTick(() => callback(enospc()));
    return (originalWrite as (...a: unknown[]) => void)(fd, ...rest);
  };
  syncBuiltinESMExports();
  let journalWrites = 0;
  handleProto.writev = function (this: unknown, ...args: unknown[]) {
    if (++journalWrites > opts.journalOk) return Promise.reject(enospc());
    return originalHandleWrite.apply(this, args);
  };
  if (opts.truncateFails)
    handleProto.truncate = () => Promise.reject(Object.assign(new Error('EIO: i/o error, ftruncate'), { code: 'EIO' }));
  return { journalWrites: () => journalWrites };
}

async function storeWithOneCall(): Promise<CaptureStore> {
  const dir = mkdtempSync(join(tmpdir(), 'hl-double-fault-'));
  dirs.push(dir);
  const store = new CaptureStore(dir);
  await store.append('victim', { type: 'session', ...info('victim') });
  await store.append('victim', { type: 'call', ...call('victim', 0) });
  return store;
}

for (const truncateFails of [false, true]) {
  test(`a call answered 507 after a double fault is not brought back by a restart (${truncateFails ? 'the journal cannot be cut: it is checkpointed away' : 'its frames are cut off the journal'})`, async () => {
    const store = await storeWithOneCall();
    const fault = injectDoubleFault('victim', { journalOk: 1, truncateFails });
    const refused = await store.append('victim', { type: 'call', ...call('victim', 1) }).then(
      () => undefined,
      (err: unknown) => err,
    );
    assert.ok(refused instanceof StoreWriteError, `the append was refused: ${String(refused)}`);
    assert.equal(refused.status, 507);
    assert.equal(fault.journalWrites(), 2, 'the frames were journaled, then the withdrawal failed: the double fault happened');
    // The lab dies here (no close), the disk comes back, and the next lab replays the journal.
    (fs as { write: unknown }).write = originalWrite;
    syncBuiltinESMExports();
    handleProto.writev = originalHandleWrite;
    handleProto.truncate = originalHandleTruncate;
    const warnings: string[] = [];
    const restarted = new CaptureStore(store.dataDir, (m) => warnings.push(m));
    const [victim] = restarted.loadAll();
    assert.deepEqual(
      victim?.calls.map((c) => c.index),
      [0],
      `only the acknowledged call is stored\n${warnings.join('\n')}`,
    );
    assert.deepEqual(readdirSync(join(store.dataDir, 'journal')), []);
    await restarted.append('victim', { type: 'call', ...call('victim', 1) });
    assert.deepEqual(
      restarted.loadAll()[0]?.calls.map((c) => c.index),
      [0, 1],
      "the harness's retry is stored once",
    );
    await restarted.close();
  });
}
