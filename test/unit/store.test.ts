// CaptureStore: appends land whole and in order, across many sessions (more than stay open at once),
// survive delete/close/reopen, and read back with loadAll.
import assert from 'node:assert/strict';
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CaptureStore, StoreWriteError, readJournalFrames } from '../../src/capture/store.js';
import { unwritten, writeChunks } from '../../src/capture/store-writer.js';
import type { CallRecord, SessionInfo } from '../../src/capture/types.js';

const dirs: string[] = [];
after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
function freshStore(): CaptureStore {
  const dir = mkdtempSync(join(tmpdir(), 'hl-store-'));
  dirs.push(dir);
  return new CaptureStore(dir);
}

const info = (id: string): SessionInfo => ({
  session_id: id,
  created_at: '2026-01-01T00:00:00.000Z',
  model: 'm',
  engine_url: 'http://e',
  max_model_calls: 0,
  metadata: {},
});
const call = (id: string, index: number, payload = ''): CallRecord =>
  ({ call_id: `${id}-${index}`, session_id: id, index, payload }) as unknown as CallRecord;

test('concurrent appends to one session all land, whole and in call order', async () => {
  const store = freshStore();
  await store.append('s1', { type: 'session', ...info('s1') });
  await Promise.all(Array.from({ length: 200 }, (_, i) => store.append('s1', { type: 'call', ...call('s1', i, 'x'.repeat(i * 50)) })));
  const [loaded] = store.loadAll();
  assert.equal(loaded!.skipped, 0);
  assert.deepEqual(
    loaded!.calls.map((c) => c.index),
    Array.from({ length: 200 }, (_, i) => i),
  );
  await store.close();
});

test('more sessions than files kept open: every line of every session is stored', async () => {
  const store = freshStore();
  const ids = Array.from({ length: 1100 }, (_, i) => `s${i}`);
  await Promise.all(ids.map((id) => store.append(id, { type: 'session', ...info(id) })));
  for (let round = 0; round < 2; round++) await Promise.all(ids.map((id) => store.append(id, { type: 'call', ...call(id, round) })));
  const loaded = store.loadAll();
  assert.equal(loaded.length, ids.length);
  for (const session of loaded)
    assert.deepEqual(
      session.calls.map((c) => c.index),
      [0, 1],
      session.info.session_id,
    );
  await store.close();
});

test('delete waits for queued appends, removes the file, and a later append starts a new one', async () => {
  const store = freshStore();
  await store.append('gone', { type: 'session', ...info('gone') });
  const pending = store.append('gone', { type: 'call', ...call('gone', 0) });
  await store.delete('gone');
  await pending;
  assert.equal(existsSync(store.fileOf('gone')), false);
  await store.append('gone', { type: 'budget_stop', at: 'now' });
  const lines = readFileSync(store.fileOf('gone'), 'utf8').split('\n');
  assert.equal(lines[0], '{"type":"budget_stop","at":"now"}', 'the new file holds only the new line (and its tally)');
  assert.equal(JSON.parse(lines[1]!).type, 'sum');
  assert.equal(JSON.parse(lines[1]!).n, 0, "the deleted session's calls are not counted");
  await store.close();
});

test('close then append: the file is reopened and appended to, not truncated', async () => {
  const store = freshStore();
  await store.append('s', { type: 'session', ...info('s') });
  await store.close();
  await store.append('s', { type: 'call', ...call('s', 0) });
  const [loaded] = store.loadAll();
  assert.equal(loaded!.info.session_id, 's');
  assert.equal(loaded!.calls.length, 1);
  await store.close();
});

test('an append that cannot be written rejects, and the next one reopens the file', async () => {
  const store = freshStore();
  await store.append('s', { type: 'session', ...info('s') });
  // A directory where the session file should be: the open fails.
  await store.delete('s');
  mkdirSync(store.fileOf('s'));
  await assert.rejects(store.append('s', { type: 'session', ...info('s') }), /EISDIR|illegal operation on a directory/);
  rmSync(store.fileOf('s'), { recursive: true });
  await store.append('s', { type: 'session', ...info('s') });
  assert.equal(store.loadAll()[0]!.info.session_id, 's');
  await store.close();
});

test('a torn last line (torn by hand) is skipped with a warning naming the file, and the next append starts on a fresh line', async () => {
  const store = freshStore();
  await store.append('torn', { type: 'session', ...info('torn') });
  await store.append('torn', { type: 'call', ...call('torn', 0) });
  await store.close();
  const file = store.fileOf('torn');
  const whole = readFileSync(file, 'utf8');
  // A crash mid-write: half of the next record, no newline.
  appendFileSync(file, JSON.stringify({ type: 'call', ...call('torn', 1, 'x'.repeat(100)) }).slice(0, 60));
  const warnings: string[] = [];
  let [loaded] = store.loadAll((m) => warnings.push(m));
  assert.deepEqual(
    loaded!.calls.map((c) => c.index),
    [0],
  );
  assert.deepEqual(loaded!.skippedLines, [whole.split('\n').length], 'the torn line is the last one');
  assert.equal(warnings.length, 1);
  assert.ok(warnings[0]!.includes(file), `the warning names the file: ${warnings[0]}`);

  // A new store (a restarted proxy) appends: the record lands on its own line, whole.
  const restarted = new CaptureStore(store.dataDir);
  await restarted.append('torn', { type: 'call', ...call('torn', 2) });
  await restarted.append('torn', { type: 'call', ...call('torn', 3) });
  const text = readFileSync(file, 'utf8');
  assert.ok(text.startsWith(whole));
  const lines = text.slice(whole.length).split('\n');
  assert.equal(lines.length, 6, 'torn bytes, two records each with its tally, and the final empty piece');
  for (const l of lines.slice(1, 5)) assert.doesNotThrow(() => JSON.parse(l));
  assert.deepEqual(
    lines.slice(1, 5).map((l) => (JSON.parse(l) as { type: string }).type),
    ['call', 'sum', 'call', 'sum'],
  );
  warnings.length = 0;
  [loaded] = restarted.loadAll((m) => warnings.push(m));
  assert.deepEqual(
    loaded!.calls.map((c) => c.index),
    [0, 2, 3],
  );
  assert.equal(warnings.length, 1, 'still one torn line, no new one');
  await restarted.close();
});

test('a file without a readable header is reported, not silently dropped', () => {
  const store = freshStore();
  writeFileSync(store.fileOf('headless'), '{"type":"sess');
  const warnings: string[] = [];
  assert.deepEqual(
    store.loadAll((m) => warnings.push(m)),
    [],
  );
  assert.match(warnings[0]!, /headless\.jsonl: no readable session header/);
});

test('ids that are not session ids never name a file: append rejects, delete does nothing', async () => {
  const store = freshStore();
  const outside = join(store.dataDir, 'keep.jsonl');
  writeFileSync(outside, 'precious\n');
  await store.delete('../keep');
  assert.equal(readFileSync(outside, 'utf8'), 'precious\n');
  await assert.rejects(store.append('../keep', { type: 'budget_stop', at: 'now' }), StoreWriteError);
  assert.equal(readFileSync(outside, 'utf8'), 'precious\n');
});

// The journal: what a crash that loses the page cache (power loss) leaves, simulated by cutting a
// session file back (or removing it) while the store that wrote it is still open, then starting a
// new store on the same dir, as a restarted proxy does.

test('a commit journals the appends of many sessions together (one write per lane), and a clean close retires the journals', async () => {
  const store = freshStore();
  const ids = Array.from({ length: 40 }, (_, i) => `j${i}`);
  await Promise.all(ids.map((id) => store.append(id, { type: 'session', ...info(id) })));
  const journalDir = join(store.dataDir, 'journal');
  const frames = readdirSync(journalDir).flatMap((f) => readJournalFrames(join(journalDir, f)));
  assert.equal(frames.length, ids.length, 'one frame per session');
  assert.ok(readdirSync(journalDir).length <= 4, 'at most one journal per lane');
  await store.close();
  assert.deepEqual(readdirSync(journalDir), [], 'a clean close syncs the files and removes the journal');
});

test('after a lost page cache, a restart replays the journal: every acknowledged append is back, whole', async () => {
  const store = freshStore();
  await store.append('p', { type: 'session', ...info('p') });
  await Promise.all(Array.from({ length: 5 }, (_, i) => store.append('p', { type: 'call', ...call('p', i, 'y'.repeat(300)) })));
  await store.append('q', { type: 'session', ...info('q') });
  await store.append('q', { type: 'call', ...call('q', 0) });
  const whole = readFileSync(store.fileOf('p'));
  // Power loss: the tail of p never reached the disk (and a torn half line is there instead); q is gone.
  writeFileSync(store.fileOf('p'), Buffer.concat([whole.subarray(0, 200), Buffer.from('{"type":"call","ha')]));
  rmSync(store.fileOf('q'));
  const warnings: string[] = [];
  const restarted = new CaptureStore(store.dataDir, (m) => warnings.push(m));
  assert.deepEqual(readFileSync(store.fileOf('p')), whole, 'p is byte for byte what was acknowledged');
  const loaded = restarted.loadAll();
  assert.deepEqual(
    loaded.map((s) => [s.info.session_id, s.calls.map((c) => c.index), s.skipped]),
    [
      ['p', [0, 1, 2, 3, 4], 0],
      ['q', [0], 0],
    ],
  );
  assert.match(warnings.join('\n'), /restored \d+ journaled append/);
  assert.deepEqual(readdirSync(join(store.dataDir, 'journal')), [], 'the replayed journal is removed');
  await restarted.append('p', { type: 'call', ...call('p', 5) });
  assert.deepEqual(
    restarted.loadAll()[0]!.calls.map((c) => c.index),
    [0, 1, 2, 3, 4, 5],
  );
  await restarted.close();
});

test('a commit with large lines among small ones journals them all: a restart after a lost page cache brings back every one', async () => {
  const store = freshStore();
  const ids = ['big1', 'small1', 'big2', 'small2'];
  for (const id of ids) await store.append(id, { type: 'session', ...info(id) });
  // One commit: the four appends arrive together (large lines are written without joining them).
  await Promise.all(
    ids.map((id, i) =>
      store.append(id, {
        type: 'call',
        ...call(id, 0, (id.startsWith('big') ? 'B' : 's').repeat(id.startsWith('big') ? 200_000 + i : 100)),
      }),
    ),
  );
  const files = ids.map((id) => readFileSync(store.fileOf(id)));
  for (const id of ids) writeFileSync(store.fileOf(id), ''); // the page cache lost every call line
  const restarted = new CaptureStore(store.dataDir);
  ids.forEach((id, i) => assert.deepEqual(readFileSync(store.fileOf(id)), files[i], `${id} is back byte for byte`));
  await restarted.close();
});

test("a commit's frames as writev buffers: the same bytes in order, small runs joined, large frames as they are", () => {
  const sizes = [3, 70_000, 5, 6, 65_536, 65_535, 1, 100_000];
  const frames = sizes.map((n, i) => Buffer.alloc(n, i + 1));
  const chunks = writeChunks(frames);
  assert.deepEqual(Buffer.concat(chunks), Buffer.concat(frames));
  assert.deepEqual(
    chunks.map((c) => c.length),
    [3, 70_000, 11, 65_536, 65_536, 100_000],
  );
  assert.ok(chunks[1] === frames[1] && chunks[3] === frames[4], 'large frames are passed, not copied');
  const whole = Buffer.concat(frames);
  for (const n of [0, 1, 3, 4, 70_003, 70_004, whole.length - 1, whole.length])
    assert.deepEqual(Buffer.concat(unwritten(chunks, n)), whole.subarray(n), `after ${n} bytes`);
  assert.deepEqual(unwritten(chunks, whole.length), []);
});

test('a torn journal frame (a crash mid-commit) is not replayed, and a deleted session stays deleted', async () => {
  const store = freshStore();
  await store.append('kept', { type: 'session', ...info('kept') });
  await store.append('dropped', { type: 'session', ...info('dropped') });
  await store.append('dropped', { type: 'call', ...call('dropped', 0) });
  await store.delete('dropped');
  const journalDir = join(store.dataDir, 'journal');
  const [journal] = readdirSync(journalDir);
  // A commit that never finished: its head is there, its bytes only in part. Its caller got no answer.
  appendFileSync(join(journalDir, journal!), `${JSON.stringify({ s: 'kept', o: 999_999, n: 50, c: '0000000000000000' })}\n{"type":"call"`);
  const restarted = new CaptureStore(store.dataDir);
  assert.equal(existsSync(store.fileOf('dropped')), false, 'the deletion was journaled after its appends');
  const loaded = restarted.loadAll();
  assert.deepEqual(
    loaded.map((s) => [s.info.session_id, s.calls.length, s.skipped]),
    [['kept', 0, 0]],
  );
  await restarted.close();
});

test('a failed commit is cut back from the session file and the journal: nothing unacknowledged is replayed', async () => {
  const store = freshStore();
  await store.append('s', { type: 'session', ...info('s') });
  // A directory where another session's file should be: that session's part fails, the rest commits.
  mkdirSync(store.fileOf('blocked'));
  const results = await Promise.allSettled([
    store.append('s', { type: 'call', ...call('s', 0) }),
    store.append('blocked', { type: 'session', ...info('blocked') }),
  ]);
  assert.deepEqual(
    results.map((r) => r.status),
    ['fulfilled', 'rejected'],
  );
  const journalDir = join(store.dataDir, 'journal');
  const frames = readdirSync(journalDir).flatMap((f) => readJournalFrames(join(journalDir, f)));
  assert.deepEqual(
    frames.map((f) => ('s' in f ? f.s : 'd' in f ? `delete ${f.d}` : `cancel ${f.x}`)),
    ['s', 's'],
    'only what was stored is journaled',
  );
  rmSync(store.fileOf('blocked'), { recursive: true });
  await store.close();
});

test('a journal past its size is checkpointed: the files it covered are synced, it is removed, and commits go on in a new one', async () => {
  const store = freshStore();
  const journalDir = join(store.dataDir, 'journal');
  await store.append('a', { type: 'session', ...info('a') });
  // 36 MiB of calls: past the 32 MiB checkpoint size once.
  for (let i = 0; i < 36; i++) await store.append('a', { type: 'call', ...call('a', i, 'z'.repeat(1024 * 1024)) });
  const first = '00000000.wal';
  for (let tries = 0; tries < 500 && readdirSync(journalDir).includes(first); tries++) await new Promise((r) => setTimeout(r, 10));
  const journals = readdirSync(journalDir);
  assert.equal(journals.includes(first), false, `the full journal was retired (left: ${journals.join(', ')})`);
  assert.equal(journals.length, 1, 'commits after the checkpoint went to a new journal');
  const loaded = store.loadAll();
  assert.deepEqual(
    loaded.map((s) => s.calls.length),
    [36],
  );
  await store.close();
});
