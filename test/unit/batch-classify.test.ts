// classify(): every combination of attempt facts and capture facts gets exactly one class, a
// discarded rollout always has reward null, and the named cases land where section 7 says.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { AttemptFacts } from '../../src/batch/backend.js';
import { classify, type CaptureFacts } from '../../src/batch/classify.js';
import { ROLLOUT_CLASSES, RolloutStateSchema } from '../../src/batch/state.js';

function facts(over: Partial<AttemptFacts> = {}): AttemptFacts {
  return {
    backendRef: 'c1',
    agent: { exitCode: 0, timedOut: false, ms: 2000 },
    verifier: { exitCode: 0, timedOut: false, ms: 300 },
    reward: { value: 1, scores: { reward: 1 } },
    infraError: null,
    cancelled: false,
    ...over,
  };
}
const good: CaptureFacts = { nCalls: 3, trainable: true, findings: [] };

test('the named cases of section 7', () => {
  assert.deepEqual(classify(facts(), good, 'discard'), {
    state: 'done',
    class: 'completed',
    reward: 1,
    rewards: { reward: 1 },
    trainable: true,
    error: null,
  });
  const wrong = classify(facts({ reward: { value: 0, scores: {} } }), good, 'discard');
  assert.equal(wrong.class, 'policy_failure');
  assert.equal(wrong.reward, 0);
  assert.equal(wrong.trainable, true);
  // The model's output broke the harness (exit 1) but tokens are aligned and the verifier ran: policy, reward 0.
  assert.equal(
    classify(facts({ agent: { exitCode: 1, timedOut: false, ms: 10 }, reward: { value: 0, scores: {} } }), good, 'discard').class,
    'policy_failure',
  );
  assert.match(
    classify(facts({ infraError: 'the sandbox container was killed from outside (exit 137)' }), good, 'discard').error!,
    /killed from outside/,
  );
  assert.equal(classify(facts({ agent: { exitCode: 137, timedOut: false, ms: 10 } }), good, 'discard').class, 'infra_error');
  // An exit status the backend could not read is no crash: the verifier decides.
  assert.equal(classify(facts({ agent: { exitCode: null, timedOut: false, ms: 10 } }), good, 'discard').class, 'completed');
  assert.match(classify(facts({ verifier: null, reward: null }), good, 'discard').error!, /verifier never ran/);
  assert.equal(classify(facts({ verifier: { exitCode: null, timedOut: true, ms: 60_000 } }), good, 'discard').class, 'infra_error');
  assert.match(classify(facts({ reward: null }), good, 'discard').error!, /no reward/);
  assert.match(classify(facts(), { nCalls: 0, trainable: false, findings: [] }, 'discard').error!, /no model calls/);
  assert.match(
    classify(
      facts(),
      { nCalls: 2, trainable: false, findings: ['[FATAL] logprob_misalign: 3 sampled ids but 2 logprob entries'] },
      'discard',
    ).error!,
    /logprob_misalign/,
  );
});

test('timeouts: discarded with reward null by default; keep keeps tokens and the verifier reward when both are usable', () => {
  const timedOut = facts({ agent: { exitCode: null, timedOut: true, ms: 30_000 }, reward: { value: 0.5, scores: { reward: 0.5 } } });
  assert.deepEqual(
    { ...classify(timedOut, good, 'discard'), error: null },
    { state: 'discarded', class: 'timeout', reward: null, rewards: {}, trainable: false, error: null },
  );
  const kept = classify(timedOut, good, 'keep');
  assert.equal(kept.state, 'done');
  assert.equal(kept.class, 'timeout');
  assert.equal(kept.reward, 0.5);
  assert.equal(kept.trainable, true);
  for (const [f, c] of [
    [facts({ agent: timedOut.agent, verifier: null, reward: null }), good],
    [facts({ agent: timedOut.agent, reward: null }), good],
    [facts({ agent: timedOut.agent, verifier: { exitCode: null, timedOut: true, ms: 1 } }), good],
    [timedOut, { nCalls: 0, trainable: false, findings: [] }],
    [timedOut, { nCalls: 1, trainable: false, findings: ['[FATAL] no_logprobs: x'] }],
  ] as [AttemptFacts, CaptureFacts][]) {
    const v = classify(f, c, 'keep');
    assert.equal(v.class, 'timeout');
    assert.equal(v.state, 'discarded');
    assert.equal(v.reward, null);
  }
  // An infrastructure failure wins over the deadline: a sandbox killed from outside is not a timeout.
  assert.equal(classify(facts({ agent: timedOut.agent, infraError: 'OOMKilled' }), good, 'keep').class, 'infra_error');
});

test('a cancelled attempt has no class', () => {
  assert.throws(() => classify(facts({ cancelled: true }), good, 'discard'), /re-queue/);
});

test('exhaustive: every combination yields one class, a state the state schema accepts, reward null exactly when discarded', () => {
  const exitCodes = [0, 1, 2, 127, 137, 139, null];
  const verifiers: AttemptFacts['verifier'][] = [
    null,
    { exitCode: 0, timedOut: false, ms: 1 },
    { exitCode: 1, timedOut: false, ms: 1 },
    { exitCode: null, timedOut: true, ms: 1 },
  ];
  const rewards: AttemptFacts['reward'][] = [
    null,
    { value: 0, scores: {} },
    { value: 1, scores: { reward: 1 } },
    { value: 0.25, scores: {} },
    { value: -1, scores: {} },
  ];
  const captures: CaptureFacts[] = [
    good,
    { nCalls: 0, trainable: false, findings: [] },
    { nCalls: 0, trainable: true, findings: [] },
    { nCalls: 4, trainable: false, findings: ['[FATAL] invalid_logprob: x'] },
  ];
  let n = 0;
  const seen = new Set<string>();
  for (const exitCode of exitCodes)
    for (const timedOut of [false, true])
      for (const verifier of verifiers)
        for (const reward of rewards)
          for (const infraError of [null, 'killed from outside'])
            for (const capture of captures)
              for (const onTimeout of ['discard', 'keep'] as const) {
                const f = facts({ agent: { exitCode, timedOut, ms: 5 }, verifier, reward, infraError });
                const v = classify(f, capture, onTimeout);
                n++;
                seen.add(v.class);
                assert.ok(ROLLOUT_CLASSES.includes(v.class));
                assert.equal(v.state === 'discarded', v.reward === null, JSON.stringify({ f, capture, v }));
                assert.equal(v.trainable, v.state === 'done');
                if (v.trainable) {
                  assert.ok(capture.trainable && capture.nCalls > 0, 'trainable rollouts have aligned tokens');
                  assert.ok(reward !== null && verifier !== null && !verifier.timedOut, 'trainable rollouts have a verifier reward');
                  assert.equal(v.reward, reward.value);
                }
                if (infraError) assert.equal(v.class, 'infra_error');
                else if (timedOut) assert.equal(v.class, 'timeout');
                if (v.class === 'completed') assert.ok(v.reward! > 0);
                if (v.class === 'policy_failure') assert.ok(v.reward! <= 0);
                if (onTimeout === 'discard' && v.class === 'timeout') assert.equal(v.state, 'discarded');
                if (v.state === 'done' && !timedOut)
                  assert.ok(exitCode === null || exitCode < 128, 'a harness killed by a signal is never trained on');
                // The verdict fits a rollout state file as written by the runner.
                RolloutStateSchema.parse({
                  rollout_id: 'r',
                  group_id: 'g',
                  member: 0,
                  task: 't',
                  harness: 'h',
                  state: v.state,
                  class: v.class,
                  reward: v.reward,
                  rewards: v.rewards,
                  trainable: v.trainable,
                  session_id: 's',
                  attempts: [],
                  policy_version: null,
                  queued_at: '',
                  started_at: null,
                  ended_at: null,
                  duration_ms: null,
                  error: v.error,
                  backend_ref: null,
                  n_calls: capture.nCalls,
                });
              }
  assert.equal(n, exitCodes.length * 2 * verifiers.length * rewards.length * 2 * captures.length * 2);
  assert.deepEqual([...seen].sort(), [...ROLLOUT_CLASSES].sort());
});
