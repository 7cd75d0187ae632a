// Durable capture store: one JSON-lines file per session under `<dataDir>/sessions/`. A call is
// appended and fsynced before its answer goes back to the harness, so a crash loses nothing that was
// answered. Concurrent appends to one file share a single durable write (group commit).
//
// Every step of an append is a trip through libuv's thread pool and back through the event loop,
// and under load each trip waits a whole (long) loop turn. So files stay open between appends, and
// where the platform has O_DSYNC the file is opened with it: each write then returns only once the
// data is on disk, as write + fdatasync did, in one trip instead of four (open, write, sync, close).
//
// Calls are written against an earlier call of their session (call-codec.ts), so a session's bytes
// grow with its work, not with the square of its turns. Every write ends with a `sum` line, the
// session's running tally, so a restart reads a file's first line and its tail, not every call.
//
// A crash (or a full disk) can leave a torn last line. Loading skips it with a warning naming the
// file, and the first append to a file whose last byte is not a newline starts with one, so the torn
// bytes never swallow the next, whole record.
import { closeSync, constants, existsSync, fstatSync, mkdirSync, openSync, readdirSync, readFileSync, readSync } from 'node:fs';
import { open, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { CallDecodeError, SessionDecoder, SessionEncoder, type EncodedCall } from './call-codec.js';
import type { CallRecord, CaptureLevel, SessionInfo } from './types.js';

/** What a session id may be; the store names files after ids, so nothing else ever names a file. */
export const SESSION_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

export type StoreLine =
  | ({ type: 'session' } & SessionInfo)
  | ({ type: 'call' } & CallRecord)
  | { type: 'budget_stop'; at: string };

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
    const why = code === 'ENOSPC' || code === 'EDQUOT' ? 'the disk is full' : code === 'EROFS' ? 'the file system is read-only' : 'the write failed';
    super(`the capture store could not record this call (${why}: ${cause instanceof Error ? cause.message : String(cause)}); nothing was stored`);
    this.name = 'StoreWriteError';
    this.status = code === 'ENOSPC' || code === 'EDQUOT' ? 507 : 503;
    this.code = code;
  }
}

interface PendingWrite {
  text: string;
  line: StoreLine;
  /** For a call line: what the session's encoder remembers once it is on disk. */
  encoded?: EncodedCall;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/** O_DSYNC is missing on Windows; there the store writes, then calls fdatasync. */
const SYNC_APPEND_FLAGS = constants.O_DSYNC === undefined ? undefined : constants.O_RDWR | constants.O_CREAT | constants.O_APPEND | constants.O_DSYNC;
/** Open files kept at most (least recently used closed first); enough for 1,000 live sessions. */
const MAX_OPEN_FILES = 1024;
/** A session file idle this long is closed. */
const IDLE_CLOSE_MS = 30_000;

interface OpenFile {
  handle: FileHandle;
  lastUsed: number;
  /** The file ended without a newline when opened (a torn line): the next write starts with one. */
  needsNewline: boolean;
}

export class CaptureStore {
  private readonly dir: string;
  private readonly queues = new Map<string, PendingWrite[]>();
  private readonly flushing = new Set<string>();
  /** Open session files, least recently used first. */
  private readonly files = new Map<string, OpenFile>();
  /** Per session: the recent stored calls new calls are written against (dropped with the open file). */
  private readonly encoders = new Map<string, SessionEncoder>();
  /** Per session: the running tally, as the last `sum` line on disk says. */
  private readonly tallies = new Map<string, SessionTally>();
  private sweeper: NodeJS.Timeout | undefined;

  constructor(readonly dataDir: string) {
    this.dir = sessionsDirOf(dataDir);
    mkdirSync(this.dir, { recursive: true });
  }

  /** The session's file; ids outside SESSION_ID_PATTERN are refused (they could name a path elsewhere). */
  fileOf(sessionId: string): string {
    return sessionFileOf(this.dataDir, sessionId);
  }

  append(sessionId: string, line: StoreLine): Promise<void> {
    return new Promise((resolve, reject) => {
      let queue = this.queues.get(sessionId);
      if (!queue) this.queues.set(sessionId, (queue = []));
      if (line.type === 'call') {
        let encoder = this.encoders.get(sessionId);
        if (!encoder) this.encoders.set(sessionId, (encoder = new SessionEncoder()));
        const encoded = encoder.encode(line as unknown as CallRecord);
        queue.push({ text: encoded.text, line, encoded, resolve, reject });
      } else queue.push({ text: `${JSON.stringify(line)}\n`, line, resolve, reject });
      if (!this.flushing.has(sessionId)) void this.flush(sessionId);
    });
  }

  private async flush(sessionId: string): Promise<void> {
    this.flushing.add(sessionId);
    try {
      for (;;) {
        const batch = this.queues.get(sessionId);
        if (!batch || batch.length === 0) break;
        this.queues.set(sessionId, []);
        try {
          const file = await this.fileFor(sessionId);
          const handle = file.handle;
          // Where this batch starts, to cut a failed one back (a sync fstat: microseconds, no thread-pool trip).
          let sizeBefore: number | undefined;
          try {
            sizeBefore = fstatSync(handle.fd).size;
            let tally = this.tallies.get(sessionId) ?? emptyTally();
            for (const w of batch) tally = tallyLine(tally, w.line);
            const data = Buffer.from(`${file.needsNewline ? '\n' : ''}${batch.map((w) => w.text).join('')}${JSON.stringify({ type: 'sum', ...tally })}\n`, 'utf8');
            for (let offset = 0; offset < data.length; ) offset += (await handle.write(data, offset, data.length - offset)).bytesWritten;
            if (SYNC_APPEND_FLAGS === undefined) await handle.datasync();
            file.needsNewline = false;
            this.tallies.set(sessionId, tally);
            const encoder = this.encoders.get(sessionId);
            if (encoder) for (const w of batch) if (w.encoded) encoder.remember(w.encoded.base);
          } catch (err) {
            // A short write before ENOSPC leaves part of the batch: cut the file back, so no caller
            // that gets an error has its record on disk and no torn line is left. If even that
            // fails, reopening (on the next append) notices the torn line and starts a fresh one.
            if (sizeBefore !== undefined) await handle.truncate(sizeBefore).catch(() => {});
            await this.closeFile(sessionId);
            throw err;
          }
          for (const w of batch) w.resolve();
        } catch (err) {
          const failure = err instanceof StoreWriteError ? err : new StoreWriteError(this.safeFileOf(sessionId), err);
          for (const w of batch) w.reject(failure);
        }
      }
    } finally {
      this.flushing.delete(sessionId);
      this.queues.delete(sessionId);
    }
  }

  private safeFileOf(sessionId: string): string {
    try {
      return this.fileOf(sessionId);
    } catch {
      return this.dir;
    }
  }

  private async fileFor(sessionId: string): Promise<OpenFile> {
    const known = this.files.get(sessionId);
    if (known) {
      // Re-insert: the map's order is the eviction order.
      this.files.delete(sessionId);
      known.lastUsed = Date.now();
      this.files.set(sessionId, known);
      return known;
    }
    const handle = await open(this.fileOf(sessionId), SYNC_APPEND_FLAGS ?? 'a+');
    let state: { size: number; torn: boolean };
    try {
      state = fileState(handle.fd);
    } catch (err) {
      await handle.close().catch(() => {});
      throw err;
    }
    if (!this.tallies.has(sessionId)) this.tallies.set(sessionId, state.size === 0 ? emptyTally() : (readSessionIndex(this.fileOf(sessionId))?.tally ?? emptyTally()));
    const file: OpenFile = { handle, lastUsed: Date.now(), needsNewline: state.torn };
    this.files.set(sessionId, file);
    for (const id of this.files.keys()) {
      if (this.files.size <= MAX_OPEN_FILES) break;
      if (!this.flushing.has(id)) void this.closeFile(id);
    }
    this.sweeper ??= setInterval(() => this.closeIdle(), IDLE_CLOSE_MS / 2).unref();
    return file;
  }

  private closeIdle(): void {
    const cutoff = Date.now() - IDLE_CLOSE_MS;
    for (const [id, file] of this.files) if (file.lastUsed < cutoff && !this.flushing.has(id)) void this.closeFile(id);
    if (this.files.size === 0) {
      clearInterval(this.sweeper);
      this.sweeper = undefined;
    }
  }

  private async closeFile(sessionId: string): Promise<void> {
    const file = this.files.get(sessionId);
    if (!file) return;
    this.files.delete(sessionId);
    // An idle session leaves memory: its next call is written in full and starts a new chain, and its
    // tally is read back from the file's last `sum` line when the file opens again.
    this.encoders.delete(sessionId);
    this.tallies.delete(sessionId);
    await file.handle.close().catch(() => {
      // the data was already synced; a failing close loses nothing
    });
  }

  async delete(sessionId: string): Promise<void> {
    if (!SESSION_ID_PATTERN.test(sessionId)) return; // no such file can exist
    // Let queued writes land first so a late append cannot recreate the file.
    while (this.flushing.has(sessionId)) await new Promise((r) => setTimeout(r, 5));
    await this.closeFile(sessionId);
    this.tallies.delete(sessionId);
    await unlink(this.fileOf(sessionId)).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err;
    });
  }

  /** Waits for queued appends, then closes every open file. Appends after this reopen their file. */
  async close(): Promise<void> {
    while (this.flushing.size) await new Promise((r) => setTimeout(r, 5));
    clearInterval(this.sweeper);
    this.sweeper = undefined;
    await Promise.all([...this.files.keys()].map((id) => this.closeFile(id)));
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
    if (loaded.skipped) warn(`${path}: skipped ${loaded.skipped} unreadable line(s) (line ${loaded.skippedLines.join(', ')}), a torn write from a crash or a full disk`);
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
    for (let pos = 0; pos < size; ) {
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
export function readStoredIndex(dataDir: string, warn: (message: string) => void = () => {}): SessionIndexEntry[] {
  const dir = sessionsDirOf(dataDir);
  if (!existsSync(dir)) return [];
  const entries: SessionIndexEntry[] = [];
  for (const name of readdirSync(dir).sort()) {
    if (!name.endsWith('.jsonl')) continue;
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
