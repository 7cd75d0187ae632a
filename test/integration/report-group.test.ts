// `harness-lab report --batch DIR --group G` and the group view's data on a captured batch whose
// members' tool calls are known (group-fixture.ts).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { buildGroupView } from '../../src/report/group-view.js';
import { buildGroupBatch } from './group-fixture.js';

const ROOT = join(__dirname, '..', '..');
let tmp: string;
let dir: string;

function run(argv: string[]): { code: number; out: string; err: string } {
  const r = spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'src', 'cli', 'main.ts'), ...argv], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 120_000,
  });
  return { code: r.status ?? -1, out: r.stdout, err: r.stderr };
}

before(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'hl-report-group-'));
  dir = (await buildGroupBatch(join(tmp, 'batch'))).dir;
});
after(() => rmSync(tmp, { recursive: true, force: true }));

test('group view data: members, classes, histograms, divergences, behaviour', () => {
  const g = buildGroupView(dir, 'g-div');
  assert.deepEqual(
    g.members.map((m) => [m.rollout_id, m.class, m.reward, m.kept, m.turns, m.tool_calls]),
    [
      ['d0', 'completed', 1, true, 4, 3],
      ['d1', 'policy_failure', 0, true, 3, 2],
      ['d2', 'policy_failure', 0, true, 3, 2],
      ['d3', 'infra_error', null, false, 1, 1],
    ],
  );
  assert.equal(g.members[3]!.excluded, 'discarded_infra_error');
  assert.ok(g.members.every((m) => m.sampled_tokens > 0 && m.prompt_tokens > 0));
  assert.deepEqual(g.rewards, [1, 0, 0]);
  assert.equal(g.teaches_nothing, null);
  assert.equal(g.histogram.batch.n, 5, 'kept rewards of the batch: d0 d1 d2 s0 s1');
  assert.deepEqual([g.histogram.batch.counts[0], g.histogram.batch.counts[9]], [4, 1]);
  assert.deepEqual(g.histogram.harnesses['react-b']!.counts[0], 2);
  const pair = (a: string, b: string) => g.divergences.find((d) => d.a === a && d.b === b)!;
  const d01 = pair('d0', 'd1');
  assert.equal(d01.call, 2, 'd0 runs the test where d1 answers: the third call');
  assert.equal(d01.prompt_index, null, 'same prompts up to there');
  assert.ok(d01.token_index !== null);
  assert.notEqual(
    d01.a_tokens.find((t, k) => d01.window_start + k === d01.token_index)!.id,
    d01.b_tokens.find((t, k) => d01.window_start + k === d01.token_index)!.id,
  );
  const d02 = pair('d0', 'd2');
  assert.equal(d02.call, 0, 'd2 reads the wrong path on its first call');
  assert.equal(d02.prompt_index, null);
  assert.equal(
    d02.a_tokens
      .map((t) => t.text)
      .join('')
      .includes('cat app.py'),
    true,
    d02.a_tokens.map((t) => t.text).join(''),
  );
  assert.equal(pair('d1', 'd2').call, 0);
  assert.equal(g.divergences[g.focus_pair!]!.a, 'd0', 'the earliest divergence between different rewards');
  assert.equal(g.divergences[g.focus_pair!]!.b, 'd2');
  const b0 = g.members[0]!.behaviour!;
  assert.deepEqual([b0.self_verified, b0.verification?.kind, b0.failed_tool_calls], [true, 'test', 0]);
  const b2 = g.members[2]!.behaviour!;
  assert.deepEqual([b2.failed_tool_calls, b2.recovered_failures, b2.turns_to_first_success, b2.self_verified], [1, 1, 2, false]);
  assert.equal(g.members[1]!.behaviour!.self_verified, false);
  assert.equal(g.behaviour.group.rollouts, 4);
  assert.equal(g.behaviour.group.self_verification, 1 / 4);
  assert.equal(g.behaviour.batch.rollouts, 6);
  // Every member's turns extend one another: one sample each, the trainer gets exactly the merged length.
  for (const m of g.members) {
    assert.equal(m.samples!.samples, 1, m.rollout_id);
    assert.equal(m.samples!.agent_turns, m.turns, m.rollout_id);
    assert.equal(m.samples!.tokens_to_trainer, m.samples!.merged_tokens, m.rollout_id);
  }
  assert.deepEqual(
    [g.samples.group.rollouts, g.samples.group.samples_per_rollout, g.samples.group.token_ratio, g.samples.group.unparsed_tool_calls],
    [3, 1, 1, 0],
  );
  assert.equal(g.samples.harness.rollouts, 3, 'react-a: the kept d0 d1 d2');
  assert.equal(g.samples.batch.rollouts, 5, 'kept rollouts of the batch: d0 d1 d2 s0 s1');
  const same = buildGroupView(dir, 'g-same');
  assert.equal(same.no_contrast, true);
  assert.match(same.teaches_nothing!, /teaches nothing/);
  assert.equal(same.divergences[0]!.call, null, 'identical members');
});

test('harness-lab report --batch --group writes the self-contained group view; bad input is named', () => {
  const out = join(tmp, 'g-div.html');
  const r = run(['report', '--batch', dir, '--group', 'g-div', '-o', out]);
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /group g-div, 4 members, rewards \[1, 0, 0\]; d0 and d2 diverge at call 1/);
  const html = readFileSync(out, 'utf8');
  assert.match(html, /<script type="application\/json" id="hl-group">/);
  assert.doesNotMatch(html, /<script src=|<link /);
  const same = run(['report', '--batch', dir, '--group', 'g-same', '-o', join(tmp, 'same.html')]);
  assert.equal(same.code, 0, same.err);
  assert.match(same.out, /teaches nothing/);
  const missing = run(['report', '--batch', dir, '--group', 'nope', '-o', join(tmp, 'x.html')]);
  assert.equal(missing.code, 1);
  assert.match(missing.err, /no group 'nope'; groups: g-div, g-same/);
  assert.equal(existsSync(join(tmp, 'x.html')), false);
  const half = run(['report', '--group', 'g-div', '-o', join(tmp, 'x.html')]);
  assert.equal(half.code, 2);
  assert.match(half.err, /--batch and --group go together/);
  const none = run(['report', '-o', join(tmp, 'x.html')]);
  assert.equal(none.code, 2);
  assert.match(none.err, /ROLLOUT is required/);
});
