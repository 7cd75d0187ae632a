// Rollout files opened in the viewer: a rollout document (`*.rollout.json`, as served by
// `GET /sessions/{id}/rollout`) or TrainingTrace lines (`*.jsonl`, as written by `harness-lab export`).
// Both are external input, parsed with zod here and turned into ViewerData.
import { z } from 'zod';
import { TrainingTraceSchema, type TrainingTrace } from './trace.js';
import type { RolloutDocument, RolloutGraphJson } from './rollout.js';
import type { CallRecord } from './types.js';
import { VIEWER_DATA_VERSION, viewerDataFromRollout, type ViewerData, type ViewerTurn } from '../protocol/viewer-data.js';

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
  graph: z.looseObject({ nodes: z.array(GraphNodeSchema), roots: z.array(Str), leaves: z.array(Str), forks: z.array(z.looseObject({ parent_id: Str, children: z.array(Str) })) }),
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
  sequences: z.array(z.looseObject({ role: z.enum(['agent', 'auxiliary', 'discarded']), node_ids: z.array(Str), trainable: z.boolean(), prompt_len: z.int() })),
  validation: z.array(Str),
});

export class RolloutFileError extends Error {
  constructor(message: string) {
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
    throw new RolloutFileError(`${source}: not JSON (${err instanceof Error ? err.message : String(err)})`);
  }
  const res = RolloutFileSchema.safeParse(value);
  if (!res.success) throw new RolloutFileError(`${source} is not a Harness Lab rollout document: ${issuesText(res.error)}`);
  const turnIds = new Set(res.data.turns.map((t) => t.node_id));
  const callIds = new Set(res.data.calls.map((c) => c.call_id));
  for (const id of turnIds) if (!callIds.has(id)) throw new RolloutFileError(`${source}: turn ${id} has no call record`);
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

const ROLE_RANK = { agent: 2, auxiliary: 1, discarded: 0 } as const;

/** TrainingTrace lines -> ViewerData: the traces' paths merged by node id into one graph. */
export function viewerDataFromTraces(traces: readonly TrainingTrace[], opts: { key: string; title: string }): ViewerData {
  const turns = new Map<string, ViewerTurn>();
  const parentOf = new Map<string, string | null>();
  for (const tr of traces) {
    tr.turns.forEach((t, k) => {
      parentOf.set(t.node_id, k === 0 ? null : tr.node_ids[k - 1]!);
      const p = t.prompt_token_ids.length;
      const trained = tr.trainable && t.completion_token_ids.length > 0 && t.loss_mask.slice(p).every((m) => m === 1);
      const had = turns.get(t.node_id);
      if (had) {
        if (ROLE_RANK[tr.role] > ROLE_RANK[had.role]) had.role = tr.role;
        had.trained ||= trained;
        return;
      }
      const hasLogprobs = t.loss_mask.slice(p).some((m) => m === 1);
      turns.set(t.node_id, {
        node_id: t.node_id,
        index: t.metadata.index,
        parent_id: null,
        root_id: tr.root_id,
        children: [],
        discarded: tr.role === 'discarded',
        role: tr.role,
        prompt_ids: t.prompt_token_ids,
        sampled_ids: t.completion_token_ids,
        logprobs: hasLogprobs ? t.per_token_logps : null,
        trained,
        top: null,
        sampled_text: null,
        flags: hasLogprobs || t.completion_token_ids.length === 0 ? [] : ['masked in the trace (mask 0): no usable behaviour logprobs were captured for this turn'],
        findings: [],
        finish_reason: t.response.choices[0]?.finish_reason ?? null,
        n_tools: t.metadata.n_tools,
        model: t.metadata.model,
        latency_ms: null,
        started_at: null,
        request_messages: t.request.messages,
        response_message: t.response.choices[0]?.message ?? null,
        raw: null,
      });
    });
  }
  const list = [...turns.values()].sort((a, b) => a.index - b.index || (a.node_id < b.node_id ? -1 : 1));
  for (const t of list) {
    t.parent_id = parentOf.get(t.node_id) ?? null;
    if (t.parent_id) turns.get(t.parent_id)?.children.push(t.node_id);
  }
  const graph: RolloutGraphJson = {
    nodes: list.map((t) => ({ node_id: t.node_id, index: t.index, parent_id: t.parent_id, root_id: t.root_id, children: t.children, discarded: t.discarded, role: t.role })),
    roots: list.filter((t) => t.parent_id === null).map((t) => t.node_id),
    leaves: list.filter((t) => t.children.length === 0).map((t) => t.node_id),
    forks: list.filter((t) => t.children.length > 1).map((t) => ({ parent_id: t.node_id, children: t.children })),
  };
  const first = traces[0]!;
  return {
    version: VIEWER_DATA_VERSION,
    key: opts.key,
    title: opts.title,
    source: 'trace',
    session_id: first.session_id,
    capture_level: 'tokens',
    rollout_type: 'train',
    metadata: {},
    stats: null,
    validation: [...new Set(traces.flatMap((t) => t.validation))],
    graph,
    turns: list,
    token_texts: {},
    atif: null,
  };
}

/** A rollout or trace file's text -> ViewerData, by file name (`.jsonl` is traces, anything else a document). */
export function viewerDataFromFile(text: string, fileName: string): { data: ViewerData; doc: RolloutDocument | null } {
  const base = fileName.split(/[\\/]/).pop() ?? fileName;
  if (/\.jsonl$/i.test(base)) {
    return { data: viewerDataFromTraces(parseTraceLines(text, base), { key: fileName, title: base }), doc: null };
  }
  const doc = parseRolloutDocument(text, base);
  return { data: viewerDataFromRollout(doc, { key: fileName, title: base }), doc };
}

export type { CallRecord };
