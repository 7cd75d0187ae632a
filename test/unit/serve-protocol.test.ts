// The serve pieces that need no sandbox: the reward key resolution OpenEnv's server does, the
// dataset flag, and the run_rollout argument schema on the frames TRL's client sends.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DatasetSpecError, parseDatasetSpec } from '../../src/serve/datasets.js';
import { RunRolloutArgs, observationData } from '../../src/serve/protocol.js';
import { resolveRewardKey } from '../../src/serve/rollouts.js';

test('reward key: exact, else the first of a preference list that exists, else the only key, else reward, else none', () => {
  assert.equal(resolveRewardKey('pass', { pass: 1, reward: 0 }), 'pass');
  assert.equal(resolveRewardKey('score, pass ,reward', { pass: 1, reward: 0 }), 'pass');
  assert.equal(resolveRewardKey('missing', { only: 0.5 }), 'only');
  assert.equal(resolveRewardKey('missing', { a: 1, reward: 0 }), 'reward');
  assert.equal(resolveRewardKey(null, { a: 1, b: 0 }), null);
  assert.equal(resolveRewardKey('x', {}), null);
});

test('--dataset NAME=DIR', () => {
  assert.equal(parseDatasetSpec('train=/tmp/t').name, 'train');
  assert.equal(parseDatasetSpec('train=/tmp/t').dir, '/tmp/t');
  for (const bad of ['train', '=dir', 'train=']) assert.throws(() => parseDatasetSpec(bad), DatasetSpecError);
});

test('run_rollout arguments: every field TRL sends is read, unknown ones are kept out of the way, bad ones are named', () => {
  const args = {
    split: 's',
    task_index: 3,
    harness: 'react',
    sandbox: 'docker',
    reward_key: 'reward',
    keep_sandbox: false,
    force_build: false,
    llm_url: 'http://127.0.0.1:8000/v1',
    model: 'm',
    api_key: 'EMPTY',
    auth_header: null,
    agent_timeout_sec: 600,
    agent_step_limit: null,
    sampling: { temperature: 1, top_p: 1, top_k: -1, min_p: 0 },
    provider: null,
    purpose: 'train',
    eval_sampling: null,
    future_field: 1,
  };
  const parsed = RunRolloutArgs.parse(args);
  assert.equal(parsed.task_index, 3);
  assert.deepEqual(parsed.sampling, args.sampling);
  const bad = RunRolloutArgs.safeParse({ ...args, task_index: -1 });
  assert.ok(!bad.success && bad.error.issues[0]!.path[0] === 'task_index');
});

test('the observation carries the result as MCP text content, as OpenEnv wraps a tool result', () => {
  const d = observationData('run_rollout', '{"ok":true}', null);
  assert.deepEqual(d.observation.result!.content, [{ type: 'text', text: '{"ok":true}' }]);
  assert.equal(d.observation.error, null);
  assert.equal(d.done, false);
});
