// Cross-check of captured calls against the harness's own ATIF trajectory (harbor-and-atif.md 7,
// after OpenEnv's harbor/atif.py). Pure: rollout document + trajectory -> per-call table + verdict.
// The proxy sees token ids; ATIF sees retries, subagents and tool-call ids. Completion tokens per call
// are the join key because every harness counts them the same way; prompt tokens are not (6.6).
import { finding, isFatal } from '../capture/findings.js';
import type { RolloutDocument } from '../capture/rollout.js';
import { STOP_ANSWER_TEXT } from '../capture/dialects/stop-answer.js';
import type { CallRecord } from '../capture/types.js';
import { atifMessageText, type AtifStep, type AtifTrajectory } from './atif.js';

export type AtifVerdict = 'match' | 'MISMATCH' | 'none';

/** One row per captured call and per unmatched step, in order. */
export interface AtifCheckRow {
  call_index: number | null;
  call_id: string | null;
  /** Completion tokens the engine sampled for this call. */
  n_sampled: number | null;
  discarded: boolean;
  step_id: number | null;
  /** The step's `metrics.completion_tokens`, null when the harness did not report it. */
  step_completion_tokens: number | null;
  /**
   * match: counts equal; matched_by_tool_ids: no count, tool-call ids agree; auxiliary: a call ATIF
   * does not list; mismatch: no consistent alignment; missing_call: a step without a captured call.
   */
  status: 'match' | 'matched_by_tool_ids' | 'auxiliary' | 'mismatch' | 'missing_call' | 'extra_call';
}

export interface AtifCheckResult {
  verdict: AtifVerdict;
  /** Graded findings, "[GRADE] code: detail". */
  findings: string[];
  rows: AtifCheckRow[];
  /** Captured completion counts compared (agent roots, retries included), arrival order. */
  ours: number[];
  /** ATIF agent-step completion counts (null: not reported). */
  theirs: (number | null)[];
  n_agent_steps: number;
  step1: { atif_prompt_tokens: number | null; captured_prompt_len: number | null };
  retries: { atif_steps: number; atif_extra_calls: number; graph_discarded: number };
  n_subagents: number;
  /** One plain sentence for people. */
  summary: string;
}

type CheckedRollout = Pick<RolloutDocument, 'calls' | 'turns' | 'graph' | 'sequences' | 'stats' | 'rollout_type' | 'budget_stop_count'>;

export interface AtifCheckOptions {
  /** Treat the rollout as a training rollout even if the document says eval (default: the document's type). */
  rolloutType?: 'train' | 'eval';
}

/** The verdict without a trajectory. */
export function noTrajectory(): AtifCheckResult {
  return {
    verdict: 'none',
    findings: [],
    rows: [],
    ours: [],
    theirs: [],
    n_agent_steps: 0,
    step1: { atif_prompt_tokens: null, captured_prompt_len: null },
    retries: { atif_steps: 0, atif_extra_calls: 0, graph_discarded: 0 },
    n_subagents: 0,
    summary: 'No ATIF trajectory attached.',
  };
}

/** Agent steps that stand for a model call: claude-code's synthetic API errors and budget stops removed. */
export function atifAgentSteps(traj: AtifTrajectory, budgetStopCount: number): AtifStep[] {
  let stops = budgetStopCount;
  return traj.steps.filter((s) => {
    if (s.source !== 'agent') return false;
    const tokens = (s.metrics?.completion_tokens ?? 0) + (s.metrics?.prompt_tokens ?? 0);
    const text = atifMessageText(s.message);
    if (s.model_name === '<synthetic>' && text.startsWith('API Error: ') && tokens === 0) return false;
    if (stops > 0 && tokens === 0 && text.trim() === STOP_ANSWER_TEXT) {
      stops--;
      return false;
    }
    return true;
  });
}

function countSubagents(traj: AtifTrajectory): number {
  let n = traj.subagent_trajectories?.length ?? 0;
  for (const s of traj.steps) for (const r of s.observation?.results ?? []) n += r.subagent_trajectory_ref?.length ?? 0;
  return n;
}

/** Tool-call ids the call produced, as the engine returned them and as the harness received them. */
export function callToolIds(call: CallRecord | undefined): Set<string> {
  const ids = new Set<string>();
  if (!call) return ids;
  for (const c of call.engine_response?.choices ?? []) for (const t of c.message.tool_calls ?? []) ids.add(t.id);
  const walk = (v: unknown, depth: number): void => {
    if (depth > 6 || v === null || typeof v !== 'object') return;
    if (Array.isArray(v)) {
      for (const x of v) walk(x, depth + 1);
      return;
    }
    const o = v as Record<string, unknown>;
    if (o.type === 'tool_use' && typeof o.id === 'string') ids.add(o.id); // Anthropic
    if (o.type === 'function_call' && typeof o.call_id === 'string') ids.add(o.call_id); // Responses
    if (o.type === 'function' && typeof o.id === 'string') ids.add(o.id); // Chat
    if (o.functionCall && typeof (o.functionCall as Record<string, unknown>).id === 'string')
      ids.add((o.functionCall as { id: string }).id); // Gemini
    for (const x of Object.values(o)) walk(x, depth + 1);
  };
  walk(call.response_body, 0);
  return ids;
}

interface Candidate {
  index: number;
  call_id: string;
  n_sampled: number;
  discarded: boolean;
  toolIds: Set<string>;
}

/** Calls under agent roots (discarded retries included), arrival order. */
function agentCalls(doc: CheckedRollout): Candidate[] {
  const rootRole = new Map(doc.graph.nodes.map((n) => [n.node_id, n.role]));
  const byId = new Map(doc.calls.map((c) => [c.call_id, c]));
  return doc.turns
    .filter((t) => rootRole.get(t.root_id) === 'agent')
    .sort((a, b) => a.index - b.index)
    .map((t) => ({
      index: t.index,
      call_id: t.node_id,
      n_sampled: t.n_sampled,
      discarded: t.discarded,
      toolIds: callToolIds(byId.get(t.node_id)),
    }));
}

interface Step {
  step: AtifStep;
  /** Completion tokens, null when not reported (an all-zero trajectory reports none). */
  count: number | null;
}

function stepMatches({ step, count }: Step, call: Candidate): 'match' | 'matched_by_tool_ids' | null {
  if (count !== null) return count === call.n_sampled ? 'match' : null;
  const ids = (step.tool_calls ?? []).map((t) => t.tool_call_id);
  if (ids.length === 0) return null;
  return ids.every((id) => call.toolIds.has(id)) ? 'matched_by_tool_ids' : null;
}

/** Leftmost in-order alignment of steps onto calls; null when some step has no matching call left. */
function align(
  steps: readonly Step[],
  calls: readonly Candidate[],
): { status: ('match' | 'matched_by_tool_ids' | null)[]; stepOf: number[] } | null {
  const out = new Array<'match' | 'matched_by_tool_ids' | null>(calls.length).fill(null);
  const stepOf = new Array<number>(calls.length).fill(-1);
  let c = 0;
  for (let s = 0; s < steps.length; s++) {
    while (c < calls.length && stepMatches(steps[s]!, calls[c]!) === null) c++;
    if (c === calls.length) return null;
    out[c] = stepMatches(steps[s]!, calls[c]!);
    stepOf[c] = s;
    c++;
  }
  return { status: out, stepOf };
}

export function atifCheck(doc: CheckedRollout, traj: AtifTrajectory, opts: AtifCheckOptions = {}): AtifCheckResult {
  const steps = atifAgentSteps(traj, doc.budget_stop_count);
  const theirs = steps.map((s) => s.metrics?.completion_tokens ?? null);
  const nSub = countSubagents(traj);
  const retrySteps = steps.filter((s) => (s.llm_call_count ?? 1) > 1);
  const retries = {
    atif_steps: retrySteps.length,
    atif_extra_calls: retrySteps.reduce((a, s) => a + (s.llm_call_count ?? 1) - 1, 0),
    graph_discarded: doc.stats.n_discarded,
  };
  const firstAgentSeq = doc.sequences.find((s) => s.role === 'agent');
  const step1 = {
    atif_prompt_tokens: steps.length > 0 ? (steps[0]!.metrics?.prompt_tokens ?? null) : null,
    captured_prompt_len: firstAgentSeq ? firstAgentSeq.prompt_len : null,
  };
  const findings: string[] = [];
  const type = opts.rolloutType ?? doc.rollout_type;

  if (type === 'eval') {
    const nCalls = doc.turns.length;
    if (nCalls < steps.length)
      findings.push(finding('WARN', 'atif_calls_missing', `${nCalls} captured call(s) for ${steps.length} ATIF agent step(s)`));
    else if (nCalls > steps.length)
      findings.push(finding('INFO', 'atif_extra_calls', `${nCalls} captured call(s) for ${steps.length} ATIF agent step(s)`));
    const rows: AtifCheckRow[] = [...doc.turns]
      .sort((a, b) => a.index - b.index)
      .map((t, i) => ({
        call_index: t.index,
        call_id: t.node_id,
        n_sampled: t.n_sampled,
        discarded: t.discarded,
        step_id: steps[i]?.step_id ?? null,
        step_completion_tokens: steps[i]?.metrics?.completion_tokens ?? null,
        status: i < steps.length ? 'match' : 'extra_call',
      }));
    for (let i = rows.length; i < steps.length; i++) rows.push(missingRow(steps[i]!));
    return finish({
      findings,
      rows,
      ours: doc.turns.map((t) => t.n_sampled),
      theirs,
      n_agent_steps: steps.length,
      step1,
      retries,
      n_subagents: nSub,
    });
  }

  const calls = agentCalls(doc);
  const ours = calls.map((c) => c.n_sampled);
  let rows: AtifCheckRow[];
  const noCounts = theirs.every((x) => x === null || x === 0);
  const keyed: Step[] = steps.map((step, i) => ({ step, count: noCounts ? null : theirs[i]! }));
  if (steps.length === 0 || (noCounts && !steps.some((s) => (s.tool_calls ?? []).length > 0))) {
    findings.push(
      finding(
        'WARN',
        'atif_no_token_counts',
        steps.length === 0 ? 'the trajectory has no agent steps' : 'no agent step reports completion tokens; nothing to compare',
      ),
    );
    rows = calls.map((c) => callRow(c, null, 'extra_call'));
  } else {
    const aligned = align(keyed, calls);
    if (!aligned) {
      findings.push(
        finding(
          'FATAL',
          'turn_mismatch',
          `ATIF completion tokens [${theirs.map((x) => x ?? '?').join(', ')}] do not align with captured [${ours.join(', ')}]`,
        ),
      );
      rows = mismatchRows(keyed, calls);
    } else {
      const { status, stepOf } = aligned;
      rows = calls.map((c, i) => callRow(c, stepOf[i]! >= 0 ? steps[stepOf[i]!]! : null, status[i] ?? 'auxiliary'));
      const skipped = calls.filter((_, i) => status[i] === null);
      const unknown = keyed.filter((k) => k.count === null).length;
      const partial = unknown > 0;
      if (partial)
        findings.push(
          finding(
            'WARN',
            'atif_partial_usage',
            `${unknown} of ${steps.length} agent step(s) lack completion counts; matched by tool-call ids`,
          ),
        );
      if (skipped.length === 0 && !partial)
        findings.push(finding('INFO', 'turns_match', `${steps.length} agent step(s) match the captured calls token for token`));
      if (skipped.length > 0) {
        const coverage = (calls.length - skipped.length) / calls.length;
        const which = skipped.map((c) => `#${c.index}`).join(', ');
        if (coverage >= 0.5)
          findings.push(
            finding('WARN', 'atif_aux_calls', `call(s) ${which} are not in the trajectory: auxiliary, masked to 0 for training`),
          );
        else
          findings.push(
            finding(
              'FATAL',
              'atif_coverage_too_low',
              `the trajectory covers ${calls.length - skipped.length} of ${calls.length} captured calls (${Math.round(coverage * 100)}%, below 50%)`,
            ),
          );
      }
    }
  }
  if (step1.atif_prompt_tokens !== null && step1.captured_prompt_len !== null && step1.atif_prompt_tokens !== step1.captured_prompt_len) {
    findings.push(
      finding(
        'WARN',
        'prompt_len_mismatch',
        `ATIF step-1 prompt_tokens ${step1.atif_prompt_tokens}, captured prompt_len ${step1.captured_prompt_len}`,
      ),
    );
  }
  if (retries.atif_steps > 0) {
    findings.push(
      finding(
        'WARN',
        'atif_retries',
        `${retries.atif_steps} step(s) aggregate ${retries.atif_extra_calls} extra call(s) (llm_call_count > 1); the graph has ${retries.graph_discarded} discarded call(s)`,
      ),
    );
  }
  if (nSub > 0)
    findings.push(
      finding(
        'FATAL',
        'atif_subagents',
        `${nSub} subagent trajector${nSub === 1 ? 'y' : 'ies'}: the reward cannot be attributed across agents`,
      ),
    );
  return finish({ findings, rows, ours, theirs, n_agent_steps: steps.length, step1, retries, n_subagents: nSub });
}

function callRow(c: Candidate, step: AtifStep | null, status: AtifCheckRow['status']): AtifCheckRow {
  return {
    call_index: c.index,
    call_id: c.call_id,
    n_sampled: c.n_sampled,
    discarded: c.discarded,
    step_id: step?.step_id ?? null,
    step_completion_tokens: step?.metrics?.completion_tokens ?? null,
    status,
  };
}

function missingRow(step: AtifStep): AtifCheckRow {
  return {
    call_index: null,
    call_id: null,
    n_sampled: null,
    discarded: false,
    step_id: step.step_id,
    step_completion_tokens: step.metrics?.completion_tokens ?? null,
    status: 'missing_call',
  };
}

/** Side by side, position by position, so the first disagreement is visible. */
function mismatchRows(steps: readonly Step[], calls: readonly Candidate[]): AtifCheckRow[] {
  const rows: AtifCheckRow[] = [];
  for (let i = 0; i < Math.max(steps.length, calls.length); i++) {
    const c = calls[i];
    const s = steps[i] ?? null;
    if (!c) {
      rows.push(missingRow(s!.step));
      continue;
    }
    const how = s === null ? null : stepMatches(s, c);
    rows.push(callRow(c, s?.step ?? null, s === null ? 'extra_call' : (how ?? 'mismatch')));
  }
  return rows;
}

function finish(r: Omit<AtifCheckResult, 'verdict' | 'summary'>): AtifCheckResult {
  const verdict: AtifVerdict = r.findings.some(isFatal) ? 'MISMATCH' : 'match';
  const fatal = r.findings.filter(isFatal).map((f) => f.replace(/^\[FATAL\] /, ''));
  const summary =
    verdict === 'MISMATCH'
      ? `MISMATCH: ${fatal.join('; ')}`
      : r.findings.some((f) => f.includes('atif_no_token_counts'))
        ? 'No verdict on tokens: the trajectory reports no completion counts.'
        : `Match: ${r.n_agent_steps} agent step(s) against ${r.ours.length} captured call(s)${r.findings.some((f) => f.startsWith('[WARN]')) ? ', with warnings' : ''}.`;
  return { ...r, verdict, summary };
}
