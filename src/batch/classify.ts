// The one place that turns what an attempt did (AttemptFacts from any backend) and what the capture
// saw into exactly one class per rollout (docs/trainer-contracts.md §7). Docker and k8s
// rollouts are judged by this function alone, so a failed sandbox never reaches a trainer as a
// wrong answer, and an unknown reward is null, never 0.
import type { AttemptFacts } from './backend.js';
import { infraCause, type InfraCause } from './infra-cause.js';
import type { RolloutClass } from './state.js';

export interface CaptureFacts {
  nCalls: number;
  /** Token ids, logprobs and mask aligned on every answered call. */
  trainable: boolean;
  findings: string[];
}

export interface Verdict {
  state: 'done' | 'discarded';
  class: RolloutClass;
  reward: number | null;
  rewards: Record<string, number>;
  trainable: boolean;
  /** Why it was discarded (or what the policy got wrong), in the user's terms; null for a clean completion. */
  error: string | null;
  /** For infra_error: what failed, as a class (batch status, /metrics and the breaker count these). */
  cause?: InfraCause | null;
}

/** A harness killed by a signal (exit 128+N: SIGKILL 137, SIGSEGV 139, ...) crashed; the policy did not cause it. */
const SIGNAL_EXIT = 128;

function discard(cls: RolloutClass, error: string, cause: InfraCause | null = null): Verdict {
  return { state: 'discarded', class: cls, reward: null, rewards: {}, trainable: false, error, ...(cause ? { cause } : {}) };
}

function fatalFinding(capture: CaptureFacts): string | undefined {
  return capture.findings.find((f) => f.startsWith('[FATAL'));
}

/**
 * Classes, in order of precedence:
 *  infra_error  the backend saw a sandbox failure; the harness died by a signal; the verifier never
 *               ran, timed out or wrote no reward; the proxy saw no calls; the capture is misaligned.
 *  timeout      the agent passed its deadline: discarded, unless onTimeout is 'keep', when the tokens
 *               and the verifier's reward are kept if both are usable (TRL's worker does this).
 *  completed    the verifier gave a reward > 0.
 *  policy_failure  the verifier gave 0 (or less), tokens aligned: trainable with that reward.
 * A cancelled attempt has no class: the runner re-queues it and never calls this.
 */
export function classify(facts: AttemptFacts, capture: CaptureFacts, onTimeout: 'discard' | 'keep'): Verdict {
  if (facts.cancelled) throw new Error('a cancelled attempt has no class; re-queue the rollout instead');
  if (facts.infraError) return discard('infra_error', facts.infraError, infraCause(facts.infraError, Boolean(facts.setupFailure)));
  const { agent, verifier, reward } = facts;
  if (agent.timedOut) {
    if (onTimeout === 'discard')
      return discard(
        'timeout',
        `the agent did not finish within its deadline (${Math.round(agent.ms / 1000)} s); discarded (--on-timeout discard)`,
      );
    const unusable =
      verifier === null
        ? 'the verifier did not run after the timeout'
        : verifier.timedOut
          ? 'the verifier timed out after the agent did'
          : reward === null
            ? 'the verifier wrote no reward after the timeout'
            : capture.nCalls === 0
              ? 'the proxy saw no model calls before the timeout'
              : !capture.trainable
                ? `the capture is not trainable (${fatalFinding(capture) ?? 'misaligned tokens'})`
                : null;
    if (unusable) return discard('timeout', `the agent timed out and ${unusable}; discarded`);
    return {
      state: 'done',
      class: 'timeout',
      reward: reward!.value,
      rewards: reward!.scores,
      trainable: true,
      error: 'the agent timed out; tokens and the verifier reward kept (--on-timeout keep)',
    };
  }
  // An unknown exit status (null) is not evidence of a crash: a sandbox that went away is the backend's infraError.
  if (agent.exitCode !== null && agent.exitCode >= SIGNAL_EXIT)
    return discard(
      'infra_error',
      `the harness was killed by signal ${agent.exitCode - SIGNAL_EXIT} (exit ${agent.exitCode})`,
      'harness_crash',
    );
  if (verifier === null) return discard('infra_error', 'the verifier never ran', 'verifier');
  if (verifier.timedOut) return discard('infra_error', 'the verifier did not finish within its deadline', 'verifier');
  if (reward === null) return discard('infra_error', `the verifier wrote no reward (exit ${verifier.exitCode ?? 'unknown'})`, 'verifier');
  if (capture.nCalls === 0) return discard('infra_error', 'the proxy saw no model calls from the harness', 'no_model_calls');
  if (!capture.trainable)
    return discard(
      'infra_error',
      `the capture is not trainable: ${fatalFinding(capture) ?? 'token ids, logprobs or mask misaligned'}`,
      'capture',
    );
  if (reward.value > 0)
    return { state: 'done', class: 'completed', reward: reward.value, rewards: reward.scores, trainable: true, error: null };
  const why =
    agent.exitCode !== 0 && agent.exitCode !== null
      ? `the harness exited ${agent.exitCode} and the verifier gave ${reward.value}`
      : `the verifier gave ${reward.value}`;
  return { state: 'done', class: 'policy_failure', reward: reward.value, rewards: reward.scores, trainable: true, error: why };
}
