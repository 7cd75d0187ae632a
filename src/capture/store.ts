// Durable capture store: one JSON-lines file per session under `<dataDir>/sessions/`. A call is
// appended and fsynced before its answer goes back to the harness, so a crash loses nothing that was
// answered. Concurrent appends to one file share a single write + fdatasync (group commit).
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { open, unlink } from 'node:fs/promises';
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

export class CaptureStore {
  private readonly dir: string;
  private readonly queues = new Map<string, PendingWrite[]>();
  private readonly flushing = new Set<string>();

  constructor(readonly dataDir: string) {
    this.dir = join(dataDir, 'sessions');
    mkdirSync(this.dir, { recursive: true });
  }

  fileOf(sessionId: string): string {
    return join(this.dir, `${sessionId}.jsonl`);
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
          const handle = await open(this.fileOf(sessionId), 'a');
          try {
            await handle.write(batch.map((w) => w.text).join(''));
            await handle.datasync();
          } finally {
            await handle.close();
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

  async delete(sessionId: string): Promise<void> {
    // Let queued writes land first so a late append cannot recreate the file.
    while (this.flushing.has(sessionId)) await new Promise((r) => setTimeout(r, 5));
    await unlink(this.fileOf(sessionId)).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err;
    });
  }

  /** Everything on disk, for a restart on the same data dir. */
  loadAll(): LoadedSession[] {
    const sessions: LoadedSession[] = [];
    for (const name of readdirSync(this.dir).sort()) {
      if (!name.endsWith('.jsonl')) continue;
      const loaded = loadSessionFile(join(this.dir, name));
      if (loaded) sessions.push(loaded);
    }
    return sessions;
  }
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
