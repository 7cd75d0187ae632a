// Durable capture store: one JSON-lines file per session under `<dataDir>/sessions/`. A call is
// appended and fsynced before its answer goes back to the harness, so a crash loses nothing that was
// answered. Concurrent appends to one file share a single durable write (group commit).
//
// Every step of an append is a trip through libuv's thread pool and back through the event loop,
// and under load each trip waits a whole (long) loop turn. So files stay open between appends, and
// where the platform has O_DSYNC the file is opened with it: each write then returns only once the
// data is on disk, as write + fdatasync did, in one trip instead of four (open, write, sync, close).
import { constants, existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { open, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import type { CallRecord, SessionInfo } from './types.js';

export type StoreLine =
  | ({ type: 'session' } & SessionInfo)
  | ({ type: 'call' } & CallRecord)
  | { type: 'budget_stop'; at: string };

export interface LoadedSession {
  info: SessionInfo;
  calls: CallRecord[];
  budgetStops: number;
  /** Lines that could not be parsed (a torn last line after a crash), with their file. */
  skipped: number;
}

interface PendingWrite {
  text: string;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/** O_DSYNC is missing on Windows; there the store writes, then calls fdatasync. */
const SYNC_APPEND_FLAGS = constants.O_DSYNC === undefined ? undefined : constants.O_WRONLY | constants.O_CREAT | constants.O_APPEND | constants.O_DSYNC;
/** Open files kept at most (least recently used closed first); enough for 1,000 live sessions. */
const MAX_OPEN_FILES = 1024;
/** A session file idle this long is closed. */
const IDLE_CLOSE_MS = 30_000;

interface OpenFile {
  handle: FileHandle;
  lastUsed: number;
}

export class CaptureStore {
  private readonly queues = new Map<string, PendingWrite[]>();
  private readonly flushing = new Set<string>();
  /** Open session files, least recently used first. */
  private readonly files = new Map<string, OpenFile>();
  private sweeper: NodeJS.Timeout | undefined;

  constructor(readonly dataDir: string) {
    mkdirSync(sessionsDirOf(dataDir), { recursive: true });
  }

  fileOf(sessionId: string): string {
    return sessionFileOf(this.dataDir, sessionId);
  }

  append(sessionId: string, line: StoreLine): Promise<void> {
    return new Promise((resolve, reject) => {
      let queue = this.queues.get(sessionId);
      if (!queue) this.queues.set(sessionId, (queue = []));
      queue.push({ text: `${JSON.stringify(line)}\n`, resolve, reject });
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
          const handle = await this.fileFor(sessionId);
          try {
            const data = Buffer.from(batch.map((w) => w.text).join(''), 'utf8');
            for (let offset = 0; offset < data.length; ) offset += (await handle.write(data, offset, data.length - offset)).bytesWritten;
            if (SYNC_APPEND_FLAGS === undefined) await handle.datasync();
          } catch (err) {
            // Reopen on the next append rather than keep a handle that failed.
            await this.closeFile(sessionId);
            throw err;
          }
          for (const w of batch) w.resolve();
        } catch (err) {
          for (const w of batch) w.reject(err);
        }
      }
    } finally {
      this.flushing.delete(sessionId);
      this.queues.delete(sessionId);
    }
  }

  private async fileFor(sessionId: string): Promise<FileHandle> {
    const known = this.files.get(sessionId);
    if (known) {
      // Re-insert: the map's order is the eviction order.
      this.files.delete(sessionId);
      known.lastUsed = Date.now();
      this.files.set(sessionId, known);
      return known.handle;
    }
    const handle = await open(this.fileOf(sessionId), SYNC_APPEND_FLAGS ?? 'a');
    this.files.set(sessionId, { handle, lastUsed: Date.now() });
    for (const id of this.files.keys()) {
      if (this.files.size <= MAX_OPEN_FILES) break;
      if (!this.flushing.has(id)) void this.closeFile(id);
    }
    this.sweeper ??= setInterval(() => this.closeIdle(), IDLE_CLOSE_MS / 2).unref();
    return handle;
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
    await file.handle.close().catch(() => {
      // the data was already synced; a failing close loses nothing
    });
  }

  async delete(sessionId: string): Promise<void> {
    // Let queued writes land first so a late append cannot recreate the file.
    while (this.flushing.has(sessionId)) await new Promise((r) => setTimeout(r, 5));
    await this.closeFile(sessionId);
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

  /** Everything on disk, for a restart on the same data dir. */
  loadAll(): LoadedSession[] {
    return loadStoredSessions(this.dataDir);
  }
}

function sessionsDirOf(dataDir: string): string {
  return join(dataDir, 'sessions');
}

/** Where the store keeps a session: `<dataDir>/sessions/<id>.jsonl`. */
export function sessionFileOf(dataDir: string, sessionId: string): string {
  return join(sessionsDirOf(dataDir), `${sessionId}.jsonl`);
}

/** Every session stored under a data dir (none when it has no sessions directory); writes nothing. */
export function loadStoredSessions(dataDir: string): LoadedSession[] {
  const dir = sessionsDirOf(dataDir);
  if (!existsSync(dir)) return [];
  const sessions: LoadedSession[] = [];
  for (const name of readdirSync(dir).sort()) {
    if (!name.endsWith('.jsonl')) continue;
    const loaded = loadSessionFile(join(dir, name));
    if (loaded) sessions.push(loaded);
  }
  return sessions;
}

export function loadSessionFile(path: string): LoadedSession | undefined {
  let info: SessionInfo | undefined;
  const calls: CallRecord[] = [];
  let budgetStops = 0;
  let skipped = 0;
  for (const text of readFileSync(path, 'utf8').split('\n')) {
    if (!text.trim()) continue;
    let line: StoreLine;
    try {
      line = JSON.parse(text) as StoreLine;
    } catch {
      skipped++;
      continue;
    }
    if (line.type === 'session') {
      const { type: _type, ...rest } = line;
      info = rest;
    } else if (line.type === 'call') {
      const { type: _type, ...rest } = line;
      calls.push(rest);
    } else if (line.type === 'budget_stop') budgetStops++;
  }
  return info ? { info, calls, budgetStops, skipped } : undefined;
}
