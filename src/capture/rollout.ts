// The rollout document (`GET /sessions/{id}/rollout`, protocol 11.3) and the training-trace gate.
// Built on demand from the session's records, never on the request path of a model call.
import { checkRollout, isFatal } from './findings.js';
import { RolloutGraph, byArrival } from './graph.js';
import { buildSequences, type PathRole, type TrainingSequence } from './sequences.js';
import { toTrainingTrace, type TrainingTrace, type TrainingTurn } from './trace.js';
import type { CallRecord, CaptureLevel, ChatMessage, ChatTool, JsonObject, SessionInfo } from './types.js';

export { TrainingTraceSchema, TrainingTurnSchema, traceToJsonl, type TrainingTrace, type TrainingTurn } from './trace.js';
export type { TrainingSequence, PathRole } from './sequences.js';

export type RolloutType = 'train' | 'eval';
export type SessionPurpose = 'auto' | 'eval' | 'train';

export interface RolloutOptions {
  /** Calls answered with the budget stop (they are not recorded); explains a one-call rollout. */
  budgetStopCount: number;
  captureLevel: CaptureLevel;
  /** `eval` makes even a `tokens` session evaluation-only. Default: the session's own `purpose`, else `auto`. */
  purpose?: SessionPurpose;
  /** Keep sequences (and traces) of discarded paths, labelled `discarded`. Default false. */
  includeDiscarded?: boolean;
  /** Add request messages, tools and response message to each entry of `turns`. Default false. */
  includeMessages?: boolean;
  /**
   * Build `traces` (default true). They cost memory and time in the sum of all prompt lengths (each
   * turn carries its full prompt and mask); pass false when only the graph and sequences are needed.
   */
  includeTraces?: boolean;
  /** Session-level findings (e.g. "[WARN] sampling_neutralised: ..."), appended to `validation`. */
  sessionFindings?: readonly string[];
  /** A live graph already fed with these records (same capture level), to skip relinking. */
  graph?: RolloutGraph;
}

export interface RolloutTurn {
  node_id: string;
  index: number;
  parent_id: string | null;
  root_id: string;
  n_sampled: number;
  n_prompt: number;
  n_tools: number;
  finish_reason: string | null;
  harness_session_id: string | null;
  sampling_params: JsonObject;
  requested_sampling_params: JsonObject;
  /** Null when the turn has no usable behaviour logprobs (it is context only). */
  sampled_logprobs: readonly number[] | null;
  discarded: boolean;
  findings: readonly string[];
  request_messages?: readonly ChatMessage[];
  request_tools?: readonly ChatTool[] | null;
  response_message?: ChatMessage | null;
}

export interface RolloutGraphNodeJson {
  node_id: string;
  index: number;
  parent_id: string | null;
  root_id: string;
  children: string[];
  discarded: boolean;
  /** The best role of any path through the node: agent, else auxiliary, else discarded. */
  role: PathRole;
}

export interface RolloutGraphJson {
  nodes: RolloutGraphNodeJson[];
  roots: string[];
  leaves: string[];
  forks: { parent_id: string; children: string[] }[];
}

export interface RolloutStats {
  n_calls: number;
  n_turns: number;
  n_roots: number;
  n_leaves: number;
  n_forks: number;
  n_discarded: number;
  n_sequences: number;
  n_trainable_sequences: number;
  /** Trainable tokens de-duplicated across forks (a shared prefix counts once). */
  n_trainable_tokens: number;
}

export interface RolloutDocument {
  session_id: string;
  metadata: JsonObject;
  capture_level: CaptureLevel;
  rollout_type: RolloutType;
  budget_stop_count: number;
  /** Every stored call in arrival order, including errored ones that are not graph nodes. */
  calls: CallRecord[];
  graph: RolloutGraphJson;
  turns: RolloutTurn[];
  stats: RolloutStats;
  sequences: TrainingSequence[];
  /** One per row of `sequences`; empty for an evaluation rollout (see assertTrainable) or with includeTraces false. */
  traces: TrainingTrace[];
  validation: string[];
  trainable: boolean;
}

const ROLE_RANK: Record<PathRole, number> = { agent: 2, auxiliary: 1, discarded: 0 };

export function buildRollout(session: SessionInfo, records: readonly CallRecord[], opts: RolloutOptions): RolloutDocument {
  const calls = [...records].sort((a, b) => a.index - b.index || (a.call_id < b.call_id ? -1 : a.call_id > b.call_id ? 1 : 0));
  const graph =
    opts.graph?.captureLevel === opts.captureLevel ? opts.graph : RolloutGraph.fromRecords(calls, { captureLevel: opts.captureLevel });
  const purpose = opts.purpose ?? sessionPurpose(session);
  const trainableCapture = opts.captureLevel === 'tokens' && purpose !== 'eval';

  const nodes = graph.nodes();
  const roots = graph.roots();
  const leaves = graph.leaves();
  const forks = graph.forks();
  const discarded = graph.discarded();
  const validation = [
    ...checkRollout(
      { n_turns: nodes.length, n_roots: roots.length, n_forks: forks.length, n_discarded: discarded.size },
      { captureLevel: opts.captureLevel, budgetStopCount: opts.budgetStopCount },
    ),
    ...(opts.sessionFindings ?? []),
  ];
  const rolloutOk = !validation.some(isFatal);

  const { paths, sequences: all } = buildSequences(graph, { trainableCapture, discarded });
  const nodeRole = new Map<string, PathRole>();
  all.forEach((seq) => {
    for (const id of seq.node_ids) {
      const had = nodeRole.get(id);
      if (had === undefined || ROLE_RANK[seq.role] > ROLE_RANK[had]) nodeRole.set(id, seq.role);
    }
  });

  // A node's TrainingTurn is the same in every path through it: build it once (forks share prefixes).
  const turnCache = new Map<string, TrainingTurn>();
  const rows: TrainingSequence[] = [];
  const traces: TrainingTrace[] = [];
  all.forEach((seq, i) => {
    if (seq.role === 'discarded' && !opts.includeDiscarded) return;
    // A FATAL rollout finding (degenerate_rollout, no_turns, ...) vetoes every row, and each exported
    // trace carries the rollout's findings so the reason travels with the line.
    const row: TrainingSequence = { ...seq, trainable: seq.trainable && rolloutOk };
    rows.push(row);
    if (trainableCapture && opts.includeTraces !== false)
      traces.push(toTrainingTrace(session.session_id, { ...row, validation: [...row.validation, ...validation] }, paths[i]!, turnCache));
  });

  const counted = new Set<string>();
  let trainableTokens = 0;
  for (const row of rows) {
    if (!row.trainable) continue;
    for (const id of row.node_ids) {
      if (counted.has(id)) continue;
      counted.add(id);
      const n = graph.get(id)!;
      if (n.sampled_logprobs) trainableTokens += n.sampled_ids.length;
    }
  }

  const rootId = new Map<string, string>();
  const rootOf = (id: string): string => {
    let r = rootId.get(id);
    if (r === undefined) rootId.set(id, (r = graph.rootOf(graph.get(id)!).node_id));
    return r;
  };

  const turns: RolloutTurn[] = nodes.map((n) => {
    const r = n.record;
    const turn: RolloutTurn = {
      node_id: n.node_id,
      index: n.index,
      parent_id: n.parent?.node_id ?? null,
      root_id: rootOf(n.node_id),
      n_sampled: n.sampled_ids.length,
      n_prompt: n.promptLength,
      n_tools: n.n_tools,
      finish_reason: r.finish_reason,
      harness_session_id: r.harness_session_id,
      sampling_params: r.sampling_params,
      requested_sampling_params: r.requested_sampling_params,
      sampled_logprobs: n.sampled_logprobs,
      discarded: discarded.has(n.node_id),
      findings: n.findings,
    };
    if (opts.includeMessages) {
      turn.request_messages = n.request_messages;
      turn.request_tools = n.request_tools;
      turn.response_message = n.response_message;
    }
    return turn;
  });

  const graphJson: RolloutGraphJson = {
    nodes: nodes.map((n) => ({
      node_id: n.node_id,
      index: n.index,
      parent_id: n.parent?.node_id ?? null,
      root_id: rootOf(n.node_id),
      children: [...n.children].sort(byArrival).map((c) => c.node_id),
      discarded: discarded.has(n.node_id),
      role: nodeRole.get(n.node_id) ?? 'discarded',
    })),
    roots: roots.map((n) => n.node_id),
    leaves: leaves.map((n) => n.node_id),
    forks,
  };

  const nTrainableSeqs = rows.filter((r) => r.trainable).length;
  return {
    session_id: session.session_id,
    metadata: session.metadata,
    capture_level: opts.captureLevel,
    rollout_type: trainableCapture ? 'train' : 'eval',
    budget_stop_count: opts.budgetStopCount,
    calls,
    graph: graphJson,
    turns,
    stats: {
      n_calls: calls.length,
      n_turns: nodes.length,
      n_roots: roots.length,
      n_leaves: leaves.length,
      n_forks: forks.length,
      n_discarded: discarded.size,
      n_sequences: rows.length,
      n_trainable_sequences: nTrainableSeqs,
      n_trainable_tokens: trainableTokens,
    },
    sequences: rows,
    traces,
    validation,
    trainable: nTrainableSeqs > 0 && rolloutOk,
  };
}

function sessionPurpose(session: SessionInfo): SessionPurpose {
  const p = (session as SessionInfo & { purpose?: unknown }).purpose;
  return p === 'eval' || p === 'train' ? p : 'auto';
}

/** Asking for training data that was never captured. The message says why and what to change. */
export class NotTrainableError extends Error {
  constructor(
    message: string,
    readonly sessionId: string,
    readonly captureLevel: CaptureLevel,
    readonly rolloutType: RolloutType,
  ) {
    super(message);
    this.name = 'NotTrainableError';
  }
}

/**
 * Refuse to hand out training traces of an evaluation-only session: an empty but well-formed export
 * is indistinguishable from a rollout that simply had nothing to train on. With `strict`, also refuse
 * a training session that has no trainable row or has a FATAL rollout finding.
 */
export function assertTrainable(doc: RolloutDocument, opts: { strict?: boolean } = {}): void {
  if (doc.rollout_type === 'eval') {
    const why =
      doc.capture_level === 'tokens'
        ? 'the session was created with purpose "eval"'
        : `it was captured at level "${doc.capture_level}", which has no engine token ids and aligned behaviour logprobs; ` +
          'point the proxy at an engine that returns them (vLLM with --return-tokens-as-token-ids --logprobs-mode processed_logprobs) to get level "tokens"';
    throw new NotTrainableError(
      `session ${doc.session_id} is an evaluation rollout: ${why}. Its trace and graph are complete, but there is no training data to export.`,
      doc.session_id,
      doc.capture_level,
      doc.rollout_type,
    );
  }
  if (opts.strict && !doc.trainable) {
    const fatal = [...doc.validation, ...doc.sequences.flatMap((s) => s.validation)].filter(isFatal);
    const why = fatal.length > 0 ? fatal.slice(0, 5).join('; ') : 'no sequence has an agent role with trainable tokens';
    throw new NotTrainableError(`session ${doc.session_id} is not trainable: ${why}`, doc.session_id, doc.capture_level, doc.rollout_type);
  }
}

/** The document's training traces, after `assertTrainable`. */
export function trainingTraces(doc: RolloutDocument, opts: { strict?: boolean } = {}): TrainingTrace[] {
  assertTrainable(doc, opts);
  return doc.traces;
}
