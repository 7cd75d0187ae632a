// `harness-lab audit` on the captured fixture batch: a known no-contrast group (g-flat), a known
// discarded member (r8) and a known stale call (r2's second call, sampled under step-1 while the
// batch is at step-6), and the exit codes of --fail-on.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { loadSessionFile } from '../../src/capture/store.js';
import type { BatchStatus } from '../../src/batch/status.js';
import { parseFailOn, type AuditReport } from '../../src/export/audit.js';
import { sortVersions, versionOrdinal } from '../../src/export/policy-version.js';
import { buildTrainingBatch, copyBatch, STALE_POLICY, type TrainingBatch } from './train-fixture.js';

const ROOT = join(__dirname, '..', '..');
let tmp: string;
let batch: TrainingBatch;

function run(argv: string[]): { code: number; out: string; err: string } {
  const r = spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'src', 'cli', 'main.ts'), ...argv], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 120_000,
  });
  return { code: r.status ?? -1, out: r.stdout, err: r.stderr };
}

before(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'hl-train-audit-'));
  batch = await buildTrainingBatch(join(tmp, 'batch'));
});
after(() => rmSync(tmp, { recursive: true, force: true }));

test('audit --json: groups, no contrast, shares, harnesses, the stale call, tool calls', () => {
  const r = run(['audit', batch.dir, '--json']);
  assert.equal(r.code, 0, r.err);
  const a = JSON.parse(r.out) as AuditReport;
  const g = Object.fromEntries(a.groups.map((x) => [x.group_id, x]));
  assert.deepEqual(g['g-mixed']!.rewards, [1, 0, 1]);
  assert.ok(Math.abs(g['g-mixed']!.mean! - 2 / 3) < 1e-12);
  assert.ok(Math.abs(g['g-mixed']!.std! - Math.sqrt(1 / 3)) < 1e-12, 'Bessel-corrected, as TRL and veRL');
  assert.equal(g['g-mixed']!.no_contrast, false);
  assert.deepEqual(g['g-flat']!.rewards, [0, 0, 0]);
  assert.equal(g['g-flat']!.std, 0);
  assert.equal(g['g-flat']!.no_contrast, true);
  assert.deepEqual([g['g-broken']!.kept, g['g-broken']!.discarded], [2, 1]);
  assert.deepEqual(
    g['g-broken']!.members.filter((m) => !m.kept).map((m) => [m.rollout_id, m.excluded]),
    [['r8', 'discarded_infra_error']],
  );
  assert.deepEqual(a.summary.groups_no_contrast, ['g-flat']);
  assert.equal(a.summary.no_contrast_share, 3 / 9);
  assert.equal(a.summary.no_signal_share, 4 / 9, 'g-flat (3) and the discarded r8');
  assert.equal(a.summary.discarded_share, 1 / 9);
  assert.deepEqual(a.harnesses['react-a'], { rollouts: 6, kept: 5, discarded: 1, mean_reward: 3 / 5 });
  assert.deepEqual(a.harnesses['react-b'], { rollouts: 3, kept: 3, discarded: 0, mean_reward: 0 });
  // Exactly one stale call: r2's second call, which carried the policy-version header.
  const r2 = loadSessionFile(join(batch.dir, 'capture', 'sessions', `${batch.sessions.r2}.jsonl`))!.calls.sort((x, y) => x.index - y.index);
  assert.deepEqual(a.policy.stale, [
    { rollout_id: 'r2', session_id: batch.sessions.r2, call_id: r2[1]!.call_id, index: 1, version: STALE_POLICY, behind: 5 },
  ]);
  assert.equal(a.policy.newest, 'step-6');
  assert.equal(a.policy.calls, 18, 'calls of the kept rollouts');
  assert.equal(a.summary.stale_share, 1 / 18);
  assert.deepEqual(a.tool_calls.per_rollout, { r0: 2, r1: 1, r2: 1, r3: 1, r4: 1, r5: 1, r6: 1, r7: 1, r8: 1 });
  assert.equal(a.tool_calls.max, 2);
  // Each fixture rollout's turns extend one another: one sample, the trainer gets the merged length;
  // r0 also ran a subagent, its own conversation and so a second sample.
  const kept = a.groups.flatMap((x) => x.members).filter((m) => m.kept);
  for (const m of kept) {
    assert.equal(m.samples?.samples, m.rollout_id === 'r0' ? 2 : 1, `${m.rollout_id}: samples`);
    if (m.rollout_id !== 'r0') assert.equal(m.samples.tokens_to_trainer, m.samples.merged_tokens, `${m.rollout_id}: no token sent twice`);
  }
  assert.equal(a.samples.batch.rollouts, 8);
  assert.equal(a.samples.batch.samples, 9);
  assert.equal(a.samples.batch.single_sample_rollouts, 7);
  assert.deepEqual(Object.keys(a.samples.harnesses).sort(), ['react-a', 'react-b']);
  assert.equal(a.samples.harnesses['react-b']!.token_ratio, 1);
  assert.equal(a.samples.batch.unparsed_tool_calls, 0);
});

test('audit text output names the no-contrast group and the stale call', () => {
  const r = run(['audit', batch.dir]);
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /g-flat\s+react-b\s+3\/3\s+\[0, 0, 0\]\s+0\.000\s+0\.000\s+NO CONTRAST/);
  assert.match(r.out, /excluded r8:discarded_infra_error/);
  assert.match(
    r.out,
    /samples \(kept rollouts\): 1\.13 samples\/rollout \(7\/8 one sample\), [\d,]+ tokens to the trainer \(1\.\d\dx the merged [\d,]+\), 0 unparsed/,
  );
  assert.match(r.out, /\n {2}react-b: 1\.00 samples\/rollout \(3\/3 one sample\)/);
  assert.match(
    r.out,
    new RegExp(`stale: rollout r2 session ${batch.sessions.r2} call [0-9a-f]{12} \\(index 1\\) version step-1, 5 behind`),
  );
});

test('--fail-on: exit 1 above a threshold, 0 at or below it; --max-staleness moves the line; bad input exit 2', () => {
  const pass = run(['audit', batch.dir, '--fail-on', 'no-contrast-share=0.34,discarded-share=0.2']);
  assert.equal(pass.code, 0, pass.out + pass.err);
  assert.match(pass.out, /PASS/);
  const fail = run(['audit', batch.dir, '--fail-on', 'no-contrast-share=0.3,stale-share=0']);
  assert.equal(fail.code, 1);
  assert.match(fail.out, /FAIL: no-contrast-share 0\.333 > 0\.3; stale-share 0\.056 > 0/);
  const looser = run(['audit', batch.dir, '--max-staleness', '5', '--fail-on', 'stale-share=0']);
  assert.equal(looser.code, 0, looser.out);
  const json = run(['audit', batch.dir, '--json', '--fail-on', 'no-signal-share=0.4']);
  assert.equal(json.code, 1);
  assert.deepEqual((JSON.parse(json.out) as { failed: string[] }).failed, ['no-signal-share 0.444 > 0.4']);
  const bad = run(['audit', batch.dir, '--fail-on', 'contrast=1']);
  assert.equal(bad.code, 2);
  assert.match(bad.err, /unknown key 'contrast'/);
  const missing = run(['audit', join(tmp, 'nope')]);
  assert.equal(missing.code, 1);
  assert.match(missing.err, /batch\.json: not found/);
});

test('policy versions order by their trailing integer; --fail-on parsing', () => {
  assert.equal(versionOrdinal('step-12'), 12);
  assert.equal(versionOrdinal('7'), 7);
  assert.equal(versionOrdinal('main'), null);
  assert.deepEqual(sortVersions(['step-10', 'step-9', 'main', 'step-9']), ['step-9', 'step-10', 'main']);
  assert.deepEqual(parseFailOn('stale-share=0.1, no-contrast-share=0.5'), { 'stale-share': 0.1, 'no-contrast-share': 0.5 });
  assert.throws(() => parseFailOn('stale-share=2'), /between 0 and 1/);
  assert.throws(() => parseFailOn('stale-share'), /needs a share/);
});

test('a discarded rollout without a session file is still audited; a kept one without it fails naming the file', () => {
  const dir = copyBatch(batch.dir, join(tmp, 'missing'));
  rmSync(join(dir, 'capture', 'sessions', `${batch.sessions.r8}.jsonl`));
  const ok = run(['audit', dir, '--json']);
  assert.equal(ok.code, 0, ok.err);
  const a = JSON.parse(ok.out) as AuditReport;
  assert.equal(a.groups.find((g) => g.group_id === 'g-broken')!.members.find((m) => m.rollout_id === 'r8')!.tool_calls, null);
  const kept = join(dir, 'capture', 'sessions', `${batch.sessions.r1}.jsonl`);
  rmSync(kept);
  const bad = run(['audit', dir]);
  assert.equal(bad.code, 1);
  assert.ok(bad.err.includes(kept), bad.err);
});

test('audit: behaviour metrics per rollout, per harness and per batch (text and --json)', () => {
  const r = run(['audit', batch.dir, '--json']);
  assert.equal(r.code, 0, r.err);
  const a = JSON.parse(r.out) as AuditReport;
  const member = (id: string) => a.groups.flatMap((g) => g.members).find((m) => m.rollout_id === id)!;
  // r0: the main path is wc -l (result "3 notes.txt", ok by F4) then the answer; its subagent is auxiliary.
  const r0 = member('r0').behaviour!;
  assert.deepEqual(
    [
      r0.turns,
      r0.tool_calls,
      r0.failed_tool_calls,
      r0.unknown_tool_calls,
      r0.turns_to_first_success,
      r0.tool_coverage,
      r0.self_verified,
      r0.final_answer,
    ],
    [2, 1, 0, 0, 1, 1, false, true],
  );
  // r8 crashed after its first call: its one tool call has no result and there is no final answer.
  const r8 = member('r8').behaviour!;
  assert.deepEqual([r8.turns, r8.tool_calls, r8.unknown_tool_calls, r8.turns_to_first_success, r8.final_answer], [1, 1, 1, null, false]);
  assert.equal(a.behaviour.batch.rollouts, 9);
  assert.equal(a.behaviour.harnesses['react-a']!.rollouts, 6);
  assert.equal(a.behaviour.harnesses['react-b']!.mean_tool_coverage, 1);
  assert.equal(a.behaviour.batch.no_success_share, 1 / 9);
  assert.equal(a.behaviour.batch.error_recovery, null, 'no tool call failed');
  const text = run(['audit', batch.dir]);
  assert.match(text.out, /behaviour \(docs\/behaviour-metrics\.md\)/);
  assert.match(text.out, /react-b\s+3\s+1\.00\s+0\.00\s+-\s+0\.00\s+1\.00\s+1\.00/);
  assert.match(text.out, /\(batch\)\s+9\s+/);
});

test('audit names a kept rollout whose capture breaks the export contract: file, session and call (text and --json)', () => {
  const clean = run(['audit', batch.dir, '--json']);
  assert.deepEqual((JSON.parse(clean.out) as AuditReport).contract, { checked_rollouts: 8, failures: [] });
  assert.match(run(['audit', batch.dir]).out, /capture contract: every kept rollout \(8\) holds it/);
  const dir = copyBatch(batch.dir, join(tmp, 'contract'));
  const file = join(dir, 'capture', 'sessions', `${batch.sessions.r1}.jsonl`);
  let callId = '';
  const lines = readFileSync(file, 'utf8')
    .split('\n')
    .map((line) => {
      if (!line) return line;
      const obj = JSON.parse(line) as { type: string; index?: number; call_id?: string; logprobs?: unknown };
      if (obj.type !== 'call' || obj.index !== 0) return line;
      obj.logprobs = null;
      callId = obj.call_id!;
      return JSON.stringify(obj);
    });
  writeFileSync(file, lines.join('\n'));
  const r = run(['audit', dir, '--json']);
  assert.equal(r.code, 0, r.err);
  const a = JSON.parse(r.out) as AuditReport;
  assert.deepEqual(
    a.contract.failures.map((f) => [f.rollout_id, f.file, f.session_id, f.call_id]),
    [['r1', file, batch.sessions.r1, callId]],
  );
  assert.match(a.contract.failures[0]!.problem, /missing logprobs/);
  const text = run(['audit', dir]).out;
  assert.ok(text.includes(`capture contract: 1 of 8 kept rollout(s) break it; an export stops on them`), text);
  assert.ok(text.includes(`broken: rollout r1 ${file}: session ${batch.sessions.r1}, call ${callId}: (index 0) missing logprobs`), text);
});

// `batch status` on the same fixture batch: the trainer's cost next to the rewards it already shows.
test('batch status: samples per rollout and tokens to the trainer against the merged length, per group and rollout', () => {
  const r = run(['batch', 'status', batch.dir, '--json']);
  assert.equal(r.code, 0, r.err);
  const st = JSON.parse(r.out) as BatchStatus;
  assert.equal(st.samples!.rollouts, 8, 'the trainable rollouts');
  assert.equal(st.samples!.samples, 9, 'r0 ran a subagent: its own conversation, a second sample');
  const g = Object.fromEntries(st.groups.map((x) => [x.group_id, x]));
  assert.deepEqual([g['g-flat']!.samples!.samples_per_rollout, g['g-flat']!.samples!.token_ratio], [1, 1]);
  const r3 = g['g-flat']!.rollouts.find((x) => x.id === 'r3')!;
  assert.ok(r3.samples!.tokens_to_trainer > 0 && r3.samples!.tokens_to_trainer === r3.samples!.merged_tokens);
  assert.equal(g['g-broken']!.rollouts.find((x) => x.id === 'r8')!.samples, null, 'a discarded rollout has no account');
  const text = run(['batch', 'status', batch.dir, '--rollouts']);
  assert.equal(text.code, 0, text.err);
  assert.match(text.out, /samples \(trainable rollouts\): 1\.13 samples\/rollout \(7\/8 one sample\)/);
  assert.match(text.out, /smp\/r {2}tokens\/merged/);
  assert.match(text.out, /g-flat +3 +0 +0 +0 0 0 +0\.000 +0\.000 +1\.00 +1\.00x +NO CONTRAST/);
  assert.match(text.out, /r3 {2}done policy_failure reward=0 samples=1 tokens=(\d+)\/\1 /);
});
