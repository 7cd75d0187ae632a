// The group view's data from a batch directory: one GRPO group's members side by side, the batch's
// reward histograms, where members first diverge, behaviour metrics (src/export/behaviour.ts).
import { existsSync } from 'node:fs';
import { batchPaths, readManifest, readRolloutStates, type RolloutState } from '../batch/state.js';
import { sampleAccount, sumAccounts, type SampleAccount } from '../capture/samples.js';
import type { CallRecord } from '../capture/types.js';
import { bytesToText } from '../protocol/viewer-data.js';
import {
  GROUP_VIEW_VERSION,
  rewardHistogram,
  type ForkMember,
  type GroupDivergence,
  type GroupMemberView,
  type GroupViewData,
  type StripToken,
} from '../protocol/group-data.js';
import { rolloutTrajectory } from '../export/audit.js';
import { aggregateBehaviour, mainPath, rolloutBehaviour, type RolloutBehaviour } from '../export/behaviour.js';
import type { StoredRollout } from '../capture/rollout-file.js';
import { sessionFileOf } from '../capture/store.js';
import { excludedReason, memberOutcome, readRollout } from '../export/source.js';

export class GroupViewError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'GroupViewError';
  }
}

/** Tokens shown before and after the first differing sampled token. */
const BEFORE = 16;
const AFTER = 48;

function firstDifference(a: readonly number[], b: readonly number[]): number | null {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? null : n;
}

function stripOf(c: CallRecord, from: number, to: number): StripToken[] {
  const ids = c.completion_token_ids ?? [];
  const out: StripToken[] = [];
  for (let i = from; i < Math.min(to, ids.length); i++) {
    const bytes = c.token_bytes?.[i];
    const text = bytes ? bytesToText(bytes) : (c.top_logprobs?.[i]?.find((t) => t.token_id === ids[i])?.token ?? `#${ids[i]}`);
    out.push({ id: ids[i]!, text, logprob: c.logprobs && c.logprobs.length === ids.length ? c.logprobs[i]! : null });
  }
  return out;
}

/** The first call where two main paths part, and the aligned token strips there. */
export function divergence(
  a: { id: string; reward: number | null; path: readonly CallRecord[] },
  b: { id: string; reward: number | null; path: readonly CallRecord[] },
): GroupDivergence {
  const base: GroupDivergence = {
    a: a.id,
    b: b.id,
    call: null,
    a_call_id: null,
    b_call_id: null,
    prompt_index: null,
    token_index: null,
    prefix_of: null,
    window_start: 0,
    a_tokens: [],
    b_tokens: [],
    reward_a: a.reward,
    reward_b: b.reward,
  };
  const n = Math.min(a.path.length, b.path.length);
  for (let k = 0; k < n; k++) {
    const ca = a.path[k]!;
    const cb = b.path[k]!;
    const p = firstDifference(ca.prompt_token_ids ?? [], cb.prompt_token_ids ?? []);
    const t = firstDifference(ca.completion_token_ids ?? [], cb.completion_token_ids ?? []);
    if (p === null && t === null) continue;
    const at = t ?? 0;
    const start = Math.max(0, at - BEFORE);
    return {
      ...base,
      call: k,
      a_call_id: ca.call_id,
      b_call_id: cb.call_id,
      prompt_index: p,
      token_index: t,
      window_start: start,
      a_tokens: stripOf(ca, start, at + AFTER),
      b_tokens: stripOf(cb, start, at + AFTER),
    };
  }
  if (a.path.length !== b.path.length) return { ...base, call: n, prefix_of: a.path.length < b.path.length ? b.id : a.id };
  return base;
}

interface Loaded {
  state: RolloutState;
  rollout: StoredRollout | null;
  problem: string | null;
  behaviour: RolloutBehaviour | null;
}

function load(dir: string, s: RolloutState): Loaded {
  if (!s.session_id) return { state: s, rollout: null, problem: 'no capture session', behaviour: null };
  const file = sessionFileOf(batchPaths(dir).capture, s.session_id);
  if (!existsSync(file)) return { state: s, rollout: null, problem: `no capture file ${file}`, behaviour: null };
  try {
    const rollout = readRollout(file);
    return { state: s, rollout, problem: null, behaviour: rolloutBehaviour(rollout.doc, rolloutTrajectory(dir, s)) };
  } catch (err) {
    return { state: s, rollout: null, problem: (err as Error).message, behaviour: null };
  }
}

const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);

export function buildGroupView(dir: string, groupId: string): GroupViewData {
  const manifest = readManifest(dir);
  const plan = manifest.groups.find((g) => g.group_id === groupId);
  if (!plan)
    throw new GroupViewError(
      `${batchPaths(dir).manifest}: no group '${groupId}'; groups: ${manifest.groups.map((g) => g.group_id).join(', ')}`,
    );
  const states = readRolloutStates(dir, manifest);
  const keptReward = (s: RolloutState) => (excludedReason(s) === null && s.reward !== null ? s.reward : null);
  const batchRewards = states.flatMap((s) => (keptReward(s) === null ? [] : [keptReward(s)!]));
  const harnessRewards: Record<string, number[]> = {};
  for (const s of states) if (keptReward(s) !== null) (harnessRewards[s.harness] ??= []).push(keptReward(s)!);

  // Behaviour needs every capture of the batch; read one session at a time and keep only the summary.
  const behaviours: { harness: string; group: string; b: RolloutBehaviour }[] = [];
  const accounts: { harness: string; group: string; a: SampleAccount }[] = [];
  const accountOf = new Map<string, SampleAccount | null>();
  const members: Loaded[] = [];
  for (const s of states) {
    const l = load(dir, s);
    if (l.behaviour) behaviours.push({ harness: s.harness, group: s.group_id, b: l.behaviour });
    const account = l.rollout ? sampleAccount(l.rollout.doc) : null;
    accountOf.set(s.rollout_id, account);
    if (account && excludedReason(s) === null) accounts.push({ harness: s.harness, group: s.group_id, a: account });
    if (s.group_id === groupId) members.push(l);
  }

  const views: GroupMemberView[] = members.map(({ state: s, rollout, problem, behaviour }) => {
    const calls = rollout?.calls ?? [];
    let facts: RolloutBehaviour['facts'] | undefined;
    let summary: GroupMemberView['behaviour'] = null;
    if (behaviour) ({ facts, ...summary } = behaviour);
    void facts;
    return {
      ...memberOutcome(s),
      error: s.error,
      session_id: s.session_id,
      turns: behaviour?.turns ?? 0,
      calls: calls.length || s.n_calls,
      tool_calls: behaviour?.tool_calls ?? 0,
      prompt_tokens: calls.reduce((a, c) => a + (c.prompt_token_ids?.length ?? 0), 0),
      sampled_tokens: calls.reduce((a, c) => a + (c.completion_token_ids?.length ?? 0), 0),
      behaviour: summary,
      samples: accountOf.get(s.rollout_id) ?? null,
      capture_problem: problem,
    };
  });

  const paths = members.map((m) => ({ id: m.state.rollout_id, reward: m.state.reward, path: m.rollout ? mainPath(m.rollout.doc) : [] }));
  const divergences: GroupDivergence[] = [];
  for (let i = 0; i < paths.length; i++)
    for (let j = i + 1; j < paths.length; j++)
      if (paths[i]!.path.length && paths[j]!.path.length) divergences.push(divergence(paths[i]!, paths[j]!));
  const contrasting = divergences
    .map((d, i) => ({ d, i }))
    .filter(({ d }) => d.reward_a !== null && d.reward_b !== null && d.reward_a !== d.reward_b && d.call !== null);
  const pick = (list: { d: GroupDivergence; i: number }[]) =>
    list.sort((x, y) => x.d.call! - y.d.call! || (x.d.token_index ?? 0) - (y.d.token_index ?? 0))[0]?.i;
  const focus =
    pick(contrasting) ?? pick(divergences.map((d, i) => ({ d, i })).filter(({ d }) => d.call !== null)) ?? (divergences.length ? 0 : null);

  const rewards = views.filter((m) => m.kept && m.reward !== null).map((m) => m.reward!);
  const m = mean(rewards);
  const sd = m === null || rewards.length < 2 ? null : Math.sqrt(rewards.reduce((a, x) => a + (x - m) * (x - m), 0) / (rewards.length - 1));
  const noContrast = rewards.length >= 2 && sd === 0;
  const tooSmall = rewards.length < 2;
  return {
    version: GROUP_VIEW_VERSION,
    batch_id: manifest.batch_id,
    group_id: plan.group_id,
    task: plan.task,
    harness: plan.harness,
    group_size: plan.rollout_ids.length,
    groups: manifest.groups.map((g) => ({ group_id: g.group_id, harness: g.harness, task: g.task })),
    members: views,
    rewards,
    mean: m,
    std: sd,
    no_contrast: noContrast,
    too_small: tooSmall,
    teaches_nothing: noContrast
      ? `every kept member has reward ${rewards[0]}: all advantages are 0, so this group teaches nothing`
      : tooSmall
        ? `only ${rewards.length} kept member(s): no group baseline, so this group teaches nothing`
        : null,
    histogram: {
      batch: rewardHistogram(batchRewards),
      harnesses: Object.fromEntries(Object.entries(harnessRewards).map(([h, rs]) => [h, rewardHistogram(rs)])),
      group: rewardHistogram(rewards),
    },
    divergences,
    focus_pair: focus,
    behaviour: {
      group: aggregateBehaviour(behaviours.filter((x) => x.group === groupId).map((x) => x.b)),
      harness: aggregateBehaviour(behaviours.filter((x) => x.harness === plan.harness).map((x) => x.b)),
      batch: aggregateBehaviour(behaviours.map((x) => x.b)),
    },
    samples: {
      group: sumAccounts(accounts.filter((x) => x.group === groupId).map((x) => x.a)),
      harness: sumAccounts(accounts.filter((x) => x.harness === plan.harness).map((x) => x.a)),
      batch: sumAccounts(accounts.map((x) => x.a)),
    },
  };
}

export type { ForkMember } from '../protocol/group-data.js';

/**
 * An original rollout and its forks (`harness-lab replay --from N`) side by side, in the group view's
 * shape: the forks share the original's first N calls, so their first divergence is where the live
 * engine's answer differs. Not a GRPO group: no batch, and the histograms are of these rollouts only.
 */
/** A single run's outcome class, as a batch classifies it: no reward or a failed run is an infra error. */
function forkMemberClass(m: ForkMember): string | null {
  if (m.status !== undefined && m.status !== null && m.status !== 'ok') return 'infra_error';
  if (m.reward === null) return m.status === 'ok' ? 'infra_error' : null;
  return m.reward > 0 ? 'completed' : 'policy_failure';
}

export function buildForkGroupView(original: ForkMember, forks: readonly ForkMember[]): GroupViewData {
  const all = [original, ...forks];
  const loaded = all.map((m) => {
    try {
      const rollout = readRollout(m.rolloutFile);
      return { m, rollout, problem: null as string | null, behaviour: rolloutBehaviour(rollout.doc) };
    } catch (err) {
      return { m, rollout: null, problem: (err as Error).message, behaviour: null };
    }
  });
  const views: GroupMemberView[] = loaded.map(({ m, rollout, problem, behaviour }, i) => {
    const calls = rollout?.calls ?? [];
    let summary: GroupMemberView['behaviour'] = null;
    if (behaviour) {
      const { facts: _facts, ...rest } = behaviour;
      summary = rest;
    }
    return {
      rollout_id: m.label,
      member: i,
      state: rollout ? 'done' : 'unreadable',
      class: forkMemberClass(m),
      reward: m.reward,
      kept: rollout !== null,
      excluded: rollout ? null : 'capture unreadable',
      error: null,
      session_id: rollout?.info.session_id ?? null,
      turns: behaviour?.turns ?? 0,
      calls: calls.length,
      tool_calls: behaviour?.tool_calls ?? 0,
      prompt_tokens: calls.reduce((a, c) => a + (c.prompt_token_ids?.length ?? 0), 0),
      sampled_tokens: calls.reduce((a, c) => a + (c.completion_token_ids?.length ?? 0), 0),
      behaviour: summary,
      samples: rollout ? sampleAccount(rollout.doc) : null,
      capture_problem: problem,
    };
  });
  // Every fork against the original (the comparison a fork is for), then forks against each other.
  const paths = loaded.map((l) => ({ id: l.m.label, reward: l.m.reward, path: l.rollout ? mainPath(l.rollout.doc) : [] }));
  const divergences: GroupDivergence[] = [];
  for (let i = 0; i < paths.length; i++)
    for (let j = i + 1; j < paths.length; j++)
      if (paths[i]!.path.length && paths[j]!.path.length) divergences.push(divergence(paths[i]!, paths[j]!));
  const rewards = views.filter((v) => v.reward !== null).map((v) => v.reward!);
  const m = mean(rewards);
  const sd = m === null || rewards.length < 2 ? null : Math.sqrt(rewards.reduce((a, x) => a + (x - m) * (x - m), 0) / (rewards.length - 1));
  const behaviours = loaded.flatMap((l) => (l.behaviour ? [l.behaviour] : []));
  const sessionId = views[0]?.session_id ?? original.label;
  const meta = loaded[0]?.rollout?.info.metadata ?? {};
  const task = typeof meta.task === 'string' ? meta.task : '';
  const harness = typeof meta.harness === 'string' ? meta.harness : '';
  const histogram = rewardHistogram(rewards);
  return {
    version: GROUP_VIEW_VERSION,
    batch_id: 'forks',
    group_id: `forks of ${sessionId}`,
    task,
    harness,
    group_size: all.length,
    groups: [{ group_id: `forks of ${sessionId}`, harness, task }],
    members: views,
    rewards,
    mean: m,
    std: sd,
    no_contrast: false,
    too_small: false,
    teaches_nothing: null,
    histogram: { batch: histogram, harnesses: harness ? { [harness]: histogram } : {}, group: histogram },
    divergences,
    focus_pair: divergences.length ? 0 : null,
    behaviour: { group: aggregateBehaviour(behaviours), harness: aggregateBehaviour(behaviours), batch: aggregateBehaviour(behaviours) },
    samples: (() => {
      const totals = sumAccounts(views.flatMap((v) => (v.samples ? [v.samples] : [])));
      return { group: totals, harness: totals, batch: totals };
    })(),
  };
}
