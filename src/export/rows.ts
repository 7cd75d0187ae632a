// One rollout -> the rows of each export format. Field contracts: docs/exports.md.
import { createHash } from 'node:crypto';
import type { TrainingSequence, TrainingTurn } from '../capture/rollout.js';
import type { CallRecord } from '../capture/types.js';
import { checkAligned, checkCalls, ExportContractError } from './contract.js';
import { callPolicyVersion, sessionPolicyVersion, sortVersions } from './policy-version.js';
import type { StoredRollout } from '../capture/rollout-file.js';
import type { RolloutUnit } from './source.js';

export const TRL_TRACE_SCHEMA_VERSION = 1;

/** TRL's TrainingTrace (docs/trainer-contracts.md §1.2): exactly these two keys; reward and identity stay outside. */
export interface TrlTrainingTrace {
  schema_version: typeof TRL_TRACE_SCHEMA_VERSION;
  turns: TrainingTurn[];
}

export interface TrainingTraceLine {
  rollout_id: string;
  group_id: string | null;
  session_id: string;
  task: string | null;
  harness: string | null;
  /** The verifier's reward; null when unknown, which is not 0. */
  reward: number | null;
  class: string | null;
  /** One per turn of `trace.turns`: the policy version that sampled it (null when unknown). */
  turn_policy_versions: (string | null)[];
  trace: TrlTrainingTrace;
}

export interface TrlRow {
  prompt_ids: number[];
  completion_ids: number[];
  logprobs: number[];
  env_mask: number[];
  reward: number;
  group_id: string;
  rollout_id: string;
  session_id: string;
  task: string | null;
  harness: string | null;
  trace_id: string;
  /** The oldest policy version that sampled a call of this row. */
  policy_version: string | null;
  num_turns: number;
}

export interface VerlRow {
  key: string;
  uid: string;
  prompt_ids: number[];
  response_ids: number[];
  response_mask: number[];
  response_logprobs: number[];
  /** Only on the final segment (highest index); null on the others, whose advantage veRL broadcasts from it. */
  reward_score: number | null;
  num_turns: number;
  loss_weight: number;
  metrics: Record<string, number>;
  extra_fields: {
    trajectory_role: 'final' | 'intermediate';
    segment_index: number;
    n_segments: number;
    session_id: string;
    rollout_id: string;
    group_id: string;
    task: string | null;
    harness: string | null;
    trace_id: string;
    policy_version: string | null;
  };
}

export interface AuxiliaryPath {
  rollout_id: string;
  session_id: string;
  trace_id: string;
  role: string;
  trainable: boolean;
  n_turns: number;
  n_trainable: number;
  why: string;
}

export interface RolloutFacts {
  /** Policy version of every call (call_id -> version; null when unknown). */
  versions: Map<string, string | null>;
}

export function rolloutFacts(r: StoredRollout, unit: RolloutUnit, batchVersion: string | null): RolloutFacts {
  const session = sessionPolicyVersion(r.info.metadata);
  const versions = new Map<string, string | null>();
  for (const c of r.calls)
    versions.set(c.call_id, callPolicyVersion(c, { session, rollout: unit.policy_version, batch: batchVersion }).version);
  return { versions };
}

function oldest(versions: (string | null)[]): string | null {
  const known = versions.filter((v): v is string => v !== null);
  return known.length ? sortVersions(known)[0]! : null;
}

/**
 * Stops on a rollout that cannot feed a trainer: an evaluation capture, or an agent call (a node of an
 * agent path that is not a discarded retry) that breaks the contract. Checked before anything is
 * decided about paths, so a broken call cannot hide as a merely untrainable path.
 */
export function assertTrainingCapture(r: StoredRollout): void {
  if (r.doc.rollout_type === 'eval') {
    throw new ExportContractError(
      r.file,
      r.info.session_id,
      null,
      `an evaluation capture (level ${r.doc.capture_level}${r.doc.capture_level === 'tokens' ? ', purpose eval' : ''}) has no training data; it cannot be exported`,
    );
  }
  const agentNodes = r.doc.graph.nodes.filter((n) => n.role === 'agent' && !n.discarded).map((n) => n.node_id);
  checkCalls(r.file, r.info.session_id, callsOf(r, agentNodes));
}

/** The trainable agent paths in leaf arrival order, and the others. The last agent path is the main one. */
export function splitPaths(r: StoredRollout): { agent: TrainingSequence[]; others: TrainingSequence[] } {
  const agent: TrainingSequence[] = [];
  const others: TrainingSequence[] = [];
  for (const s of r.doc.sequences) (s.role === 'agent' && s.trainable ? agent : others).push(s);
  return { agent, others };
}

export const traceId = (sessionId: string, seq: TrainingSequence): string => `${sessionId}/${seq.node_ids[seq.node_ids.length - 1]}`;

function callsOf(r: StoredRollout, nodeIds: Iterable<string>): CallRecord[] {
  const byId = new Map(r.calls.map((c) => [c.call_id, c]));
  const out: CallRecord[] = [];
  const seen = new Set<string>();
  for (const id of nodeIds) {
    if (seen.has(id)) continue;
    seen.add(id);
    out.push(byId.get(id)!);
  }
  return out.sort((a, b) => a.index - b.index);
}

function auxiliary(r: StoredRollout, unit: RolloutUnit, seqs: TrainingSequence[], why: (s: TrainingSequence) => string): AuxiliaryPath[] {
  return seqs.map((s) => ({
    rollout_id: unit.rollout_id,
    session_id: r.info.session_id,
    trace_id: traceId(r.info.session_id, s),
    role: s.role,
    trainable: s.trainable,
    n_turns: s.n_turns,
    n_trainable: s.n_trainable,
    why: why(s),
  }));
}

export type Built<T> =
  { ok: true; rows: T[]; auxiliary: AuxiliaryPath[]; calls: CallRecord[] } | { ok: false; reason: string; detail: string };

function noTrainablePath(r: StoredRollout): Built<never> {
  const fatal = [...r.doc.validation, ...r.doc.sequences.flatMap((s) => s.validation)].filter((f) => f.startsWith('[FATAL]'));
  return { ok: false, reason: 'no_trainable_path', detail: fatal.slice(0, 3).join('; ') || 'no agent path with trainable tokens' };
}

/** trainingtrace: one line per rollout; the trace holds its agent turns (role agent, not discarded, non-empty completion). */
export function trainingTraceLine(r: StoredRollout, unit: RolloutUnit, facts: RolloutFacts): Built<TrainingTraceLine> {
  assertTrainingCapture(r);
  if (!r.doc.trainable) return noTrainablePath(r);
  const nodes = new Map(r.doc.graph.nodes.map((n) => [n.node_id, n]));
  const turns = new Map<string, TrainingTurn>();
  for (const t of r.doc.traces) {
    for (const turn of t.turns) {
      const n = nodes.get(turn.node_id);
      if (!n || n.role !== 'agent' || n.discarded || turn.completion_token_ids.length === 0) continue;
      turns.set(turn.node_id, turn);
    }
  }
  const ordered = [...turns.values()].sort((a, b) => a.metadata.index - b.metadata.index);
  const calls = callsOf(r, turns.keys());
  for (const t of ordered) {
    const p = t.prompt_token_ids.length;
    checkAligned(r.file, r.info.session_id, `turn ${t.node_id}`, [...t.prompt_token_ids, ...t.completion_token_ids], t.loss_mask, [
      ...new Array<number>(p).fill(0),
      ...t.per_token_logps,
    ]);
  }
  const line: TrainingTraceLine = {
    rollout_id: unit.rollout_id,
    group_id: unit.group_id,
    session_id: r.info.session_id,
    task: unit.task,
    harness: unit.harness,
    reward: unit.reward,
    class: unit.class,
    turn_policy_versions: ordered.map((t) => facts.versions.get(t.node_id) ?? null),
    trace: { schema_version: TRL_TRACE_SCHEMA_VERSION, turns: ordered },
  };
  const aux = auxiliary(
    r,
    unit,
    r.doc.sequences.filter((s) => s.role !== 'agent'),
    (s) => `${s.role} path: its turns are not agent turns`,
  );
  return { ok: true, rows: [line], auxiliary: aux, calls };
}

function numTurns(r: StoredRollout, seq: TrainingSequence): number {
  const leaf = r.calls.find((c) => c.call_id === seq.node_ids[seq.node_ids.length - 1]);
  return (leaf?.engine_request?.messages?.length ?? 0) + 1;
}

function splitSequence(
  r: StoredRollout,
  seq: TrainingSequence,
): { prompt: number[]; completion: number[]; mask: number[]; logprobs: number[] } {
  const id = traceId(r.info.session_id, seq);
  checkAligned(r.file, r.info.session_id, `path ${id}`, seq.input_ids, seq.loss_mask, seq.logprobs);
  const p = seq.prompt_len;
  if (p === 0) throw new ExportContractError(r.file, r.info.session_id, seq.root_id, `path ${id}: empty prompt ids`);
  if (p >= seq.input_ids.length)
    throw new ExportContractError(
      r.file,
      r.info.session_id,
      seq.node_ids[seq.node_ids.length - 1]!,
      `path ${id}: no completion tokens after the prompt`,
    );
  return {
    prompt: seq.input_ids.slice(0, p),
    completion: seq.input_ids.slice(p),
    mask: seq.loss_mask.slice(p),
    logprobs: seq.logprobs.slice(p),
  };
}

/** trl: the rollout's main agent path (the trainable agent path whose leaf came last) as one row. */
export function trlRow(r: StoredRollout, unit: RolloutUnit, facts: RolloutFacts): Built<TrlRow> {
  assertTrainingCapture(r);
  if (unit.reward === null) return { ok: false, reason: 'no_reward', detail: 'the rollout has no verifier reward; a trl row needs one' };
  const { agent, others } = splitPaths(r);
  const main = agent[agent.length - 1];
  if (!main || !r.doc.trainable) return noTrainablePath(r);
  const calls = callsOf(r, main.node_ids);
  const s = splitSequence(r, main);
  const row: TrlRow = {
    prompt_ids: s.prompt,
    completion_ids: s.completion,
    logprobs: s.logprobs,
    env_mask: s.mask,
    reward: unit.reward,
    group_id: unit.group_id!,
    rollout_id: unit.rollout_id,
    session_id: r.info.session_id,
    task: unit.task,
    harness: unit.harness,
    trace_id: traceId(r.info.session_id, main),
    policy_version: oldest(main.node_ids.map((id) => facts.versions.get(id) ?? null)),
    num_turns: numTurns(r, main),
  };
  const aux = [
    ...auxiliary(r, unit, agent.slice(0, -1), () => 'agent path other than the main one (a subagent, or the agent before a compaction)'),
    ...auxiliary(r, unit, others, (x) => (x.role === 'agent' ? 'agent path without trainable tokens' : `${x.role} path`)),
  ];
  return { ok: true, rows: [row], auxiliary: aux, calls };
}

/** The session part of a veRL key: veRL splits keys with rsplit('_', 2), so it must not contain '_'. */
export function verlSessionKey(sessionId: string): string {
  return sessionId.includes('_') ? `h${createHash('sha256').update(sessionId).digest('hex').slice(0, 16)}` : sessionId;
}

/** verl: one segment per trainable agent path, keyed {uid}_{session}_{index}; the main path is the final segment. */
export function verlRows(r: StoredRollout, unit: RolloutUnit, facts: RolloutFacts): Built<VerlRow> {
  assertTrainingCapture(r);
  if (unit.reward === null)
    return { ok: false, reason: 'no_reward', detail: 'the rollout has no verifier reward; a veRL segment needs one' };
  const { agent, others } = splitPaths(r);
  if (agent.length === 0 || !r.doc.trainable) return noTrainablePath(r);
  const calls = callsOf(
    r,
    agent.flatMap((s) => s.node_ids),
  );
  const uid = unit.group_id!;
  const session = verlSessionKey(r.info.session_id);
  const n = agent.length;
  const rows = agent.map((seq, index): VerlRow => {
    const s = splitSequence(r, seq);
    const final = index === n - 1;
    return {
      key: `${uid}_${session}_${index}`,
      uid,
      prompt_ids: s.prompt,
      response_ids: s.completion,
      response_mask: s.mask,
      response_logprobs: s.logprobs,
      reward_score: final ? unit.reward : null,
      num_turns: numTurns(r, seq),
      loss_weight: 1 / n,
      metrics: {},
      extra_fields: {
        trajectory_role: final ? 'final' : 'intermediate',
        segment_index: index,
        n_segments: n,
        session_id: r.info.session_id,
        rollout_id: unit.rollout_id,
        group_id: uid,
        task: unit.task,
        harness: unit.harness,
        trace_id: traceId(r.info.session_id, seq),
        policy_version: oldest(seq.node_ids.map((id) => facts.versions.get(id) ?? null)),
      },
    };
  });
  const aux = auxiliary(r, unit, others, (x) => (x.role === 'agent' ? 'agent path without trainable tokens' : `${x.role} path`));
  return { ok: true, rows, auxiliary: aux, calls };
}
