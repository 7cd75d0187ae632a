// Graded findings for captured turns, flattened sequences and whole rollouts (protocol 11.2).
// FATAL: the row is not trainable. WARN: trainable, but read it. INFO: recorded only.
// Findings travel as plain strings ("[FATAL] code: detail") so they survive JSON and logs unchanged.
import { allTokenIds } from './token-ids.js';
import type { CaptureLevel, ChatMessage } from './types.js';

export type Grade = 'FATAL' | 'WARN' | 'INFO';

export function finding(grade: Grade, code: string, detail: string): string {
  return `[${grade}] ${code}: ${detail}`;
}

export function isFatal(f: string): boolean {
  return f.startsWith('[FATAL]');
}

/** The code of a finding string ("[WARN] multiple_roots: ..." -> "multiple_roots"). */
export function findingCode(f: string): string {
  const m = /^\[[A-Z]+\] ([^:]+):/.exec(f);
  return m?.[1] ?? '';
}

export interface TurnInput {
  index: number;
  prompt_token_ids: readonly unknown[] | null;
  completion_token_ids: readonly unknown[] | null;
  logprobs: readonly unknown[] | null;
  finish_reason: string | null;
  /** The assistant message the engine returned (only read below the `tokens` level). */
  response_message?: ChatMessage | null;
}

// typeof excludes booleans, which Python-side producers have been seen to emit as logprobs.
const validLogprob = (lp: unknown): boolean => typeof lp === 'number' && Number.isFinite(lp);

/**
 * Per-turn ingest checks. At `tokens` level they decide whether the turn may be trained on; below
 * it, missing ids are the expected state, so only an unusable (empty) answer is worth a warning.
 */
export function checkTurn(turn: TurnInput, level: CaptureLevel): string[] {
  const out: string[] = [];
  const tag = `turn ${turn.index}`;
  const prompt = turn.prompt_token_ids ?? [];
  const sampled = turn.completion_token_ids ?? [];
  if (level !== 'tokens') {
    const msg = turn.response_message;
    const text =
      typeof msg?.content === 'string' ? msg.content : Array.isArray(msg?.content) ? msg.content.map((p) => p.text ?? '').join('') : '';
    if (!text.trim() && !(msg?.tool_calls && msg.tool_calls.length > 0)) {
      out.push(
        finding(
          'WARN',
          'empty_completion',
          `${tag}: no text and no tool call (finish=${turn.finish_reason}); check for a content filter or a length cap`,
        ),
      );
    }
    if (turn.finish_reason === 'length') out.push(finding('INFO', 'truncated_turn', `${tag}: stopped on the output-token cap`));
    return out;
  }
  if (!allTokenIds(prompt)) out.push(finding('FATAL', 'invalid_token_id', `${tag}: prompt ids must be non-negative integers`));
  if (!allTokenIds(sampled)) out.push(finding('FATAL', 'invalid_token_id', `${tag}: sampled ids must be non-negative integers`));
  const lps = turn.logprobs;
  if (lps) {
    if (!lps.every(validLogprob)) out.push(finding('FATAL', 'invalid_logprob', `${tag}: logprobs must be finite numbers`));
    else if (lps.some((lp) => (lp as number) > 0)) out.push(finding('FATAL', 'positive_logprob', `${tag}: logprobs must not be positive`));
  }
  if (prompt.length === 0) {
    out.push(
      finding('FATAL', 'no_prompt_ids', `${tag}: the engine returned no prompt_token_ids (serve vLLM with --return-tokens-as-token-ids)`),
    );
  }
  if (sampled.length === 0) out.push(finding('WARN', 'no_sampled_ids', `${tag}: no completion token ids (finish=${turn.finish_reason})`));
  if (!lps && sampled.length > 0) {
    out.push(
      finding('FATAL', 'no_logprobs', `${tag}: ${sampled.length} sampled tokens without behaviour logprobs; the turn can only be context`),
    );
  }
  if (lps && lps.length !== sampled.length) {
    out.push(
      finding('FATAL', 'logprob_misalign', `${tag}: ${lps.length} logprobs vs ${sampled.length} sampled ids; the turn can only be context`),
    );
  }
  if (turn.finish_reason === 'length') {
    out.push(
      finding(
        'WARN',
        'truncated_turn',
        `${tag}: stopped on the output-token cap (${sampled.length} tokens); its ending is an artefact of the cap`,
      ),
    );
  }
  return out;
}

export interface SequenceArrays {
  input_ids: readonly number[];
  loss_mask: readonly number[];
  logprobs: readonly number[];
  prompt_len: number;
}

/** The invariants a trainer assumes and never re-checks. Run on every flattened path at `tokens` level. */
export function checkSequence(seq: SequenceArrays): string[] {
  const out: string[] = [];
  const n = seq.input_ids.length;
  if (seq.loss_mask.length !== n || seq.logprobs.length !== n) {
    out.push(finding('FATAL', 'length_mismatch', `input_ids=${n} loss_mask=${seq.loss_mask.length} logprobs=${seq.logprobs.length}`));
    return out; // every later check would index past an end
  }
  if (!seq.loss_mask.every((m) => m === 0 || m === 1)) {
    out.push(finding('FATAL', 'invalid_training_sequence', 'loss_mask values must be the integers 0 or 1'));
    return out;
  }
  if (seq.loss_mask.slice(0, seq.prompt_len).some((m) => m !== 0)) {
    out.push(finding('FATAL', 'invalid_training_sequence', `prompt positions (first ${seq.prompt_len}) must be mask 0`));
    return out;
  }
  let trainable = 0;
  let maskedWithLp = 0;
  let certain = 0;
  let positive = 0;
  for (let i = 0; i < n; i++) {
    const lp = seq.logprobs[i]!;
    if (seq.loss_mask[i] === 1) {
      trainable++;
      if (lp === 0) certain++;
    } else if (lp !== 0) maskedWithLp++;
    if (!(lp <= 0)) positive++; // also catches NaN
  }
  if (trainable === 0) out.push(finding('FATAL', 'nothing_trainable', `0 trainable tokens in a ${n}-token sequence`));
  if (maskedWithLp) out.push(finding('FATAL', 'masked_has_logprob', `${maskedWithLp} context positions carry a non-zero logprob`));
  if (seq.prompt_len >= n) out.push(finding('FATAL', 'empty_response', `prompt_len=${seq.prompt_len} covers the whole sequence`));
  if (positive) out.push(finding('FATAL', 'positive_logprob', `${positive} logprobs are positive or not numbers`));
  // Probability-1 tokens are normal for structural tool-call tokens; a sudden change in the rate is the signal.
  if (certain) out.push(finding('INFO', 'certain_tokens', `${certain}/${trainable} trainable tokens have logprob 0.0 (p=1.0)`));
  return out;
}

export interface RolloutShape {
  n_turns: number;
  n_roots: number;
  n_forks: number;
  n_discarded: number;
}

/** Structure checks over the whole graph. */
export function checkRollout(shape: RolloutShape, opts: { captureLevel: CaptureLevel; budgetStopCount: number }): string[] {
  const out: string[] = [];
  const { n_turns, n_roots } = shape;
  if (n_turns === 0) {
    out.push(
      finding(
        'FATAL',
        'no_turns',
        'the proxy saw no model calls: the agent never reached it (wrong base URL, unresolved model, or rejected auth)',
      ),
    );
    return out;
  }
  if (n_roots === n_turns && n_turns > 1) {
    if (opts.captureLevel === 'tokens') {
      out.push(
        finding(
          'WARN',
          'per_turn_capture_only',
          `every turn is its own root (${n_turns}): the harness re-renders its prompt instead of appending, so rows are single-turn`,
        ),
      );
    } else {
      out.push(
        finding('INFO', 'per_turn_trace_only', `every turn is its own root (${n_turns}): message lists do not extend each other exactly`),
      );
    }
  } else if (n_roots > 1) {
    out.push(
      finding('WARN', 'multiple_roots', `${n_roots} roots across ${n_turns} turns (subagents, auxiliary calls, or a rewritten history)`),
    );
  }
  if (n_turns === 1 && opts.budgetStopCount <= 0) {
    out.push(
      finding(
        'FATAL',
        'degenerate_rollout',
        'exactly 1 model call for the whole task: the agent stopped after its first response; read the agent log for the cause',
      ),
    );
  }
  if (opts.budgetStopCount > 0)
    out.push(finding('INFO', 'budget_stop', `${opts.budgetStopCount} call(s) were answered with the budget stop and not recorded`));
  if (shape.n_discarded)
    out.push(
      finding(
        'WARN',
        'discarded_turns',
        `${shape.n_discarded} sampled turn(s) led nowhere (retries or resamples); they are excluded from training`,
      ),
    );
  if (shape.n_forks) out.push(finding('INFO', 'forks', `${shape.n_forks} fork point(s) in the graph`));
  return out;
}
