// The one reader of rollout files, for exports, the audit, the viewer, the report and the rollout
// server: a captured session (the store's `<data-dir>/sessions/<id>.jsonl`), a rollout document
// (`*.rollout.json`, as served by `GET /sessions/{id}/rollout`) or TrainingTrace lines (`*.jsonl`, as
// written by `harness-lab export`). What a file holds is decided in one place, rolloutFileKind, by
// its first line, never by its name. All three are external input, parsed with zod here.
import { closeSync, existsSync, openSync, readFileSync, readSync } from 'node:fs';
import { basename } from 'node:path';
import { z } from 'zod';
import { TrainingTraceSchema, type TrainingTrace } from './trace.js';
import { buildRollout, type RolloutDocument } from './rollout.js';
import { CaptureSession, type RolloutReadOptions } from './sessions.js';
import { loadSessionFile, type LoadedSession } from './store.js';
import type { CallRecord, SessionInfo } from './types.js';

const Ids = z.array(z.int().nonnegative());
const Str = z.string();

export const CallRecordSchema = z.looseObject({
  call_id: Str.min(1),
  session_id: Str,
  index: z.int().nonnegative(),
  dialect: Str,
  path: Str,
  started_at: Str,
  latency_ms: z.number(),
  request: z.looseObject({ body: z.unknown() }),
  engine_request: z.looseObject({ messages: z.array(z.looseObject({ role: Str })) }).nullable(),
  engine_response: z.looseObject({ choices: z.array(z.looseObject({ message: z.looseObject({ role: Str }) })) }).nullable(),
  response_body: z.unknown(),
  model: Str.nullable(),
  finish_reason: Str.nullable(),
  prompt_token_ids: Ids.nullable(),
  completion_token_ids: Ids.nullable(),
  logprobs: z.array(z.number()).nullable(),
  top_logprobs: z.array(z.array(z.looseObject({ token_id: z.int().nullable(), token: Str, logprob: z.number() }))).nullable(),
  token_bytes: z.array(z.array(z.int().min(0).max(255)).nullable()).nullable(),
  findings: z.array(Str),
});

const GraphNodeSchema = z.looseObject({
  node_id: Str,
  index: z.int(),
  parent_id: Str.nullable(),
  root_id: Str,
  children: z.array(Str),
  discarded: z.boolean(),
  role: z.enum(['agent', 'auxiliary', 'discarded']),
});

export const RolloutFileSchema = z.looseObject({
  session_id: Str.min(1),
  metadata: z.record(Str, z.unknown()),
  capture_level: z.enum(['tokens', 'logprobs', 'text']),
  rollout_type: z.enum(['train', 'eval']),
  budget_stop_count: z.int().nonnegative(),
  calls: z.array(CallRecordSchema),
  graph: z.looseObject({
    nodes: z.array(GraphNodeSchema),
    roots: z.array(Str),
    leaves: z.array(Str),
    forks: z.array(z.looseObject({ parent_id: Str, children: z.array(Str) })),
  }),
  turns: z.array(
    z.looseObject({
      node_id: Str,
      index: z.int(),
      parent_id: Str.nullable(),
      root_id: Str,
      n_sampled: z.int(),
      n_prompt: z.int(),
      n_tools: z.int(),
      finish_reason: Str.nullable(),
      sampled_logprobs: z.array(z.number()).nullable(),
      discarded: z.boolean(),
      findings: z.array(Str),
    }),
  ),
  stats: z.looseObject({ n_calls: z.int(), n_discarded: z.int() }),
  sequences: z.array(
    z.looseObject({
      role: z.enum(['agent', 'auxiliary', 'discarded']),
      node_ids: z.array(Str),
      trainable: z.boolean(),
      prompt_len: z.int(),
    }),
  ),
  validation: z.array(Str),
});

export class RolloutFileError extends Error {
  /** `detail`: what is wrong, without the file's name (for a caller that names the file its own way). */
  constructor(
    message: string,
    readonly detail: string = message,
  ) {
    super(message);
    this.name = 'RolloutFileError';
  }
}

function issuesText(err: z.ZodError): string {
  return err.issues
    .slice(0, 5)
    .map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`)
    .join('; ');
}

/** Parse a `*.rollout.json` document; errors name the file and the offending paths. */
export function parseRolloutDocument(text: string, source: string): RolloutDocument {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    const why = `not JSON (${err instanceof Error ? err.message : String(err)})`;
    throw new RolloutFileError(`${source}: ${why}`, why);
  }
  const res = RolloutFileSchema.safeParse(value);
  if (!res.success) {
    const why = `not a Harness Lab rollout document: ${issuesText(res.error)}`;
    throw new RolloutFileError(`${source} is ${why}`, why);
  }
  const turnIds = new Set(res.data.turns.map((t) => t.node_id));
  const callIds = new Set(res.data.calls.map((c) => c.call_id));
  for (const id of turnIds)
    if (!callIds.has(id)) throw new RolloutFileError(`${source}: turn ${id} has no call record`, `turn ${id} has no call record`);
  return res.data as unknown as RolloutDocument;
}

/** Parse TrainingTrace JSONL; blank lines are skipped, a bad line is named by number. */
export function parseTraceLines(text: string, source: string): TrainingTrace[] {
  const out: TrainingTrace[] = [];
  text.split('\n').forEach((line, i) => {
    if (!line.trim()) return;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (err) {
      throw new RolloutFileError(`${source}:${i + 1}: not JSON (${err instanceof Error ? err.message : String(err)})`);
    }
    const res = TrainingTraceSchema.safeParse(value);
    if (!res.success) throw new RolloutFileError(`${source}:${i + 1}: not a TrainingTrace line: ${issuesText(res.error)}`);
    out.push(res.data);
  });
  if (out.length === 0) throw new RolloutFileError(`${source}: no TrainingTrace lines`);
  return out;
}

/** What a rollout file holds. */
export type RolloutFileKind = 'session' | 'document' | 'traces';

const STORE_LINE_TYPES = new Set(['session', 'call', 'budget_stop', 'sum']);

/**
 * What a rollout file holds, from its text (or just its first line): a line of the capture store
 * (`{"type":"session"|"call"|...}`) is a session; a first line that is not JSON on its own (a
 * pretty-printed document) or a one-line object with `calls` and `graph` is a rollout document;
 * any other JSON line is read as TrainingTrace lines (and refused line by line if it is not one).
 */
export function rolloutFileKind(text: string): RolloutFileKind {
  const line = text.split('\n').find((l) => l.trim()) ?? '';
  let head: unknown;
  try {
    head = JSON.parse(line);
  } catch {
    return 'document';
  }
  if (!head || typeof head !== 'object' || Array.isArray(head)) return 'document';
  const type = (head as { type?: unknown }).type;
  if (typeof type === 'string' && STORE_LINE_TYPES.has(type)) return 'session';
  return 'calls' in head && 'graph' in head ? 'document' : 'traces';
}

/** The first non-blank line of a file, read in chunks (a session file can be large; its header is not). */
function firstLineOf(file: string): string {
  const fd = openSync(file, 'r');
  try {
    const chunk = Buffer.alloc(64 * 1024);
    let text = '';
    for (let pos = 0; ;) {
      const n = readSync(fd, chunk, 0, chunk.length, pos);
      if (n === 0) return text;
      pos += n;
      text += chunk.toString('utf8', 0, n);
      const line = text.split('\n').find((l, i, all) => l.trim() && i < all.length - 1);
      if (line !== undefined) return line;
    }
  } finally {
    closeSync(fd);
  }
}

/** A session or rollout document read from disk: its header, every stored call and its rollout document. */
export interface StoredRollout {
  file: string;
  kind: 'session' | 'document';
  info: SessionInfo;
  /** Every stored call in arrival order (doc.calls). */
  calls: readonly CallRecord[];
  doc: RolloutDocument;
}

/** The rollout document of a stored session, with its budget stops, capture level and graph (CaptureSession's own reading). */
export function rolloutOfSession(loaded: LoadedSession, opts: RolloutReadOptions = {}): RolloutDocument {
  return CaptureSession.fromStore(loaded).rollout(opts);
}

/** The session header a rollout document stands for (a document does not keep the header's engine and budget). */
function sessionInfoOfDocument(doc: RolloutDocument): SessionInfo {
  const first = doc.calls[0];
  return {
    session_id: doc.session_id,
    created_at: first?.started_at ?? '',
    model: first?.model ?? '',
    engine_url: first?.engine_url ?? '',
    max_model_calls: 0,
    metadata: doc.metadata,
    capture_level: doc.capture_level,
  };
}

/**
 * A captured session file or a rollout document, read one file at a time (memory follows the file,
 * not the batch). A document's calls are rebuilt into a rollout by the same code as a session's.
 * Throws RolloutFileError naming the file for a missing file, TrainingTrace lines (which do not keep
 * every call), a session file without a header, a malformed call or document.
 */
export function readRolloutFile(file: string, opts: RolloutReadOptions & { checkCalls?: boolean } = {}): StoredRollout {
  const { checkCalls, ...read } = opts;
  const name = basename(file);
  if (!existsSync(file)) throw new RolloutFileError(`${file}: no such file`, 'no such file');
  const kind = rolloutFileKind(firstLineOf(file));
  if (kind === 'traces') {
    const why = 'holds TrainingTrace lines, which do not keep every captured call; read the session file or the rollout document instead';
    throw new RolloutFileError(`${name} ${why}`, why);
  }
  if (kind === 'document') {
    const parsed = parseRolloutDocument(readFileSync(file, 'utf8'), name);
    const info = sessionInfoOfDocument(parsed);
    const doc = buildRollout(info, parsed.calls, {
      ...read,
      budgetStopCount: parsed.budget_stop_count,
      captureLevel: parsed.capture_level,
    });
    return { file, kind, info, calls: doc.calls, doc };
  }
  const loaded = loadSessionFile(file);
  const noHeader = 'no session header line; the file is not a Harness Lab capture';
  if (!loaded) throw new RolloutFileError(`${name}: ${noHeader}`, noHeader);
  // The viewer checks every call's shape; exports check what they rely on (src/export/contract.ts) and name the call.
  if (checkCalls)
    loaded.calls.forEach((c, i) => {
      const res = CallRecordSchema.safeParse(c);
      if (!res.success) {
        const why = `call ${i} is malformed: ${res.error.issues[0]?.path.join('.')}: ${res.error.issues[0]?.message}`;
        throw new RolloutFileError(`${name}: ${why}`, why);
      }
    });
  const doc = rolloutOfSession(loaded, read);
  return { file, kind, info: loaded.info, calls: doc.calls, doc };
}

export type { CallRecord };
