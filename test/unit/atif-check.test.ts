import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildRollout } from '../../src/capture/rollout.js';
import type { CallRecord } from '../../src/capture/types.js';
import { parseAtif, type AtifTrajectory } from '../../src/harness/atif.js';
import { atifAgentSteps, atifCheck, callToolIds } from '../../src/harness/atif-check.js';
import { call, session } from './rollout-fixtures.js';

/** A linear agent chain whose call k samples lens[k] tokens; ids are distinct per position. */
function chainOf(lens: number[], opts: { prefix?: string; start?: number; nTools?: number } = {}): CallRecord[] {
  let next = (opts.start ?? 1) * 1000;
  const fresh = (k: number) => Array.from({ length: k }, () => next++);
  let prompt = fresh(10);
  return lens.map((n, i) => {
    const sampled = fresh(n);
    const rec = call({ id: `${opts.prefix ?? 'a'}${i}`, index: i, prompt, sampled, nTools: opts.nTools ?? 1 });
    prompt = [...prompt, ...sampled, ...fresh(2)];
    return rec;
  });
}

function reindex(records: CallRecord[]): CallRecord[] {
  return records.map((r, i) => ({ ...r, index: i }));
}

function traj(
  counts: (number | null)[],
  extra: Partial<{ prompt1: number; llmCalls: number[]; toolIds: string[][]; sub: boolean }> = {},
): AtifTrajectory {
  return parseAtif({
    schema_version: 'ATIF-v1.7',
    agent: { name: 'h', version: '1' },
    steps: [
      { step_id: 1, source: 'user', message: 'task' },
      ...counts.map((c, i) => ({
        step_id: i + 2,
        source: 'agent',
        message: `step ${i}`,
        ...(extra.toolIds?.[i]
          ? { tool_calls: extra.toolIds[i]!.map((id) => ({ tool_call_id: id, function_name: 'bash', arguments: {} })) }
          : {}),
        ...(c === null
          ? {}
          : { metrics: { completion_tokens: c, ...(i === 0 && extra.prompt1 !== undefined ? { prompt_tokens: extra.prompt1 } : {}) } }),
        ...(extra.llmCalls?.[i] !== undefined ? { llm_call_count: extra.llmCalls[i] } : {}),
      })),
    ],
    ...(extra.sub
      ? {
          subagent_trajectories: [
            {
              schema_version: 'ATIF-v1.7',
              trajectory_id: 's1',
              agent: { name: 'sub', version: '1' },
              steps: [{ step_id: 1, source: 'user', message: 'x' }],
            },
          ],
        }
      : {}),
  });
}

const doc = (records: CallRecord[], purpose?: 'eval') =>
  buildRollout(session, records, { budgetStopCount: 0, captureLevel: 'tokens', ...(purpose ? { purpose } : {}) });
const codes = (fs: string[]) => fs.map((f) => /^\[(\w+)\] ([^:]+)/.exec(f)!.slice(1).join(' '));

test('exact match: turns_match, one row per call, step-1 prompt checked', () => {
  const d = doc(chainOf([37, 36, 104, 264]));
  const r = atifCheck(d, traj([37, 36, 104, 264], { prompt1: 10 }));
  assert.equal(r.verdict, 'match');
  assert.deepEqual(codes(r.findings), ['INFO turns_match']);
  assert.deepEqual(r.ours, [37, 36, 104, 264]);
  assert.deepEqual(
    r.rows.map((x) => [x.call_id, x.step_id, x.status]),
    [
      ['a0', 2, 'match'],
      ['a1', 3, 'match'],
      ['a2', 4, 'match'],
      ['a3', 5, 'match'],
    ],
  );
  assert.deepEqual(r.step1, { atif_prompt_tokens: 10, captured_prompt_len: 10 });
});

test('a different count is a FATAL turn_mismatch and the row shows where', () => {
  const r = atifCheck(doc(chainOf([5, 6, 7])), traj([5, 9, 7]));
  assert.equal(r.verdict, 'MISMATCH');
  assert.deepEqual(codes(r.findings), ['FATAL turn_mismatch']);
  assert.match(r.findings[0]!, /\[5, 9, 7\].*\[5, 6, 7\]/);
  assert.deepEqual(
    r.rows.map((x) => x.status),
    ['match', 'mismatch', 'match'],
  );
  assert.match(r.summary, /^MISMATCH: turn_mismatch/);
});

test('extra ATIF steps are missing calls (mismatch)', () => {
  const r = atifCheck(doc(chainOf([5, 6])), traj([5, 6, 7]));
  assert.equal(r.verdict, 'MISMATCH');
  assert.deepEqual(
    r.rows.map((x) => x.status),
    ['match', 'match', 'missing_call'],
  );
});

test('auxiliary calls: a strict subsequence covering >= 50% is a WARN; below is FATAL', () => {
  const d = doc(chainOf([5, 6, 7, 8]));
  const ok = atifCheck(d, traj([5, 7, 8]));
  assert.equal(ok.verdict, 'match');
  assert.deepEqual(codes(ok.findings), ['WARN atif_aux_calls']);
  assert.deepEqual(
    ok.rows.map((x) => x.status),
    ['match', 'auxiliary', 'match', 'match'],
  );
  const half = atifCheck(d, traj([6, 8]));
  assert.equal(half.verdict, 'match');
  const low = atifCheck(d, traj([8]));
  assert.equal(low.verdict, 'MISMATCH');
  assert.deepEqual(codes(low.findings), ['FATAL atif_coverage_too_low']);
});

test('calls under auxiliary roots (a toolless title call) are not compared', () => {
  const agent = chainOf([5, 6, 7]);
  const title = chainOf([3], { prefix: 't', start: 9, nTools: 0 });
  const d = doc(reindex([agent[0]!, title[0]!, agent[1]!, agent[2]!]));
  const r = atifCheck(d, traj([5, 6, 7]));
  assert.deepEqual(r.ours, [5, 6, 7]);
  assert.equal(r.verdict, 'match');
  assert.deepEqual(codes(r.findings), ['INFO turns_match']);
});

test('partial usage matches the rest by tool-call ids', () => {
  const records = chainOf([5, 6, 7]);
  records[1]!.engine_response!.choices[0]!.message = {
    role: 'assistant',
    content: null,
    tool_calls: [{ id: 'call_x', type: 'function', function: { name: 'bash', arguments: '{}' } }],
  };
  const d = doc(records);
  const ok = atifCheck(d, traj([5, null, 7], { toolIds: [[], ['call_x'], []] }));
  assert.equal(ok.verdict, 'match');
  assert.deepEqual(codes(ok.findings), ['WARN atif_partial_usage']);
  assert.deepEqual(
    ok.rows.map((x) => x.status),
    ['match', 'matched_by_tool_ids', 'match'],
  );
  const bad = atifCheck(d, traj([5, null, 7], { toolIds: [[], ['call_y'], []] }));
  assert.equal(bad.verdict, 'MISMATCH');
});

test('tool-call ids are read from the client body of every dialect', () => {
  const r = call({ id: 'x', index: 0, prompt: [1], sampled: [2] });
  r.response_body = {
    content: [{ type: 'tool_use', id: 'toolu_1' }],
    output: [{ type: 'function_call', call_id: 'fc_1' }],
    candidates: [{ content: { parts: [{ functionCall: { id: 'g1', name: 'f' } }] } }],
  };
  assert.deepEqual([...callToolIds(r)].sort(), ['fc_1', 'g1', 'toolu_1']);
});

test('no counts: WARN and no token verdict', () => {
  const r = atifCheck(doc(chainOf([5, 6])), traj([0, 0]));
  assert.deepEqual(codes(r.findings), ['WARN atif_no_token_counts']);
  assert.equal(r.verdict, 'match');
  assert.match(r.summary, /no completion counts/);
});

test('step-1 prompt mismatch, retries and subagents', () => {
  const d = doc(chainOf([5, 6]));
  const r = atifCheck(d, traj([5, 6], { prompt1: 11, llmCalls: [1, 3], sub: true }));
  assert.deepEqual(codes(r.findings), ['INFO turns_match', 'WARN prompt_len_mismatch', 'WARN atif_retries', 'FATAL atif_subagents']);
  assert.equal(r.retries.atif_extra_calls, 2);
  assert.equal(r.verdict, 'MISMATCH');
});

test('synthetic API-error steps and budget-stop steps are not agent steps', () => {
  const t = parseAtif({
    schema_version: 'ATIF-v1.7',
    agent: { name: 'claude-code', version: '1' },
    steps: [
      {
        step_id: 1,
        source: 'agent',
        model_name: '<synthetic>',
        message: 'API Error: 500',
        metrics: { completion_tokens: 0, prompt_tokens: 0 },
      },
      { step_id: 2, source: 'agent', message: 'ok', metrics: { completion_tokens: 4 } },
      { step_id: 3, source: 'agent', message: 'Step budget exhausted; stopping.' },
      { step_id: 4, source: 'agent', message: 'Step budget exhausted; stopping.' },
    ],
  });
  assert.deepEqual(
    atifAgentSteps(t, 1).map((s) => s.step_id),
    [2, 4],
  );
  assert.deepEqual(
    atifAgentSteps(t, 0).map((s) => s.step_id),
    [2, 3, 4],
  );
});

test('evaluation rollouts compare call counts only', () => {
  const d = doc(chainOf([5, 6]), 'eval');
  assert.equal(d.rollout_type, 'eval');
  assert.deepEqual(codes(atifCheck(d, traj([99, 1, 2])).findings), ['WARN atif_calls_missing']);
  assert.deepEqual(codes(atifCheck(d, traj([99])).findings), ['INFO atif_extra_calls']);
  assert.equal(atifCheck(d, traj([99])).verdict, 'match');
});
