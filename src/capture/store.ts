// Durable capture store: one JSON-lines file per session under `<dataDir>/sessions/`. A call is
// durable before its answer goes back to the harness, so a crash (kill -9, power loss) loses nothing
// that was answered.
//
// Durability is a group commit through a journal (`<dataDir>/journal/`, one file per commit lane):
// the appends of the sessions of a lane that arrive while its commit is under way wait for the next
// one, which writes each session's bytes to its file (the page cache) and all of them, framed, to
// the lane's journal in one O_DSYNC write. That write is the only wait for the disk, however many
// sessions wrote: an O_DSYNC write per session file cost each call a trip through the thread pool
// and a disk flush (the largest single item in the proxy's profile under load). A restart replays the journal into the session
// files (only a power loss can leave them short of it); a checkpoint, when the journal has grown,
// fdatasyncs the files it covers and removes it, and a clean close does the same.
//
// Calls are written against an earlier call of their session (call-codec.ts), so a session's bytes
// grow with its work, not with the square of its turns. Every write ends with a `sum` line, the
// session's running tally, so a restart reads a file's first line and its tail, not every call.
//
// A crash (or a full disk) can leave a torn last line. Loading skips it with a warning naming the
// file, and the first append to a file whose last byte is not a newline starts with one, so the torn
// bytes never swallow the next, whole record.
import {
  closeSync,
  constants,
  open as openCb,
  write as writeCb,
  existsSync,
  statSync,
  truncateSync,
  fdatasyncSync,
  fstatSync,
  fsyncSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { open, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import { CallDecodeError, SessionDecoder, SessionEncoder, type EncodedCall } from './call-codec.js';
import type { CallRecord, CaptureLevel, SessionInfo } from './types.js';

/** What a session id may be; the store names files after ids, so nothing else ever names a file. */
export const SESSION_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

export type StoreLine = ({ type: 'session' } & SessionInfo) | ({ type: 'call' } & CallRecord) | { type: 'budget_stop'; at: string };

/**
 * A session's running counts, as the `sum` line after every write records them: what a restart
 * needs to list the session and go on counting without reading its calls.
 */
export interface SessionTally {
  /** Call lines (answered or failed). */
  n: number;
  /** Calls without an error. */
  ok: number;
  /** One past the highest call index. */
  next: number;
  /** Prompt and completion tokens of the calls without an error (ids, else the usage counts). */
  pt: number;
  ct: number;
  /** Calls that failed in the engine. */
  ee: number;
  /** Budget stops. */
  bs: number;
  /** The capture level of the newest session line that fixed one. */
  lvl?: CaptureLevel;
}

export const emptyTally = (): SessionTally => ({ n: 0, ok: 0, next: 0, pt: 0, ct: 0, ee: 0, bs: 0 });

/** The tally after `line` (a new object; `t` is not changed). */
export function tallyLine(t: SessionTally, line: StoreLine): SessionTally {
  const next = { ...t };
  if (line.type === 'call') {
    next.n++;
    next.next = Math.max(next.next, line.index + 1);
    if (line.error) {
      if (line.error.kind === 'engine') next.ee++;
    } else {
      next.ok++;
      next.pt += line.prompt_token_ids?.length ?? line.usage?.prompt_tokens ?? 0;
      next.ct += line.completion_token_ids?.length ?? line.usage?.completion_tokens ?? 0;
    }
  } else if (line.type === 'budget_stop') next.bs++;
  else if (line.type === 'session' && line.capture_level) next.lvl = line.capture_level;
  return next;
}

/** What a restart knows of a stored session without reading its calls. */
export interface SessionIndexEntry {
  info: SessionInfo;
  tally: SessionTally;
  file: string;
  /** The file's size when read. */
  bytes: number;
  /** The file ended in a torn line (a crash mid-write); it is skipped when the calls are read. */
  torn: boolean;
}

export interface LoadedSession {
  info: SessionInfo;
  calls: CallRecord[];
  budgetStops: number;
  /** Lines that could not be parsed (a torn last line after a crash). */
  skipped: number;
  /** 1-based numbers of the skipped lines. */
  skippedLines: number[];
  /** The session's file. */
  file: string;
}

/**
 * An append that did not reach the disk. `status` is what the harness gets: 507 when the disk (or
 * quota) is full, 503 for every other storage failure (read-only file system, I/O error, ...).
 */
export class StoreWriteError extends Error {
  readonly status: number;
  readonly code: string | undefined;
  constructor(
    readonly file: string,
    cause: unknown,
  ) {
    const code = (cause as NodeJS.ErrnoException | undefined)?.code;
    const why =
      code === 'ENOSPC' || code === 'EDQUOT' ? 'the disk is full' : code === 'EROFS' ? 'the file system is read-only' : 'the write failed';
    super(
      `the capture store could not record this call (${why}: ${cause instanceof Error ? cause.message : String(cause)}); nothing was stored`,
    );
    this.name = 'StoreWriteError';
    this.status = code === 'ENOSPC' || code === 'EDQUOT' ? 507 : 503;
    this.code = code;
  }
}

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
      const data = frames.length === 1 ? frames[0]! : Buffer.concat(frames);
      const before = journal.size;
      try {
        for (let offset = 0; offset < data.length;) offset += (await journal.handle.write(data, offset, data.length - offset)).bytesWritten;
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
      journal.size = before + data.length;
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
    if (lane.journal || listJournals(this.journalDir).length)
      await this.writeJournal(lane, [Buffer.from(`${JSON.stringify({ d: sessionId })}\n`)]);
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

// ---- the journal ----
//
// `<dataDir>/journal/<seq>.wal`: frames of a JSON head line, then (for an append) the exact bytes
// appended to a session file: {"s": session id, "o": offset in its file, "n": bytes, "c": checksum}.
// A deletion is a head line {"d": session id} alone; {"x": session id, "o": offset} withdraws an append
// whose file write failed. A restart replays every journal in order: a
// session file shorter than a frame's end, or holding other bytes there, is cut to the frame's
// offset and given its bytes; then the files are synced and the journals removed. A frame that is
// incomplete or fails its checksum (a torn write) ends its journal: it was never acknowledged.

function journalDirOf(dataDir: string): string {
  return join(dataDir, 'journal');
}

function journalFileOf(dataDir: string, seq: number): string {
  return join(journalDirOf(dataDir), `${String(seq).padStart(8, '0')}.wal`);
}

function listJournals(dir: string): { seq: number; file: string }[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  return names
    .map((file) => ({ file, m: /^(\d+)\.wal$/.exec(file) }))
    .filter((e): e is { file: string; m: RegExpExecArray } => e.m !== null)
    .map((e) => ({ seq: Number(e.m[1]), file: e.file }))
    .sort((a, b) => a.seq - b.seq);
}

/** A frame's checksum: catches a torn or half-synced frame, not an adversary (zlib.crc32 is newer than some VS Code hosts' Node). */
function frameSum(data: Buffer): string {
  return createHash('sha1').update(data).digest('hex').slice(0, 16);
}

/** Withdraws the append at `offset` (its file write failed): a replay cuts the file back there. */
function journalCancelFrame(sessionId: string, offset: number): Buffer {
  return Buffer.from(`${JSON.stringify({ x: sessionId, o: offset })}\n`);
}

function journalFrameHead(sessionId: string, offset: number, data: Buffer): Buffer {
  return Buffer.from(`${JSON.stringify({ s: sessionId, o: offset, n: data.length, c: frameSum(data) })}\n`);
}

type JournalFrame = { s: string; o: number; data: Buffer } | { d: string } | { x: string; o: number };

/** The whole frames of one journal file, in order (stops at the first torn one). */
export function readJournalFrames(path: string): JournalFrame[] {
  const buf = readFileSync(path);
  const frames: JournalFrame[] = [];
  for (let pos = 0; pos < buf.length;) {
    const nl = buf.indexOf(0x0a, pos);
    if (nl < 0) break;
    let head: { s?: unknown; o?: unknown; n?: unknown; c?: unknown; d?: unknown; x?: unknown };
    try {
      head = JSON.parse(buf.subarray(pos, nl).toString('utf8')) as typeof head;
    } catch {
      break;
    }
    if (typeof head.d === 'string') {
      frames.push({ d: head.d });
      pos = nl + 1;
      continue;
    }
    if (typeof head.x === 'string' && typeof head.o === 'number') {
      frames.push({ x: head.x, o: head.o });
      pos = nl + 1;
      continue;
    }
    if (typeof head.s !== 'string' || typeof head.o !== 'number' || typeof head.n !== 'number' || typeof head.c !== 'string') break;
    const end = nl + 1 + head.n;
    if (end > buf.length) break;
    const data = buf.subarray(nl + 1, end);
    if (frameSum(data) !== head.c) break;
    frames.push({ s: head.s, o: head.o, data });
    pos = end;
  }
  return frames;
}

/**
 * Replays the journals left by a process that did not close its store (a crash, kill -9, power
 * loss), syncs what it repaired and removes them. Returns the next journal number. On a read-only
 * data dir nothing can be repaired: the journals stay for the next writable start.
 */
function recoverJournal(dataDir: string, warn: (message: string) => void): number {
  const dir = journalDirOf(dataDir);
  const journals = listJournals(dir);
  if (journals.length === 0) return 0;
  const next = journals[journals.length - 1]!.seq + 1;
  const touched = new Set<string>();
  let repaired = 0;
  try {
    for (const j of journals) {
      for (const frame of readJournalFrames(join(dir, j.file))) {
        if ('d' in frame) {
          if (!SESSION_ID_PATTERN.test(frame.d)) continue;
          const path = sessionFileOf(dataDir, frame.d);
          if (existsSync(path)) unlinkSync(path);
          touched.delete(path);
          continue;
        }
        if ('x' in frame) {
          if (!SESSION_ID_PATTERN.test(frame.x)) continue;
          const path = sessionFileOf(dataDir, frame.x);
          if (existsSync(path) && statSync(path).size > frame.o) truncateSync(path, frame.o);
          continue;
        }
        if (!SESSION_ID_PATTERN.test(frame.s)) continue;
        const path = sessionFileOf(dataDir, frame.s);
        if (replayFrame(path, frame.o, frame.data, warn)) repaired++;
        touched.add(path);
      }
    }
    for (const path of touched) {
      const fd = openSync(path, 'r');
      try {
        fdatasyncSync(fd);
      } finally {
        closeSync(fd);
      }
    }
    if (touched.size) {
      const fd = openSync(sessionsDirOf(dataDir), 'r');
      try {
        fsyncSync(fd);
      } catch {
        // directories cannot be synced everywhere
      } finally {
        closeSync(fd);
      }
    }
    for (const j of journals) unlinkSync(join(dir, j.file));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EROFS' || code === 'EACCES' || code === 'EPERM') {
      warn(`${dir}: the journal could not be replayed (${code}); it is kept for the next start on a writable data dir`);
      return next;
    }
    throw err;
  }
  if (repaired) warn(`${dir}: restored ${repaired} journaled append(s) a crash had kept from their session files`);
  return next;
}

/** Makes `path` hold `data` at `offset`; true when it had to be repaired. */
function replayFrame(path: string, offset: number, data: Buffer, warn: (message: string) => void): boolean {
  const fd = openSync(path, constants.O_RDWR | constants.O_CREAT, 0o666);
  try {
    const size = fstatSync(fd).size;
    if (size >= offset + data.length) {
      const have = Buffer.alloc(data.length);
      readSync(fd, have, 0, data.length, offset);
      if (have.equals(data)) return false;
    }
    if (size < offset) {
      warn(`${path}: the journal has an append at byte ${offset}, but the file has only ${size} bytes; the append was not replayed`);
      return false;
    }
    ftruncateSync(fd, offset);
    for (let done = 0; done < data.length;) done += writeSync(fd, data, done, data.length - done, offset + done);
    return true;
  } finally {
    closeSync(fd);
  }
}

function sessionsDirOf(dataDir: string): string {
  return join(dataDir, 'sessions');
}

/** Where the store keeps a session: `<dataDir>/sessions/<id>.jsonl`; ids outside SESSION_ID_PATTERN are refused. */
export function sessionFileOf(dataDir: string, sessionId: string): string {
  if (!SESSION_ID_PATTERN.test(sessionId)) throw new Error(`not a session id: ${JSON.stringify(sessionId.slice(0, 200))}`);
  return join(sessionsDirOf(dataDir), `${sessionId}.jsonl`);
}

/**
 * Every session stored under a data dir (none without a sessions directory); writes nothing.
 * `warn` hears of torn lines and headless files.
 */
export function loadStoredSessions(dataDir: string, warn: (message: string) => void = () => {}): LoadedSession[] {
  const dir = sessionsDirOf(dataDir);
  if (!existsSync(dir)) return [];
  const sessions: LoadedSession[] = [];
  for (const name of readdirSync(dir).sort()) {
    if (!name.endsWith('.jsonl')) continue;
    const path = join(dir, name);
    const loaded = loadSessionFile(path, warn);
    if (!loaded) {
      warn(`${path}: no readable session header line; the file was not restored`);
      continue;
    }
    if (loaded.skipped)
      warn(
        `${path}: skipped ${loaded.skipped} unreadable line(s) (line ${loaded.skippedLines.join(', ')}), a torn write from a crash or a full disk`,
      );
    sessions.push(loaded);
  }
  return sessions;
}

/** The file's size, and whether its last byte is something other than a newline (sync: two tiny syscalls, once per open). */
function fileState(fd: number): { size: number; torn: boolean } {
  const { size } = fstatSync(fd);
  if (size === 0) return { size, torn: false };
  const last = Buffer.alloc(1);
  readSync(fd, last, 0, 1, size - 1);
  return { size, torn: last[0] !== 0x0a };
}

export function loadSessionFile(path: string, warn?: (message: string) => void): LoadedSession | undefined {
  let info: SessionInfo | undefined;
  const calls: CallRecord[] = [];
  let budgetStops = 0;
  const skippedLines: number[] = [];
  const decoder = new SessionDecoder();
  for (const [n, text] of readFileSync(path, 'utf8').split('\n').entries()) {
    if (!text.trim()) continue;
    let line: StoreLine | { type: 'sum' };
    try {
      line = JSON.parse(text) as StoreLine;
    } catch {
      skippedLines.push(n + 1);
      continue;
    }
    if (line === null || typeof line !== 'object') {
      skippedLines.push(n + 1);
      continue;
    }
    if (line.type === 'session') {
      const { type: _type, ...rest } = line;
      info = rest;
    } else if (line.type === 'call') {
      try {
        calls.push(decoder.decode(line as unknown as Record<string, unknown>));
      } catch (err) {
        if (!(err instanceof CallDecodeError)) throw err;
        warn?.(`${path}: line ${n + 1}: ${err.message}; the call was not read`);
        skippedLines.push(n + 1);
      }
    } else if (line.type === 'budget_stop') budgetStops++;
  }
  return info ? { info, calls, budgetStops, skipped: skippedLines.length, skippedLines, file: path } : undefined;
}

/** The tally of a fully read session (for files without a `sum` line at their end). */
export function tallyOf(loaded: LoadedSession): SessionTally {
  let t = emptyTally();
  for (const call of loaded.calls) t = tallyLine(t, { type: 'call', ...call });
  t.bs = loaded.budgetStops;
  if (loaded.info.capture_level) t.lvl = loaded.info.capture_level;
  return t;
}

const INDEX_CHUNK = 64 * 1024;

/**
 * A stored session's header and tally, from the file's first line and its last `sum` line: two small
 * reads. A file whose last whole line is not a `sum` (written before tallies, or cut between a call
 * and its sum) is read in full instead. Undefined when there is no readable header.
 */
export function readSessionIndex(path: string, warn?: (message: string) => void): SessionIndexEntry | undefined {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  try {
    const size = fstatSync(fd).size;
    if (size === 0) return undefined;
    // Header: the first line, however long.
    let head = '';
    for (let pos = 0; pos < size;) {
      const chunk = Buffer.alloc(Math.min(INDEX_CHUNK, size - pos));
      const got = readSync(fd, chunk, 0, chunk.length, pos);
      if (got <= 0) break;
      pos += got;
      const text = chunk.subarray(0, got).toString('utf8');
      const nl = text.indexOf('\n');
      if (nl >= 0) {
        head += text.slice(0, nl);
        break;
      }
      head += text;
    }
    let header: StoreLine | undefined;
    try {
      header = JSON.parse(head) as StoreLine;
    } catch {
      header = undefined;
    }
    // Tail: the last whole line.
    const tailLen = Math.min(INDEX_CHUNK, size);
    const tail = Buffer.alloc(tailLen);
    readSync(fd, tail, 0, tailLen, size - tailLen);
    const torn = tail[tailLen - 1] !== 0x0a;
    const lines = tail.toString('utf8').split('\n');
    lines.pop(); // after the last newline: empty, or the torn part
    const last = lines.length > (tailLen < size ? 1 : 0) ? lines[lines.length - 1] : undefined;
    let sum: (SessionTally & { type: string }) | undefined;
    try {
      const parsed = last === undefined ? undefined : (JSON.parse(last) as SessionTally & { type: string });
      if (parsed && parsed.type === 'sum') sum = parsed;
    } catch {
      sum = undefined;
    }
    if (header?.type === 'session' && sum) {
      const { type: _t, ...tally } = sum;
      const { type: _h, ...info } = header;
      if (tally.lvl) info.capture_level = tally.lvl;
      return { info, tally, file: path, bytes: size, torn };
    }
  } finally {
    closeSync(fd);
  }
  const loaded = loadSessionFile(path, warn);
  if (!loaded) return undefined;
  return { info: loaded.info, tally: tallyOf(loaded), file: path, bytes: statSize(path), torn: loaded.skipped > 0 };
}

function statSize(path: string): number {
  const fd = openSync(path, 'r');
  try {
    return fstatSync(fd).size;
  } finally {
    closeSync(fd);
  }
}

/** The index of every session stored under a data dir (none without a sessions directory). */
export function readStoredIndex(
  dataDir: string,
  warn: (message: string) => void = () => {},
  skip?: (sessionId: string) => boolean,
): SessionIndexEntry[] {
  const dir = sessionsDirOf(dataDir);
  if (!existsSync(dir)) return [];
  const entries: SessionIndexEntry[] = [];
  for (const name of readdirSync(dir).sort()) {
    if (!name.endsWith('.jsonl')) continue;
    // A caller that already holds a session (by its file name) need not have its file read again.
    if (skip?.(name.slice(0, -'.jsonl'.length))) continue;
    const path = join(dir, name);
    const entry = readSessionIndex(path, warn);
    if (!entry) {
      warn(`${path}: no readable session header line; the file was not restored`);
      continue;
    }
    if (entry.torn) warn(`${path}: skipped 1 unreadable line (the last), a torn write from a crash or a full disk`);
    entries.push(entry);
  }
  return entries;
}
