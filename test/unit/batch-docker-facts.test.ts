// The docker backend's facts from a sandbox record: each way a `run`-style rollout can end maps to
// the facts classify() expects (a lost sandbox and an unexplained setup failure are infra; a
// timeout, a verifier failure and a missing reward are left to classify).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { factsFromResult } from '../../src/batch/backends/docker.js';
import { classify } from '../../src/batch/classify.js';
import { noTrajectory } from '../../src/harness/atif-check.js';
import type { RolloutResult } from '../../src/sandbox/rollout-runner.js';

function result(over: Partial<RolloutResult> = {}): RolloutResult {
  return {
    task: 't',
    harness: 'react',
    sandbox: 'docker',
    isolation: 'no-network',
    session_id: 's',
    status: 'ok',
    reward: 1,
    reward_source: 'reward.txt',
    reward_scores: {},
    error: null,
    trainable: true,
    agent: { exit_code: 0, timed_out: false, ms: 1000, log: '/x' },
    verifier: { exit_code: 0, timed_out: false, ms: 10, env_keys: [], session_key_absent: true, admin_key_absent: true },
    atif: noTrajectory(),
    atif_source: 'self',
    ms: 1200,
    out_dir: '/x',
    sandbox_id: 'c0ffee',
    sandbox_lost: null,
    cancelled: false,
    rollout: null,
    ...over,
  };
}
const capture = { nCalls: 2, trainable: true, findings: [] };
const cls = (r: RolloutResult) => classify(factsFromResult(r), capture, 'discard');

test('a clean rollout, a wrong answer and a timeout', () => {
  assert.deepEqual(factsFromResult(result()), {
    backendRef: 'c0ffee',
    agent: { exitCode: 0, timedOut: false, ms: 1000 },
    verifier: { exitCode: 0, timedOut: false, ms: 10 },
    reward: { value: 1, scores: {} },
    infraError: null,
    cancelled: false,
  });
  assert.equal(cls(result({ reward: 0 })).class, 'policy_failure');
  const timedOut = result({
    status: 'errored',
    reward: null,
    verifier: null,
    error: 'the agent did not finish within 30 s; the sandbox was stopped',
    agent: { exit_code: null, timed_out: true, ms: 30_000, log: '/x' },
  });
  assert.equal(factsFromResult(timedOut).infraError, null);
  assert.equal(cls(timedOut).class, 'timeout');
});

test('what the sandbox, not the policy, caused is infra', () => {
  const lost = result({
    status: 'errored',
    reward: null,
    verifier: null,
    sandbox_lost: 'the sandbox container stopped from outside the lab (exit 137: docker kill, a crash or the daemon)',
    error: 'x',
    agent: { exit_code: 137, timed_out: false, ms: 500, log: '/x' },
  });
  assert.match(factsFromResult(lost).infraError!, /stopped from outside/);
  assert.equal(cls(lost).class, 'infra_error');
  const noImage = result({
    status: 'errored',
    reward: null,
    verifier: null,
    sandbox_id: null,
    error: 'hello-file/environment/Dockerfile: FROM: image python:3.12 is not available locally',
    agent: { exit_code: null, timed_out: false, ms: 0, log: '/x' },
  });
  assert.match(factsFromResult(noImage).infraError!, /not available locally/);
  const leak = result({
    status: 'errored',
    error: 'the session key is visible in the verifier environment',
    verifier: { exit_code: 0, timed_out: false, ms: 1, env_keys: [], session_key_absent: false, admin_key_absent: true },
  });
  assert.equal(cls(leak).class, 'infra_error');
  const noReward = result({
    status: 'errored',
    reward: null,
    error: 'the verifier wrote neither /logs/verifier/reward.json nor reward.txt',
  });
  assert.equal(factsFromResult(noReward).infraError, null, 'left to classify');
  assert.match(cls(noReward).error!, /wrote no reward/);
  assert.equal(factsFromResult(result({ cancelled: true, error: 'cancelled', reward: null, verifier: null })).cancelled, true);
});
