// The capture store's journal on disk, and the replay after a crash.
//
// `<dataDir>/journal/<seq>.wal`: frames of a JSON head line, then (for an append) the exact bytes
// appended to a session file: {"s": session id, "o": offset in its file, "n": bytes, "c": checksum}.
// A deletion is a head line {"d": session id} alone; {"x": session id, "o": offset} withdraws an
// append whose file write failed. A restart replays every journal in order: a session file shorter than a frame's end, or holding other bytes there, is cut to the frame's
// offset and given its bytes; then the files are synced and the journals removed. A frame that is
// incomplete or fails its checksum (a torn write) ends its journal: it was never acknowledged.
//
// The writer (store-writer.ts) appends frames in group commits, one journal file per commit lane, and
// checkpoints a journal away once the session files it covers are synced; this file holds the frame
// format, reading frames back, and the replay a store runs when it opens a data dir.
import { closeSync, constants, existsSync, fdatasyncSync, fstatSync, fsyncSync, ftruncateSync, openSync } from 'node:fs';
import { readdirSync, readFileSync, readSync, statSync, truncateSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import { SESSION_ID_PATTERN, sessionFileOf, sessionsDirOf } from './store-format.js';

export function journalDirOf(dataDir: string): string {
  return join(dataDir, 'journal');
}

export function journalFileOf(dataDir: string, seq: number): string {
  return join(journalDirOf(dataDir), `${String(seq).padStart(8, '0')}.wal`);
}

export function listJournals(dir: string): { seq: number; file: string }[] {
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
export function journalCancelFrame(sessionId: string, offset: number): Buffer {
  return Buffer.from(`${JSON.stringify({ x: sessionId, o: offset })}\n`);
}

/** Records a session's deletion: a replay removes the file instead of bringing it back. */
export function journalDeleteFrame(sessionId: string): Buffer {
  return Buffer.from(`${JSON.stringify({ d: sessionId })}\n`);
}

export function journalFrameHead(sessionId: string, offset: number, data: Buffer): Buffer {
  return Buffer.from(`${JSON.stringify({ s: sessionId, o: offset, n: data.length, c: frameSum(data) })}\n`);
}

export type JournalFrame = { s: string; o: number; data: Buffer } | { d: string } | { x: string; o: number };

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
export function recoverJournal(dataDir: string, warn: (message: string) => void): number {
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
