// Reading the capture store back without writing: a whole session (its calls decoded against the
// ones they were written against, call-codec.ts), or only what a restart needs to list it (the first
// line and the last `sum` line of its file). A torn last line (a crash or a full disk mid-write) is
// skipped with a warning naming the file.
import { closeSync, existsSync, fstatSync, openSync, readdirSync, readFileSync, readSync } from 'node:fs';
import { join } from 'node:path';
import { CallDecodeError, SessionDecoder } from './call-codec.js';
import type { CallRecord, SessionInfo } from './types.js';
import {
  emptyTally,
  sessionsDirOf,
  tallyLine,
  type LoadedSession,
  type SessionIndexEntry,
  type SessionTally,
  type StoreLine,
} from './store-format.js';

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
