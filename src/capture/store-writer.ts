// The capture store's writer: one JSON-lines file per session under `<dataDir>/sessions/`. A call is
// durable before its answer goes back to the harness, so a crash (kill -9, power loss) loses nothing
// that was answered.
//
// Durability is a group commit through a journal (`<dataDir>/journal/`, one file per commit lane):
// the appends of the sessions of a lane that arrive while its commit is under way wait for the next
// one, which writes each session's bytes to its file (the page cache) and all of them, framed, to
// the lane's journal in one O_DSYNC write. That write is the only wait for the disk, however many
// sessions wrote: an O_DSYNC write per session file cost each call a trip through the thread pool
// and a disk flush (the largest single item in the proxy's profile under load). A restart replays
// the journal into the session files (only a power loss can leave them short of it); a checkpoint,
// when the journal has grown, fdatasyncs the files it covers and removes it, and a clean close does
// the same.
//
// Calls are written against an earlier call of their session (call-codec.ts), so a session's bytes
// grow with its work, not with the square of its turns. Every write ends with a `sum` line, the
// session's running tally, so a restart reads a file's first line and its tail, not every call.
//
// A crash (or a full disk) can leave a torn last line: the first append to a file whose last byte is
// not a newline starts with one, so the torn bytes never swallow the next, whole record. An append
// that cannot reach the disk is refused (StoreWriteError: 507 for a full disk, 503 otherwise), and
// nothing of it stays in the session file or in a journal a replay would read.
import { closeSync, constants, open as openCb, write as writeCb, fstatSync, ftruncateSync, mkdirSync, openSync, readSync } from 'node:fs';
import { open, unlink, type FileHandle } from 'node:fs/promises';
import { SessionEncoder, type EncodedCall } from './call-codec.js';
import type { CallRecord } from './types.js';
import { emptyTally, SESSION_ID_PATTERN, sessionFileOf, sessionsDirOf, StoreWriteError, tallyLine } from './store-format.js';
import type { LoadedSession, SessionIndexEntry, SessionTally, StoreLine } from './store-format.js';
import {
  journalCancelFrame,
  journalDeleteFrame,
  journalDirOf,
  journalFileOf,
  journalFrameHead,
  listJournals,
  recoverJournal,
} from './store-journal.js';
import { loadStoredSessions, readSessionIndex, readStoredIndex } from './store-read.js';

interface PendingWrite {
  sessionId: string;
  text: string;
  line: StoreLine;
  /** For a call line: what the session's encoder remembers once it is on disk. */
  encoded?: EncodedCall;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/** Session files are plain appends: their durability comes from the journal (and a checkpoint's fdatasync). */
const SESSION_APPEND_FLAGS = constants.O_RDWR | constants.O_CREAT | constants.O_APPEND;
/** O_DSYNC is missing on Windows; there the journal is written, then fdatasynced. */
const JOURNAL_FLAGS =
  constants.O_DSYNC === undefined ? undefined : constants.O_WRONLY | constants.O_CREAT | constants.O_APPEND | constants.O_DSYNC;
/** Open files kept at most (least recently used closed first); enough for 1,000 live sessions. */
const MAX_OPEN_FILES = 1024;
/** A session file idle this long is closed. */
const IDLE_CLOSE_MS = 30_000;
/** A journal this large is checkpointed: the session files it covers are synced and it is removed. */
const JOURNAL_CHECKPOINT_BYTES = 32 * 1024 * 1024;

interface OpenFile {
  fd: number;
  /** The file's size: where the next append lands (this store is its only writer). */
  size: number;
  lastUsed: number;
  /** The file ended without a newline when opened (a torn line): the next write starts with one. */
  needsNewline: boolean;
}

/** Where a journal write put its frames: bytes [at, end) of that journal file. */
interface JournalPlacement {
  journal: JournalFile;
  at: number;
  end: number;
}

/** One session's part of a commit: its bytes are in its file, waiting for the journal to make them durable. */
interface WrittenGroup {
  sessionId: string;
  file: OpenFile;
  offset: number;
  data: Buffer;
  tally: SessionTally;
  writes: PendingWrite[];
}

/**
 * Independent commit lanes, each with its own journal file: a session always commits through the
 * same lane (by a hash of its id), so its appends stay in order, while up to this many journal
 * writes (and disk flushes) are in flight at once. With one lane every append waited for the commit
 * in flight and then its own: at 1,000 sessions that doubled the store's wait against per-file
 * O_DSYNC writes, which the thread pool ran four at a time.
 */
const JOURNAL_LANES = 4;

interface JournalFile {
  handle: FileHandle;
  seq: number;
  size: number;
}

interface Lane {
  /** Appends waiting for the lane's next commit, in arrival order. */
  pending: PendingWrite[];
  commitScheduled: boolean;
  committing: Promise<void> | undefined;
  journal: JournalFile | undefined;
  /** Journal writes, one at a time (a failed one is cut back before the next). */
  journalTail: Promise<unknown>;
  /** Session files with frames in the lane's journals (synced when they are checkpointed). */
  dirty: Set<string>;
  /** Full or broken journals of the lane, removed once their files are synced. */
  retired: JournalFile[];
  checkpointing: Promise<void> | undefined;
  /** The session-file writes of the lane's latest commit (settled, never rejects). */
  fileWrites: Promise<void>;
}

function newLane(): Lane {
  return {
    pending: [],
    commitScheduled: false,
    committing: undefined,
    journal: undefined,
    journalTail: Promise.resolve(),
    dirty: new Set(),
    retired: [],
    checkpointing: undefined,
    fileWrites: Promise.resolve(),
  };
}

export class CaptureStore {
  private readonly dir: string;
  private readonly journalDir: string;
  /** The commit lanes; a session always commits through the same one (see JOURNAL_LANES). */
  private readonly lanes: Lane[] = Array.from({ length: JOURNAL_LANES }, () => newLane());
  /** Per session: appends queued or in a commit not yet durable (files with any are never closed). */
  private readonly outstanding = new Map<string, number>();
  /** Open session files, least recently used first. */
  private readonly files = new Map<string, OpenFile>();
  /** Per session: the recent stored calls new calls are written against (dropped with the open file). */
  private readonly encoders = new Map<string, SessionEncoder>();
  /** Per session: the running tally, as the last `sum` line on disk says. */
  private readonly tallies = new Map<string, SessionTally>();
  /** The session-file opens in flight, chained (see openFile). */
  private opening: Promise<unknown> = Promise.resolve();
  /** Journal files are numbered in creation order across lanes. */
  private nextJournalSeq = 0;
  private sweeper: NodeJS.Timeout | undefined;

  constructor(
    readonly dataDir: string,
    private readonly warn: (message: string) => void = () => {},
  ) {
    this.dir = sessionsDirOf(dataDir);
    this.journalDir = journalDirOf(dataDir);
    mkdirSync(this.dir, { recursive: true });
    this.nextJournalSeq = recoverJournal(dataDir, warn);
  }

  /** The session's file; ids outside SESSION_ID_PATTERN are refused (they could name a path elsewhere). */
  fileOf(sessionId: string): string {
    return sessionFileOf(this.dataDir, sessionId);
  }

  /**
   * Resolves once the line is durable. Appends from every session that arrive while a commit is
   * under way go out together in the next one: each session's bytes are appended to its file, and
   * one journal write (O_DSYNC) makes the whole batch durable, so the cost of durability per tick
   * does not grow with the number of sessions writing.
   */
  append(sessionId: string, line: StoreLine): Promise<void> {
    return new Promise((resolve, reject) => {
      let text: string;
      let encoded: EncodedCall | undefined;
      try {
        this.fileOf(sessionId); // refuse ids that are not session ids before anything is queued
        if (line.type === 'call') {
          let encoder = this.encoders.get(sessionId);
          if (!encoder) this.encoders.set(sessionId, (encoder = new SessionEncoder()));
          encoded = encoder.encode(line as unknown as CallRecord);
          text = encoded.text;
        } else text = `${JSON.stringify(line)}\n`;
      } catch (err) {
        reject(err instanceof StoreWriteError ? err : new StoreWriteError(this.safeFileOf(sessionId), err));
        return;
      }
      this.outstanding.set(sessionId, (this.outstanding.get(sessionId) ?? 0) + 1);
      const lane = this.laneOf(sessionId);
      lane.pending.push({ sessionId, text, line, ...(encoded ? { encoded } : {}), resolve, reject });
      this.scheduleCommit(lane);
    });
  }

  private laneOf(sessionId: string): Lane {
    let h = 0;
    for (let i = 0; i < sessionId.length; i++) h = (h * 31 + sessionId.charCodeAt(i)) | 0;
    return this.lanes[(h >>> 0) % this.lanes.length]!;
  }

  private scheduleCommit(lane: Lane): void {
    if (lane.commitScheduled || lane.committing) return;
    lane.commitScheduled = true;
    // One loop turn's appends (every call that finished in it) share a commit.
    setImmediate(() => {
      lane.commitScheduled = false;
      lane.committing = this.commitLoop(lane).finally(() => {
        lane.committing = undefined;
        if (lane.pending.length) this.scheduleCommit(lane);
      });
    });
  }

  private async commitLoop(lane: Lane): Promise<void> {
    while (lane.pending.length) {
      const batch = lane.pending;
      lane.pending = [];
      await this.commit(lane, batch);
    }
  }

  private settle(writes: PendingWrite[]): void {
    for (const w of writes) {
      const left = (this.outstanding.get(w.sessionId) ?? 1) - 1;
      if (left > 0) this.outstanding.set(w.sessionId, left);
      else this.outstanding.delete(w.sessionId);
    }
  }

  private async commit(lane: Lane, batch: PendingWrite[]): Promise<void> {
    const bySession = new Map<string, PendingWrite[]>();
    for (const w of batch) {
      const list = bySession.get(w.sessionId);
      if (list) list.push(w);
      else bySession.set(w.sessionId, [w]);
    }
    // Files not open yet are opened in the thread pool, all at once (creating a file can take a
    // while on a busy disk).
    const openFailures = new Map<string, unknown>();
    const missing = [...bySession.keys()].filter((id) => !this.files.has(id));
    if (missing.length) await Promise.all(missing.map((id) => this.openFile(id).catch((err: unknown) => openFailures.set(id, err))));
    const written: WrittenGroup[] = [];
    for (const [sessionId, writes] of bySession) {
      let file: OpenFile | undefined;
      try {
        if (openFailures.has(sessionId)) throw openFailures.get(sessionId);
        file = this.fileFor(sessionId);
        let tally = this.tallies.get(sessionId) ?? emptyTally();
        for (const w of writes) tally = tallyLine(tally, w.line);
        const parts = writes.map((w) => w.text);
        const data = Buffer.from(`${file.needsNewline ? '\n' : ''}${parts.join('')}${JSON.stringify({ type: 'sum', ...tally })}\n`, 'utf8');
        const offset = file.size;
        file.size = offset + data.length;
        file.needsNewline = false;
        written.push({ sessionId, file, offset, data, tally, writes });
      } catch (err) {
        if (file) this.closeFile(sessionId);
        this.settle(writes);
        const failure = err instanceof StoreWriteError ? err : new StoreWriteError(this.safeFileOf(sessionId), err);
        for (const w of writes) w.reject(failure);
      }
    }
    if (written.length === 0) return;
    // One durable journal write for all of them, and meanwhile each session's bytes to its file
    // (the page cache; in the thread pool, so a commit of hundreds of sessions never stalls the loop).
    const frames: Buffer[] = [];
    for (const g of written) frames.push(journalFrameHead(g.sessionId, g.offset, g.data), g.data);
    // Dirty from now on: a checkpoint that retires the journal holding these frames syncs these
    // files, after waiting for their writes (fileWrites).
    for (const g of written) lane.dirty.add(g.sessionId);
    let placed: JournalPlacement | undefined;
    const journaled = this.writeJournal(lane, frames).then(
      (placement) => void (placed = placement),
      (err: unknown) => err ?? new Error('journal write failed'),
    );
    const fileWrites = Promise.all(
      written.map((g) =>
        writeAllAsync(g.file.fd, g.data).then(
          () => undefined,
          (err: unknown) => err ?? new Error('write failed'),
        ),
      ),
    );
    lane.fileWrites = fileWrites.then(() => {});
    const fileErrors = await fileWrites;
    let journalError = await journaled;
    const failed = written.filter((_, i) => fileErrors[i] !== undefined);
    // A file write that failed (a full disk) is withdrawn from the journal before its caller hears,
    // so a replay never brings back a record whose caller was told it was not stored.
    if (journalError === undefined && failed.length) {
      journalError = await this.writeJournal(
        lane,
        failed.map((g) => journalCancelFrame(g.sessionId, g.offset)),
      ).then(
        () => undefined,
        (err: unknown) => err ?? new Error('journal write failed'),
      );
      // The double fault: the commit's frames are durable and their withdrawal is not, so a replay
      // would bring back calls whose callers are about to hear 507/503. Every group of the commit is
      // refused: their files are cut back, then the frames leave the journal before anyone is answered.
      if (journalError !== undefined && placed) {
        for (const g of written) {
          cutBack(g.file.fd, g.offset);
          g.file.size = g.offset;
        }
        await this.withdrawCommit(lane, placed);
      }
    }
    const reject = (g: WrittenGroup, err: unknown) => {
      // Cut the file back, so no caller that gets an error has its record in it and no torn line
      // is left; if even that fails, reopening (on the next append) notices the torn line.
      cutBack(g.file.fd, g.offset);
      g.file.size = g.offset;
      this.settle(g.writes);
      const failure = err instanceof StoreWriteError ? err : new StoreWriteError(this.safeFileOf(g.sessionId), err);
      for (const w of g.writes) w.reject(failure);
    };
    if (journalError !== undefined) {
      for (const g of written) reject(g, journalError);
      for (const g of failed) this.closeFile(g.sessionId);
      return;
    }
    for (const [i, g] of written.entries()) {
      if (fileErrors[i] === undefined) continue;
      reject(g, fileErrors[i]);
      this.closeFile(g.sessionId);
    }
    for (const [i, g] of written.entries()) {
      if (fileErrors[i] !== undefined) continue;
      this.tallies.set(g.sessionId, g.tally);
      const encoder = this.encoders.get(g.sessionId);
      if (encoder) for (const w of g.writes) if (w.encoded) encoder.remember(w.encoded.base);
      this.settle(g.writes);
      for (const w of g.writes) w.resolve();
    }
  }

  /**
   * Takes a commit's frames out of the journal again: cut off when they are still its last bytes (a
   * truncation needs no free space), else every file the lane's journals cover is synced (the
   * refused groups are already cut back) and the journals are removed, so no replay can find them.
   */
  private withdrawCommit(lane: Lane, placed: JournalPlacement): Promise<void> {
    const run = async () => {
      const j = placed.journal;
      if (j.size === placed.end) {
        try {
          await j.handle.truncate(placed.at);
          j.size = placed.at;
          return;
        } catch {
          // a journal that cannot be cut is checkpointed away below
        }
      }
      while (lane.checkpointing) await lane.checkpointing;
      if (lane.journal) lane.retired.push(lane.journal);
      lane.journal = undefined;
      await this.checkpoint(lane);
      if (lane.retired.length) throw new Error('the journal holding refused calls could not be retired');
    };
    const result = lane.journalTail.then(run, run);
    lane.journalTail = result.catch(() => {});
    return result.catch((err: unknown) =>
      this.warn(
        `${this.journalDir}: ${err instanceof Error ? err.message : String(err)}; a restart may replay calls that were answered 507/503`,
      ),
    );
  }

  /** Appends frames to the journal and resolves once they are on disk (with where they went); a failed write is cut back. */
  private writeJournal(lane: Lane, frames: Buffer[]): Promise<JournalPlacement> {
    const run = async () => {
      const journal = await this.openJournal(lane);
      const chunks = writeChunks(frames);
      const size = chunks.reduce((n, c) => n + c.length, 0);
      const before = journal.size;
      try {
        for (let rest = chunks; rest.length > 0;) rest = unwritten(rest, (await journal.handle.writev(rest)).bytesWritten);
        if (JOURNAL_FLAGS === undefined) await journal.handle.datasync();
      } catch (err) {
        // Cut back a partial frame; if that fails, the next write starts a new journal file (a
        // reader stops at the torn frame of this one, so nothing after it may go here).
        try {
          await journal.handle.truncate(before);
        } catch {
          lane.journal = undefined;
          lane.retired.push(journal);
        }
        throw err;
      }
      journal.size = before + size;
      if (journal.size >= JOURNAL_CHECKPOINT_BYTES) this.startCheckpoint(lane);
      return { journal, at: before, end: journal.size };
    };
    const result = lane.journalTail.then(run, run);
    lane.journalTail = result.catch(() => {});
    return result;
  }

  private async openJournal(lane: Lane): Promise<JournalFile> {
    if (lane.journal) return lane.journal;
    mkdirSync(this.journalDir, { recursive: true });
    const seq = this.nextJournalSeq++;
    const handle = await open(journalFileOf(this.dataDir, seq), JOURNAL_FLAGS ?? 'a');
    lane.journal = { handle, seq, size: fstatSync(handle.fd).size };
    return lane.journal;
  }

  /**
   * Starts a new journal and, behind it, syncs every session file the old ones covered; once they
   * are on disk the old journal files are removed. Calls keep committing to the new journal meanwhile.
   */
  private startCheckpoint(lane: Lane): void {
    if (lane.checkpointing || !lane.journal) return;
    lane.retired.push(lane.journal);
    lane.journal = undefined;
    lane.checkpointing = this.checkpoint(lane).finally(() => (lane.checkpointing = undefined));
  }

  /** Syncs the lane's dirty files, then closes and removes its retired journals. */
  private async checkpoint(lane: Lane): Promise<void> {
    // The commit whose frames went last into the old journal may still be writing its files.
    await lane.fileWrites;
    const dirty = [...lane.dirty];
    lane.dirty = new Set();
    const retired = lane.retired.splice(0);
    try {
      await syncFiles(dirty.map((id) => this.fileOf(id)));
      await syncDir(this.dir);
    } catch {
      // Not synced: keep the journals (a restart replays them) and try again at the next checkpoint.
      for (const id of dirty) lane.dirty.add(id);
      lane.retired.unshift(...retired);
      return;
    }
    for (const j of retired) {
      await j.handle.close().catch(() => {});
      await unlink(journalFileOf(this.dataDir, j.seq)).catch(() => {});
    }
  }

  private safeFileOf(sessionId: string): string {
    try {
      return this.fileOf(sessionId);
    } catch {
      return this.dir;
    }
  }

  /** The session's open file (opened by `openFile` before, unless it was closed since: then opened here). */
  private fileFor(sessionId: string): OpenFile {
    const known = this.files.get(sessionId);
    if (known) {
      // Re-insert: the map's order is the eviction order.
      this.files.delete(sessionId);
      known.lastUsed = Date.now();
      this.files.set(sessionId, known);
      return known;
    }
    return this.admitFile(sessionId, openSync(this.fileOf(sessionId), SESSION_APPEND_FLAGS, 0o666));
  }

  /**
   * Opens (creates) a session file in the thread pool, one at a time: every creation takes the
   * sessions directory's lock, and a commit that opened hundreds at once kept the thread pool's
   * threads spinning on it (5% of the proxy's CPU while 1,000 sessions started within a second).
   */
  private openFile(sessionId: string): Promise<void> {
    const run = () => this.openFileNow(sessionId);
    const opened = this.opening.then(run, run);
    this.opening = opened.catch(() => {});
    return opened;
  }

  private async openFileNow(sessionId: string): Promise<void> {
    const path = this.fileOf(sessionId);
    const fd = await new Promise<number>((resolve, reject) =>
      openCb(path, SESSION_APPEND_FLAGS, 0o666, (err, fd) => (err ? reject(err) : resolve(fd))),
    );
    if (this.files.has(sessionId)) closeSync(fd);
    else this.admitFile(sessionId, fd);
  }

  private admitFile(sessionId: string, fd: number): OpenFile {
    const path = this.fileOf(sessionId);
    let state: { size: number; torn: boolean };
    try {
      state = fileState(fd);
    } catch (err) {
      closeSync(fd);
      throw err;
    }
    if (!this.tallies.has(sessionId))
      this.tallies.set(sessionId, state.size === 0 ? emptyTally() : (readSessionIndex(path)?.tally ?? emptyTally()));
    const file: OpenFile = { fd, size: state.size, lastUsed: Date.now(), needsNewline: state.torn };
    this.files.set(sessionId, file);
    for (const id of this.files.keys()) {
      if (this.files.size <= MAX_OPEN_FILES) break;
      if (id !== sessionId && !this.outstanding.has(id)) this.closeFile(id);
    }
    this.sweeper ??= setInterval(() => this.closeIdle(), IDLE_CLOSE_MS / 2).unref();
    return file;
  }

  private closeIdle(): void {
    const cutoff = Date.now() - IDLE_CLOSE_MS;
    for (const [id, file] of this.files) if (file.lastUsed < cutoff && !this.outstanding.has(id)) this.closeFile(id);
    if (this.files.size === 0) {
      clearInterval(this.sweeper);
      this.sweeper = undefined;
    }
  }

  private closeFile(sessionId: string): void {
    const file = this.files.get(sessionId);
    if (!file) return;
    this.files.delete(sessionId);
    // An idle session leaves memory: its next call is written in full and starts a new chain, and its
    // tally is read back from the file's last `sum` line when the file opens again.
    this.encoders.delete(sessionId);
    this.tallies.delete(sessionId);
    try {
      closeSync(file.fd);
    } catch {
      // the journal holds what was written; a failing close loses nothing
    }
  }

  private async settled(sessionId: string): Promise<void> {
    while (this.outstanding.has(sessionId)) await new Promise((r) => setTimeout(r, 5));
  }

  async delete(sessionId: string): Promise<void> {
    if (!SESSION_ID_PATTERN.test(sessionId)) return; // no such file can exist
    // Let queued writes land first so a late append cannot recreate the file.
    await this.settled(sessionId);
    this.closeFile(sessionId);
    this.tallies.delete(sessionId);
    const lane = this.laneOf(sessionId);
    lane.dirty.delete(sessionId);
    // The deletion is journaled before the file goes, so a replay after a crash does not bring it back.
    if (lane.journal || listJournals(this.journalDir).length) await this.writeJournal(lane, [journalDeleteFrame(sessionId)]);
    await unlink(this.fileOf(sessionId)).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err;
    });
  }

  /** Waits for queued appends, syncs and closes every open file and retires the journal. Appends after this reopen their file. */
  async close(): Promise<void> {
    for (const lane of this.lanes) {
      while (lane.pending.length || lane.committing || lane.commitScheduled)
        await (lane.committing ?? new Promise((r) => setTimeout(r, 5)));
      await lane.journalTail;
      while (lane.checkpointing) await lane.checkpointing;
      if (lane.journal) lane.retired.push(lane.journal);
      lane.journal = undefined;
      if (lane.retired.length || lane.dirty.size) await this.checkpoint(lane);
    }
    clearInterval(this.sweeper);
    this.sweeper = undefined;
    for (const id of [...this.files.keys()]) this.closeFile(id);
  }

  /** Everything on disk, for a restart on the same data dir; `warn` hears of torn lines and headless files. */
  loadAll(warn: (message: string) => void = () => {}): LoadedSession[] {
    return loadStoredSessions(this.dataDir, warn);
  }

  /**
   * What a restart needs of every stored session (first line and tail of each file). The tallies are
   * not primed: a session's is read from its file's tail when it is next appended to, so the store
   * holds tallies of open files only.
   */
  readIndex(warn: (message: string) => void = () => {}): SessionIndexEntry[] {
    return readStoredIndex(this.dataDir, warn);
  }
}

/**
 * A commit's frames as the buffers of one writev: runs of small frames joined (a commit of 1,000
 * sessions stays one system call, one disk flush, well under IOV_MAX buffers), a large frame passed
 * as it is (a 128k-token session's first call is a 1.2 MB line, which joining copied again).
 */
const JOIN_BELOW = 64 * 1024;

export function writeChunks(frames: readonly Buffer[]): Buffer[] {
  const out: Buffer[] = [];
  let run: Buffer[] = [];
  const flush = () => {
    if (run.length) out.push(run.length === 1 ? run[0]! : Buffer.concat(run));
    run = [];
  };
  for (const f of frames) {
    if (f.length >= JOIN_BELOW) {
      flush();
      out.push(f);
    } else run.push(f);
  }
  flush();
  return out;
}

/** What is left of `chunks` once their first `n` bytes are written. */
export function unwritten(chunks: readonly Buffer[], n: number): Buffer[] {
  let k = 0;
  while (k < chunks.length && n >= chunks[k]!.length) n -= chunks[k++]!.length;
  const rest = chunks.slice(k);
  if (n > 0 && rest.length) rest[0] = rest[0]!.subarray(n);
  return rest;
}

/** Appends all of `data` (O_APPEND: each write lands at the end), in the thread pool. */
function writeAllAsync(fd: number, data: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    const step = (offset: number) =>
      writeCb(fd, data, offset, data.length - offset, null, (err, n) => {
        if (err) reject(err);
        else if (offset + n < data.length) step(offset + n);
        else resolve();
      });
    step(0);
  });
}

function cutBack(fd: number, size: number): void {
  try {
    ftruncateSync(fd, size);
  } catch {
    // reopening (on the next append) notices the torn line and starts a fresh one
  }
}

function syncFiles(paths: string[]): Promise<void> {
  return Promise.all(
    paths.map(async (path) => {
      let handle: FileHandle;
      try {
        handle = await open(path, 'r');
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return; // deleted since
        throw err;
      }
      try {
        await handle.datasync();
      } finally {
        await handle.close().catch(() => {});
      }
    }),
  ).then(() => {});
}

async function syncDir(dir: string): Promise<void> {
  if (process.platform === 'win32') return;
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close().catch(() => {});
  }
}

/** The file's size, and whether its last byte is something other than a newline (sync: two tiny syscalls, once per open). */
function fileState(fd: number): { size: number; torn: boolean } {
  const { size } = fstatSync(fd);
  if (size === 0) return { size, torn: false };
  const last = Buffer.alloc(1);
  readSync(fd, last, 0, 1, size - 1);
  return { size, torn: last[0] !== 0x0a };
}
