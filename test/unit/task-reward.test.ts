import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RewardError, parseRewardJson, parseRewardTxt, readReward } from '../../src/sandbox/reward.js';

test('reward.json: the key "reward" wins; the only key is taken; several keys are never combined', () => {
  assert.equal(parseRewardJson('{"reward": 0.75, "passed": 3, "total": 4}').value, 0.75);
  assert.deepEqual(parseRewardJson('{"reward": 0.75, "passed": 3}').scores, { reward: 0.75, passed: 3 });
  assert.equal(parseRewardJson('{"funny": 0.4}').value, 0.4);
  assert.equal(parseRewardJson('1').value, 1);
  assert.equal(parseRewardJson('{"reward": true}').value, 1);
  assert.throws(() => parseRewardJson('{"a": 1, "b": 0}'), /2 scores \(a, b\) and no "reward" key; refusing to combine/);
  assert.throws(() => parseRewardJson('{}'), /no scores/);
  assert.throws(() => parseRewardJson('{"reward": "high"}'), /not a finite number/);
  assert.throws(() => parseRewardJson('[1]'), /object of named scores/);
  assert.throws(() => parseRewardJson('nope'), /not valid JSON/);
});

test('reward.txt holds one number', () => {
  assert.equal(parseRewardTxt('1\n').value, 1);
  assert.equal(parseRewardTxt(' 0.25 ').value, 0.25);
  assert.equal(parseRewardTxt('-1e-3').value, -0.001);
  assert.throws(() => parseRewardTxt(''), /empty/);
  assert.throws(() => parseRewardTxt('1 2'), /one number/);
  assert.throws(() => parseRewardTxt('NaN'), /one number/);
});

test('readReward prefers reward.json and fails clearly when the verifier wrote nothing', () => {
  const dir = mkdtempSync(join(tmpdir(), 'hl-reward-'));
  assert.throws(
    () => readReward(dir),
    (err: unknown) => err instanceof RewardError && /neither .*reward.json nor reward.txt/.test(err.message),
  );
  writeFileSync(join(dir, 'reward.txt'), '0\n');
  assert.deepEqual(readReward(dir), { value: 0, source: 'reward.txt', scores: {} });
  writeFileSync(join(dir, 'reward.json'), '{"reward": 1}');
  assert.equal(readReward(dir).source, 'reward.json');
  assert.equal(readReward(dir).value, 1);
});
