// The durable capture store, by part (this file only gathers them, so a caller imports one place):
// - store-format.ts: the vocabulary. A session id (SESSION_ID_PATTERN, the only thing that names a
//   file), a session file `<dataDir>/sessions/<id>.jsonl` (sessionFileOf), its lines (StoreLine: a
//   `session` header, `call` records written against earlier calls by call-codec.ts, `budget_stop`,
//   and after every write a `sum` line, the session's running SessionTally), and StoreWriteError
//   (507 for a full disk, 503 for every other storage failure).
// - store-writer.ts: CaptureStore, the one writer. A call is durable before its answer goes back:
//   group commits, per commit lane, write each session's bytes to its file and all of them, framed,
//   to the lane's journal in one O_DSYNC write.
// - store-journal.ts: the journal `<dataDir>/journal/<seq>.wal` (frames, reading them back) and the
//   replay a store runs at start after a crash.
// - store-read.ts: readers that write nothing: whole sessions (loadSessionFile, loadStoredSessions)
//   and the index a restart lists sessions from (readSessionIndex, readStoredIndex).
export {
  SESSION_ID_PATTERN,
  StoreWriteError,
  emptyTally,
  sessionFileOf,
  tallyLine,
  type LoadedSession,
  type SessionIndexEntry,
  type SessionTally,
  type StoreLine,
} from './store-format.js';
export { CaptureStore } from './store-writer.js';
export { readJournalFrames } from './store-journal.js';
export { loadSessionFile, loadStoredSessions, readSessionIndex, readStoredIndex, tallyOf } from './store-read.js';
