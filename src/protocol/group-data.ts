// What the group view shows (webview and `harness-lab report --batch DIR --group G`): the members of one
// GRPO group side by side, reward histograms, where two members first diverge, behaviour metrics.
// Built on the host from a batch directory (src/report/group-view.ts); pure data, no Node APIs.
import type { SampleAccount, SampleTotals } from '../capture/samples.js';
import type { BehaviourAggregate, RolloutBehaviour } from '../export/behaviour.js';

export const GROUP_VIEW_VERSION = 1;

export interface GroupMemberView {
  rollout_id: string;
  member: number;
  state: string;
  /** completed / policy_failure / infra_error / timeout; null while unfinished. */
  class: string | null;
  reward: number | null;
  /** In the group baseline (done and trainable). */
  kept: boolean;
  /** Why not kept (discarded_infra_error, unfinished, ...), and the runner's error text. */
  excluded: string | null;
  error: string | null;
  session_id: string | null;
  /** Model calls on the main agent path, and all calls. */
  turns: number;
  calls: number;
  tool_calls: number;
  prompt_tokens: number;
  sampled_tokens: number;
  behaviour: Omit<RolloutBehaviour, 'facts'> | null;
  /** Samples the trainer gets from this member and their tokens against the merged length; null without token ids. */
  samples: SampleAccount | null;
  /** The capture could not be read (the sandbox never reached the proxy, or a broken file). */
  capture_problem: string | null;
}

export interface StripToken {
  id: number;
  text: string;
  logprob: number | null;
}

/** Where members a and b first part: the first call on their main paths whose prompt or sampled tokens differ. */
export interface GroupDivergence {
  a: string;
  b: string;
  /** 0-based call on the main path; null when the two paths are identical (or one is a prefix: see `prefix_of`). */
  call: number | null;
  a_call_id: string | null;
  b_call_id: string | null;
  /** First differing prompt position at that call (the environment answered differently), or null when the prompts agree. */
  prompt_index: number | null;
  /** First differing sampled position at that call (the policy sampled differently), or null. */
  token_index: number | null;
  /** One path is a strict prefix of the other: the shorter rollout stopped at `call`. */
  prefix_of: string | null;
  /** Sampled tokens around token_index, aligned: strip[k] of a and b are at the same position. */
  window_start: number;
  a_tokens: StripToken[];
  b_tokens: StripToken[];
  reward_a: number | null;
  reward_b: number | null;
}

export interface RewardHistogram {
  /** Bin edges: bin k is [edges[k], edges[k+1]), the last bin closed. */
  edges: number[];
  counts: number[];
  n: number;
}

export interface GroupViewData {
  version: typeof GROUP_VIEW_VERSION;
  batch_id: string;
  group_id: string;
  task: string;
  harness: string;
  group_size: number;
  groups: { group_id: string; harness: string; task: string }[];
  members: GroupMemberView[];
  rewards: number[];
  mean: number | null;
  std: number | null;
  no_contrast: boolean;
  too_small: boolean;
  /** In the user's terms: why this group teaches nothing, or null. */
  teaches_nothing: string | null;
  /** Why it could not have contrast: the embedded engine's policy for its task is deterministic (set by the editor). */
  policy_note?: string | null;
  histogram: { batch: RewardHistogram; harnesses: Record<string, RewardHistogram>; group: RewardHistogram };
  divergences: GroupDivergence[];
  /** The pair shown first: the earliest divergence between members with different rewards, else the first pair. */
  focus_pair: number | null;
  behaviour: { group: BehaviourAggregate; harness: BehaviourAggregate; batch: BehaviourAggregate };
  /** Samples per rollout, tokens to the trainer against the merged length and unparsed tool calls, over kept members. */
  samples: { group: SampleTotals; harness: SampleTotals; batch: SampleTotals };
}

/** Equal-width bins over [min(0, lo), max(1, hi)]; rewards 0 and 1 land in the first and last bins. */
export function rewardHistogram(rewards: readonly number[], bins = 10): RewardHistogram {
  const lo = Math.min(0, ...rewards);
  const hi = Math.max(1, ...rewards);
  const width = (hi - lo) / bins;
  const edges = Array.from({ length: bins + 1 }, (_, k) => lo + k * width);
  const counts = new Array<number>(bins).fill(0);
  for (const r of rewards) counts[Math.min(bins - 1, Math.floor((r - lo) / width))]!++;
  return { edges, counts, n: rewards.length };
}

/** One rollout of a fork view (`replay --from N`): its rollout file, with its reward when recorded. */
export interface ForkMember {
  /** Shown as the member's id: `original`, or `fork@2 s1a2b3c4d`. */
  label: string;
  rolloutFile: string;
  reward: number | null;
  /** The run's status (`ok`, `errored`) from its rollout.json or replay.json, when known. */
  status?: string | null;
}
