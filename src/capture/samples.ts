// Samples per rollout and tokens sent to the trainer, against the length of one merged sample.
//
// Every root-to-leaf agent path of a rollout is one training sample (a veRL segment, a TRL row); a
// harness whose re-rendered history no longer extends what the model sampled splits a rollout into
// one sample per turn, and each of those carries the whole conversation again as its prompt. These
// numbers say how much that costs: what the trainer is sent, against what one sample holding every
// agent turn would need. The audit, `batch status` and the group view all report them from here.
import type { RolloutDocument } from './rollout.js';
import type { CallRecord } from './types.js';

export interface SampleAccount {
  /** Agent paths (not discarded): the samples an export writes for the rollout. */
  samples: number;
  /** Agent turns (graph nodes on some agent path). */
  agent_turns: number;
  /** Tokens of those samples, prompt and completion of each in full: what the trainer processes. */
  tokens_to_trainer: number;
  /** Sampled (mask 1) tokens over those samples; a prefix shared by branches counts in each. */
  sampled_tokens: number;
  /**
   * Tokens one sample holding every agent turn needs: the longest agent path, plus the sampled tokens
   * of agent turns off it. Exact when the rollout is one path; otherwise an upper bound (an off-path
   * turn's visible text is re-rendered in the longest path's prompt), so `tokens_to_trainer / merged_tokens`
   * understates the waste rather than inventing it.
   */
  merged_tokens: number;
  /** Tool calls the model wrote that did not parse (answered to the harness as text). */
  unparsed_tool_calls: number;
}

/**
 * Tool calls of one call that did not parse. The proxy's token-in mode parses the sampled ids itself
 * and records the outcome (`render.tool_call_parse`, one status per `<tool_call>` block, docs/token-in.md);
 * a block that fails answers the whole turn as text, as vLLM's hermes parser does, so every block of a
 * failed turn counts. A chat-mode call has no record (the engine's parser decided): 0 there.
 */
export function unparsedToolCalls(call: CallRecord): number {
  const render = call.render;
  if (render?.tool_call_parse !== 'failed') return 0;
  return Math.max(1, render.tool_call_statuses?.length ?? 0);
}

/** The account of one rollout; null below capture level `tokens` (no token ids, nothing to count). */
export function sampleAccount(doc: RolloutDocument): SampleAccount | null {
  if (doc.capture_level !== 'tokens') return null;
  const agent = doc.sequences.filter((s) => s.role === 'agent');
  const onPath = new Set(agent.flatMap((s) => s.node_ids));
  let longest = agent[0];
  for (const s of agent) if (s.input_ids.length > (longest?.input_ids.length ?? -1)) longest = s;
  const onLongest = new Set(longest?.node_ids ?? []);
  const sampledOf = new Map(doc.turns.map((t) => [t.node_id, t.n_sampled]));
  let offLongest = 0;
  for (const id of onPath) if (!onLongest.has(id)) offLongest += sampledOf.get(id) ?? 0;
  const callOf = new Map(doc.calls.map((c) => [c.call_id, c]));
  let unparsed = 0;
  for (const id of onPath) {
    const call = callOf.get(id);
    if (call) unparsed += unparsedToolCalls(call);
  }
  return {
    samples: agent.length,
    agent_turns: onPath.size,
    tokens_to_trainer: agent.reduce((a, s) => a + s.input_ids.length, 0),
    sampled_tokens: agent.reduce((a, s) => a + s.n_trainable, 0),
    merged_tokens: (longest?.input_ids.length ?? 0) + offLongest,
    unparsed_tool_calls: unparsed,
  };
}

/** Accounts summed over rollouts (a batch, a harness, a group). */
export interface SampleTotals {
  rollouts: number;
  samples: number;
  /** Mean samples per rollout; null without rollouts. */
  samples_per_rollout: number | null;
  /** Rollouts that are exactly one sample. */
  single_sample_rollouts: number;
  tokens_to_trainer: number;
  merged_tokens: number;
  /** tokens_to_trainer / merged_tokens: 1 when every rollout is one sample; null when nothing was counted. */
  token_ratio: number | null;
  unparsed_tool_calls: number;
}

export function sumAccounts(accounts: readonly SampleAccount[]): SampleTotals {
  const t = { samples: 0, single: 0, tokens: 0, merged: 0, unparsed: 0 };
  for (const a of accounts) {
    t.samples += a.samples;
    if (a.samples === 1) t.single++;
    t.tokens += a.tokens_to_trainer;
    t.merged += a.merged_tokens;
    t.unparsed += a.unparsed_tool_calls;
  }
  return {
    rollouts: accounts.length,
    samples: t.samples,
    samples_per_rollout: accounts.length ? t.samples / accounts.length : null,
    single_sample_rollouts: t.single,
    tokens_to_trainer: t.tokens,
    merged_tokens: t.merged,
    token_ratio: t.merged > 0 ? t.tokens / t.merged : null,
    unparsed_tool_calls: t.unparsed,
  };
}

/** "1.00 samples/rollout, 10,973 tokens to the trainer (1.00x the merged 10,973)" for the text reports. */
export function formatTotals(t: SampleTotals): string {
  if (t.rollouts === 0) return 'no rollout with token ids';
  const n = (x: number) => x.toLocaleString('en-US');
  const ratio = t.token_ratio === null ? '-' : `${t.token_ratio.toFixed(2)}x`;
  return (
    `${t.samples_per_rollout!.toFixed(2)} samples/rollout (${t.single_sample_rollouts}/${t.rollouts} one ` +
    `sample), ${n(t.tokens_to_trainer)} tokens to the trainer (${ratio} the merged ${n(t.merged_tokens)}), ` +
    `${t.unparsed_tool_calls} unparsed tool call(s)`
  );
}
