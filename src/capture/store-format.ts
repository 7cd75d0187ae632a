// The capture store's shared vocabulary: what a session id may be, where a session's file is, the
// lines a session file holds (`session`, `call`, `budget_stop`, and the `sum` tally after every write)
// and the error an append that did not reach the disk is refused with. The writer (store-writer.ts),
// the journal (store-journal.ts) and the readers (store-read.ts) all build on this file; it imports
// none of them.
import { join } from 'node:path';
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

/** `<dataDir>/sessions/`: one `<id>.jsonl` per session. */
export function sessionsDirOf(dataDir: string): string {
  return join(dataDir, 'sessions');
}

/** Where the store keeps a session: `<dataDir>/sessions/<id>.jsonl`; ids outside SESSION_ID_PATTERN are refused. */
export function sessionFileOf(dataDir: string, sessionId: string): string {
  if (!SESSION_ID_PATTERN.test(sessionId)) throw new Error(`not a session id: ${JSON.stringify(sessionId.slice(0, 200))}`);
  return join(sessionsDirOf(dataDir), `${sessionId}.jsonl`);
}
