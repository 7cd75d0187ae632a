// GRPO audit of a batch: would this batch teach anything, and is it fresh enough to train on?
// Per group: rewards, mean, std, members kept and discarded; groups with no contrast; the share of the
// batch that carries no signal; rollouts per harness; policy-version staleness per call; tool calls per
// rollout. `--fail-on` turns the shares into an exit code so it can gate a training step.
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { parseAtif, type AtifTrajectory } from '../harness/atif.js';
import { aggregateBehaviour, rolloutBehaviour, type BehaviourAggregate, type RolloutBehaviour } from './behaviour.js';
import { batchPaths, readManifest, readRolloutStates, type RolloutState } from '../batch/state.js';
import type { CallRecord } from '../capture/types.js';
import { ExportContractError } from './contract.js';
import { assertTrainingCapture } from './rows.js';
import { callPolicyVersion, sessionPolicyVersion, sortVersions, versionOrdinal } from './policy-version.js';
import type { StoredRollout } from '../capture/rollout-file.js';
import { formatTotals, sampleAccount, sumAccounts, type SampleAccount, type SampleTotals } from '../capture/samples.js';
import { sessionFileOf } from '../capture/store.js';
import { excludedReason, memberOutcome, readRollout } from './source.js';

/** TRL's async GRPO default (`max_staleness=4`). */
export const DEFAULT_MAX_STALENESS = 4;

export interface AuditMember {
  rollout_id: string;
  member: number;
  state: RolloutState['state'];
  class: RolloutState['class'];
  reward: number | null;
  kept: boolean;
  /** Why it is not kept (discarded_infra_error, unfinished, ...). */
  excluded: string | null;
  session_id: string | null;
  n_calls: number;
  tool_calls: number | null;
  /** Behaviour metrics (docs/behaviour-metrics.md), without the per-call facts; null when the capture is unreadable. */
  behaviour: Omit<RolloutBehaviour, 'facts'> | null;
  /** Samples and tokens to the trainer (samples.ts); null when the capture is unreadable or has no token ids. */
  samples: SampleAccount | null;
}

export interface GroupAudit {
  group_id: string;
  task: string;
  harness: string;
  expected: number;
  kept: number;
  discarded: number;
  /** Rewards of the kept members, in member order. */
  rewards: number[];
  mean: number | null;
  /** Sample standard deviation of the kept rewards (n - 1), as the trainers compute it; null below two. */
  std: number | null;
  /** Two or more kept members, all with the same reward: every advantage is 0. */
  no_contrast: boolean;
  /** Fewer than two kept members: no group baseline. */
  too_small: boolean;
  members: AuditMember[];
}

export interface StaleCall {
  rollout_id: string;
  session_id: string;
  call_id: string;
  index: number;
  version: string;
  behind: number;
}

/** A kept rollout whose capture breaks the contract an export relies on (contract.ts): the export would stop on it. */
export interface ContractFailure {
  rollout_id: string;
  group_id: string;
  session_id: string;
  /** The session file the call is stored in. */
  file: string;
  /** Null when the whole capture is unusable (an evaluation capture). */
  call_id: string | null;
  index: number | null;
  problem: string;
}

export interface AuditReport {
  batch_id: string;
  dir: string;
  group_size: number;
  groups: GroupAudit[];
  summary: {
    rollouts: number;
    kept: number;
    discarded: number;
    unfinished: number;
    groups: number;
    groups_no_contrast: string[];
    groups_too_small: string[];
    /** Rollouts in no-contrast groups / all planned rollouts. */
    no_contrast_share: number;
    /** Rollouts that give no gradient (excluded, in no-contrast or too-small groups) / all planned rollouts. */
    no_signal_share: number;
    discarded_share: number;
    stale_share: number;
  };
  harnesses: Record<string, { rollouts: number; kept: number; discarded: number; mean_reward: number | null }>;
  policy: {
    newest: string | null;
    max_staleness: number;
    versions: Record<string, number>;
    calls: number;
    stale_calls: number;
    /** Calls with no version at all, or one without an ordinal: never counted stale. */
    unversioned_calls: number;
    stale: StaleCall[];
  };
  tool_calls: { per_rollout: Record<string, number>; mean: number | null; min: number | null; max: number | null };
  /** Behaviour metrics aggregated over every rollout with a readable capture, for the batch and per harness. */
  behaviour: { batch: BehaviourAggregate; harnesses: Record<string, BehaviourAggregate> };
  /** The capture contract of the kept rollouts (the first broken call of each): an export stops on any of these. */
  contract: { checked_rollouts: number; failures: ContractFailure[] };
  /**
   * Samples per rollout and tokens to the trainer against the merged length, over the kept rollouts with
   * token ids, for the batch and per harness; unparsed tool calls counted per harness.
   */
  samples: { batch: SampleTotals; harnesses: Record<string, SampleTotals> };
}

export const FAIL_ON_KEYS = ['no-contrast-share', 'no-signal-share', 'discarded-share', 'stale-share'] as const;
export type FailOnKey = (typeof FAIL_ON_KEYS)[number];

export function parseFailOn(text: string): Partial<Record<FailOnKey, number>> {
  const out: Partial<Record<FailOnKey, number>> = {};
  for (const part of text
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean)) {
    const [key, value] = part.split('=', 2) as [string, string | undefined];
    if (!(FAIL_ON_KEYS as readonly string[]).includes(key))
      throw new Error(`--fail-on: unknown key '${key}'; keys: ${FAIL_ON_KEYS.join(', ')}`);
    const n = Number(value);
    if (value === undefined || value.trim() === '' || !Number.isFinite(n) || n < 0 || n > 1)
      throw new Error(`--fail-on: ${key} needs a share between 0 and 1, e.g. ${key}=0.25 (got '${value ?? ''}')`);
    out[key as FailOnKey] = n;
  }
  return out;
}

/** The thresholds the report exceeds (value > threshold), in the user's terms. */
export function failures(report: AuditReport, failOn: Partial<Record<FailOnKey, number>>): string[] {
  const value: Record<FailOnKey, number> = {
    'no-contrast-share': report.summary.no_contrast_share,
    'no-signal-share': report.summary.no_signal_share,
    'discarded-share': report.summary.discarded_share,
    'stale-share': report.summary.stale_share,
  };
  return (Object.entries(failOn) as [FailOnKey, number][])
    .filter(([k, t]) => value[k] > t)
    .map(([k, t]) => `${k} ${value[k].toFixed(3)} > ${t}`);
}

function toolCallsOf(calls: readonly CallRecord[]): number {
  let n = 0;
  for (const c of calls) n += c.engine_response?.choices?.[0]?.message?.tool_calls?.length ?? 0;
  return n;
}

const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);
/** Sample standard deviation (Bessel-corrected), as TRL's nanstd and veRL's torch.std compute it; null below two values. */
const std = (xs: number[]) => {
  const m = mean(xs);
  return m === null || xs.length < 2 ? null : Math.sqrt(xs.reduce((a, x) => a + (x - m) * (x - m), 0) / (xs.length - 1));
};

export function auditBatch(dir: string, opts: { maxStaleness?: number } = {}): AuditReport {
  const maxStaleness = opts.maxStaleness ?? DEFAULT_MAX_STALENESS;
  const manifest = readManifest(dir);
  const states = new Map(readRolloutStates(dir, manifest).map((s) => [s.rollout_id, s]));
  const capture = batchPaths(dir).capture;
  const perCall: { rollout_id: string; session_id: string; call: CallRecord; version: string | null }[] = [];
  const toolCalls: Record<string, number> = {};
  const harnesses: AuditReport['harnesses'] = {};
  const harnessRewards: Record<string, number[]> = {};
  const behaviours: Record<string, RolloutBehaviour[]> = {};
  const accounts: Record<string, SampleAccount[]> = {};
  const contractFailures: ContractFailure[] = [];
  let contractChecked = 0;
  let kept = 0;
  let discarded = 0;
  let unfinished = 0;

  const groups: GroupAudit[] = manifest.groups.map((g) => {
    const members: AuditMember[] = g.rollout_ids.map((id) => {
      const s = states.get(id)!;
      const why = excludedReason(s);
      let nCalls = s.n_calls;
      let tools: number | null = null;
      let behaviour: AuditMember['behaviour'] = null;
      let samples: SampleAccount | null = null;
      const r = s.session_id ? sessionOf(sessionFileOf(capture, s.session_id), why === null) : null;
      if (r) {
        nCalls = r.calls.length;
        tools = toolCallsOf(r.calls);
        toolCalls[id] = tools;
        const full = rolloutBehaviour(r.doc, rolloutTrajectory(dir, s));
        (behaviours[s.harness] ??= []).push(full);
        const { facts: _facts, ...summary } = full;
        behaviour = summary;
        samples = sampleAccount(r.doc);
        if (why === null && samples) (accounts[s.harness] ??= []).push(samples);
        if (why === null) {
          contractChecked++;
          // The export's own check (rows.ts): the first broken agent call, which would stop an export.
          try {
            assertTrainingCapture(r);
          } catch (err) {
            if (!(err instanceof ExportContractError)) throw err;
            const index = err.callId === null ? null : (r.calls.find((c) => c.call_id === err.callId)?.index ?? null);
            contractFailures.push({
              rollout_id: id,
              group_id: g.group_id,
              session_id: err.sessionId,
              file: err.file,
              call_id: err.callId,
              index,
              problem: err.problem,
            });
          }
          const session = sessionPolicyVersion(r.info.metadata);
          for (const call of r.calls)
            perCall.push({
              rollout_id: id,
              session_id: s.session_id!,
              call,
              version: callPolicyVersion(call, { session, rollout: s.policy_version, batch: manifest.policy_version }).version,
            });
        }
      }
      const h = (harnesses[s.harness] ??= { rollouts: 0, kept: 0, discarded: 0, mean_reward: null });
      h.rollouts++;
      if (why === null) {
        kept++;
        h.kept++;
        if (s.reward !== null) (harnessRewards[s.harness] ??= []).push(s.reward);
      } else if (s.state === 'discarded' || s.state === 'done') {
        discarded++;
        h.discarded++;
      } else unfinished++;
      return {
        ...memberOutcome(s),
        session_id: s.session_id,
        n_calls: nCalls,
        tool_calls: tools,
        behaviour,
        samples,
      };
    });
    const rewards = members.filter((m) => m.kept && m.reward !== null).map((m) => m.reward!);
    const keptN = members.filter((m) => m.kept).length;
    const sd = std(rewards);
    return {
      group_id: g.group_id,
      task: g.task,
      harness: g.harness,
      expected: g.rollout_ids.length,
      kept: keptN,
      discarded: members.length - keptN,
      rewards,
      mean: mean(rewards),
      std: sd,
      no_contrast: rewards.length >= 2 && sd === 0,
      too_small: rewards.length < 2,
      members,
    };
  });
  for (const [name, rs] of Object.entries(harnessRewards)) harnesses[name]!.mean_reward = mean(rs);

  const total = groups.reduce((a, g) => a + g.expected, 0);
  const inNoContrast = groups.filter((g) => g.no_contrast).reduce((a, g) => a + g.kept, 0);
  const inTooSmall = groups.filter((g) => g.too_small).reduce((a, g) => a + g.kept, 0);

  const versions: Record<string, number> = {};
  for (const c of perCall) versions[c.version ?? 'unknown'] = (versions[c.version ?? 'unknown'] ?? 0) + 1;
  const ordered = sortVersions([
    ...Object.keys(versions).filter((v) => v !== 'unknown'),
    ...(manifest.policy_version ? [manifest.policy_version] : []),
  ]);
  const newest = [...ordered].reverse().find((v) => versionOrdinal(v) !== null) ?? null;
  const newestN = newest === null ? null : versionOrdinal(newest)!;
  const stale: StaleCall[] = [];
  let unversioned = 0;
  for (const c of perCall) {
    const n = c.version === null ? null : versionOrdinal(c.version);
    if (n === null || newestN === null) {
      unversioned++;
      continue;
    }
    if (newestN - n > maxStaleness)
      stale.push({
        rollout_id: c.rollout_id,
        session_id: c.session_id,
        call_id: c.call.call_id,
        index: c.call.index,
        version: c.version!,
        behind: newestN - n,
      });
  }
  const tc = Object.values(toolCalls);
  return {
    batch_id: manifest.batch_id,
    dir,
    group_size: manifest.group_size,
    groups,
    summary: {
      rollouts: total,
      kept,
      discarded,
      unfinished,
      groups: groups.length,
      groups_no_contrast: groups.filter((g) => g.no_contrast).map((g) => g.group_id),
      groups_too_small: groups.filter((g) => g.too_small).map((g) => g.group_id),
      no_contrast_share: total ? inNoContrast / total : 0,
      no_signal_share: total ? (total - kept + inNoContrast + inTooSmall) / total : 0,
      discarded_share: total ? discarded / total : 0,
      stale_share: perCall.length ? stale.length / perCall.length : 0,
    },
    harnesses,
    policy: {
      newest,
      max_staleness: maxStaleness,
      versions,
      calls: perCall.length,
      stale_calls: stale.length,
      unversioned_calls: unversioned,
      stale,
    },
    tool_calls: {
      per_rollout: toolCalls,
      mean: mean(tc),
      min: tc.length ? Math.min(...tc) : null,
      max: tc.length ? Math.max(...tc) : null,
    },
    behaviour: {
      batch: aggregateBehaviour(Object.values(behaviours).flat()),
      harnesses: Object.fromEntries(Object.entries(behaviours).map(([h, list]) => [h, aggregateBehaviour(list)])),
    },
    contract: { checked_rollouts: contractChecked, failures: contractFailures },
    samples: {
      batch: sumAccounts(Object.values(accounts).flat()),
      harnesses: Object.fromEntries(Object.entries(accounts).map(([h, list]) => [h, sumAccounts(list)])),
    },
  };
}

/**
 * The harness's ATIF trajectory of the attempt that counts (`attempts/<id>/<attempt>/agent/trajectory.json`,
 * as the rollout runner writes it), or null when absent or not valid ATIF (the metrics then use the
 * captured calls alone).
 */
export function rolloutTrajectory(dir: string, s: RolloutState): AtifTrajectory | null {
  const attempt = s.attempts[s.attempts.length - 1];
  if (!attempt) return null;
  const file = join(dir, attempt.out_dir, 'agent', 'trajectory.json');
  if (!existsSync(file)) return null;
  try {
    return parseAtif(readFileSync(file, 'utf8'), file);
  } catch {
    return null;
  }
}

/**
 * A kept rollout's session must be readable (its error propagates); an excluded one is only read for
 * its tool calls and may be missing (the sandbox never reached the proxy) or broken.
 */
function sessionOf(file: string, required: boolean): StoredRollout | null {
  if (required) return readRollout(file);
  try {
    return statSync(file).isFile() ? readRollout(file) : null;
  } catch {
    return null;
  }
}

const fmt = (x: number | null, d = 3) => (x === null ? '-' : x.toFixed(d));

export function formatAudit(r: AuditReport): string {
  const lines: string[] = [];
  lines.push(
    `batch ${r.batch_id}: ${r.summary.rollouts} rollouts in ${r.summary.groups} groups of ${r.group_size}; ` +
      `kept ${r.summary.kept}, discarded ${r.summary.discarded}, unfinished ${r.summary.unfinished}`,
  );
  lines.push('');
  lines.push('group                 harness          kept/n  rewards                  mean    std     note');
  for (const g of r.groups) {
    const note = g.no_contrast ? 'NO CONTRAST' : g.too_small ? 'TOO SMALL' : '';
    const excluded = g.members.filter((m) => !m.kept).map((m) => `${m.rollout_id}:${m.excluded}`);
    lines.push(
      `${g.group_id.padEnd(21)} ${g.harness.padEnd(16)} ${`${g.kept}/${g.expected}`.padEnd(7)} ${`[${g.rewards.map((x) => +x.toFixed(3)).join(', ')}]`.padEnd(24)} ` +
        `${fmt(g.mean).padEnd(7)} ${fmt(g.std).padEnd(7)} ${note}${excluded.length ? ` excluded ${excluded.join(' ')}` : ''}`,
    );
  }
  lines.push('');
  lines.push(
    `no contrast: ${r.summary.groups_no_contrast.length} group(s)${r.summary.groups_no_contrast.length ? ` (${r.summary.groups_no_contrast.join(', ')})` : ''}; ` +
      `too small: ${r.summary.groups_too_small.length}`,
  );
  lines.push(
    `shares: no-contrast ${fmt(r.summary.no_contrast_share)}, no-signal ${fmt(r.summary.no_signal_share)}, discarded ${fmt(r.summary.discarded_share)}, stale ${fmt(r.summary.stale_share)}`,
  );
  lines.push(
    `harnesses: ${Object.entries(r.harnesses)
      .map(([h, x]) => `${h} ${x.kept}/${x.rollouts} kept, mean reward ${fmt(x.mean_reward)}`)
      .join('; ')}`,
  );
  lines.push(
    `policy versions: newest ${r.policy.newest ?? 'unknown'}, calls by version ${JSON.stringify(r.policy.versions)}; ` +
      `${r.policy.stale_calls}/${r.policy.calls} call(s) more than ${r.policy.max_staleness} behind, ${r.policy.unversioned_calls} ` +
      `without an ordered version`,
  );
  for (const s of r.policy.stale.slice(0, 20))
    lines.push(
      `  stale: rollout ${s.rollout_id} session ${s.session_id} call ${s.call_id} (index ${s.index}) version ${s.version}, ${s.behind} behind`,
    );
  if (r.policy.stale.length > 20) lines.push(`  ... ${r.policy.stale.length - 20} more (--json lists all)`);
  const broken = r.contract.failures;
  lines.push(
    'capture contract: ' +
      (broken.length
        ? `${broken.length} of ${r.contract.checked_rollouts} kept rollout(s) break it; an export stops on them`
        : `every kept rollout (${r.contract.checked_rollouts}) holds it`),
  );
  for (const f of broken)
    lines.push(
      `  broken: rollout ${f.rollout_id} ${f.file}: session ${f.session_id}${f.call_id ? `, call ${f.call_id}` : ''}: ${f.problem}`,
    );
  lines.push(`tool calls per rollout: mean ${fmt(r.tool_calls.mean, 2)}, min ${r.tool_calls.min ?? '-'}, max ${r.tool_calls.max ?? '-'}`);
  lines.push(`samples (kept rollouts): ${formatTotals(r.samples.batch)}`);
  for (const [h, t] of Object.entries(r.samples.harnesses)) lines.push(`  ${h}: ${formatTotals(t)}`);
  lines.push('');
  lines.push('behaviour (docs/behaviour-metrics.md)  rollouts  tool calls  failed  recovery  self-verify  coverage  first success');
  const row = (name: string, b: BehaviourAggregate) =>
    `${name.padEnd(38)} ${String(b.rollouts).padEnd(9)} ${fmt(b.mean_tool_calls, 2).padEnd(11)} ${fmt(b.mean_failed_tool_calls, 2).padEnd(7)} ` +
    `${fmt(b.error_recovery, 2).padEnd(9)} ${fmt(b.self_verification, 2).padEnd(12)} ${fmt(b.mean_tool_coverage, 2).padEnd(9)} ` +
    `${fmt(b.mean_turns_to_first_success, 2)}`;
  for (const [h, b] of Object.entries(r.behaviour.harnesses)) lines.push(row(h, b));
  lines.push(row('(batch)', r.behaviour.batch));
  return `${lines.join('\n')}\n`;
}
