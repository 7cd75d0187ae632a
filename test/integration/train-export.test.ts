// Golden tests of `harness-lab export` on a real captured batch (train-fixture.ts): each format checked
// field by field against the trainers' contracts, then loaded by a standard-library Python reader that
// indexes it the way TRL and veRL do (test/python/read_exports.py).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { TrainingTraceSchema, TrainingTurnSchema } from '../../src/capture/rollout.js';
import { loadSessionFile } from '../../src/capture/store.js';
import type { CallRecord } from '../../src/capture/types.js';
import type { ExportManifest } from '../../src/export/export.js';
import type { TrainingTraceLine, TrlRow, VerlRow } from '../../src/export/rows.js';
import { buildTrainingBatch, copyBatch, FIXTURE_POLICY, STALE_POLICY, TEMPERATURE, type TrainingBatch } from './train-fixture.js';

const ROOT = join(__dirname, '..', '..');
const READER = join(ROOT, 'test', 'python', 'read_exports.py');
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
function python(format: string, file: string): { code: number; out: string; err: string } {
  const r = spawnSync('python3', [READER, format, file], { encoding: 'utf8', timeout: 60_000 });
  if (r.error) throw new Error(`python3 is needed for this test (standard library only): ${r.error.message}`);
  return { code: r.status ?? -1, out: r.stdout, err: r.stderr };
}
const lines = <T>(file: string): T[] =>
  readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as T);
const manifestOf = (file: string): ExportManifest => JSON.parse(readFileSync(`${file}.manifest.json`, 'utf8')) as ExportManifest;
const sessionPath = (b: TrainingBatch, id: string) => join(b.dir, 'capture', 'sessions', `${b.sessions[id]}.jsonl`);
const callsOf = (b: TrainingBatch, id: string): CallRecord[] =>
  loadSessionFile(sessionPath(b, id))!.calls.sort((x, y) => x.index - y.index);

function exportBatch(format: string, dir = batch.dir, extra: string[] = []): { file: string; code: number; out: string; err: string } {
  const file = join(tmp, `${format}-${Math.random().toString(36).slice(2, 8)}.jsonl`);
  return { file, ...run(['export', '--format', format, '--batch', dir, '--out', file, ...extra]) };
}

before(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'hl-train-export-'));
  batch = await buildTrainingBatch(join(tmp, 'batch'));
});
after(() => rmSync(tmp, { recursive: true, force: true }));

test('trainingtrace: one line per kept rollout, TRL TrainingTrace inside, reward beside it (0 stays 0)', () => {
  const r = exportBatch('trainingtrace');
  assert.equal(r.code, 0, r.err);
  const rows = lines<TrainingTraceLine>(r.file);
  assert.deepEqual(
    rows.map((x) => x.rollout_id),
    ['r0', 'r1', 'r2', 'r3', 'r4', 'r5', 'r6', 'r7'],
    'groups consecutive, the discarded r8 absent',
  );
  const reward = Object.fromEntries(batch.plan.map((p) => [p.id, p.reward]));
  for (const row of rows) {
    assert.deepEqual(Object.keys(row.trace).sort(), ['schema_version', 'turns']);
    assert.equal(row.trace.schema_version, 1);
    assert.equal(row.reward, reward[row.rollout_id], `${row.rollout_id}: reward`);
    assert.equal(row.session_id, batch.sessions[row.rollout_id]);
    const calls = callsOf(batch, row.rollout_id);
    assert.deepEqual(
      row.trace.turns.map((t) => t.node_id),
      calls.map((c) => c.call_id),
      'every agent call, in arrival order',
    );
    for (const [i, t] of row.trace.turns.entries()) {
      TrainingTurnSchema.parse(t);
      const c = calls[i]!;
      assert.deepEqual(t.prompt_token_ids, c.prompt_token_ids);
      assert.deepEqual(t.completion_token_ids, c.completion_token_ids);
      assert.deepEqual(t.per_token_logps, c.logprobs);
      assert.equal(t.loss_mask.length, c.prompt_token_ids!.length + c.completion_token_ids!.length);
      assert.equal(t.loss_mask.filter((m) => m === 1).length, c.completion_token_ids!.length);
    }
  }
  assert.equal(rows.find((x) => x.rollout_id === 'r1')!.reward, 0, 'a policy failure is reward 0, not null');
  assert.equal(rows.find((x) => x.rollout_id === 'r0')!.trace.turns.length, 4, 'main agent and subagent turns');
  assert.deepEqual(rows.find((x) => x.rollout_id === 'r2')!.turn_policy_versions, [FIXTURE_POLICY, STALE_POLICY]);
  const m = manifestOf(r.file);
  assert.deepEqual(m.counts.rollouts_dropped, { discarded_infra_error: 1 });
  assert.equal(m.dropped_rollouts[0]!.rollout_id, 'r8');
  assert.match(m.dropped_rollouts[0]!.detail!, /exited with code 137/);
  const py = python('trainingtrace', r.file);
  assert.equal(py.code, 0, py.err);
  assert.deepEqual(JSON.parse(py.out), { rows: 8, turns: 18, rewards: { null: 0, zero: 5, positive: 3 } });
});

test('trl: one row per rollout (main path), exactly G consecutive rows per group, incomplete group dropped with its reason', () => {
  const r = exportBatch('trl');
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /wrote 6 trl row\(s\) from 6 rollout\(s\)/);
  const rows = lines<TrlRow>(r.file);
  assert.deepEqual(
    rows.map((x) => [x.group_id, x.rollout_id]),
    [
      ['g-mixed', 'r0'],
      ['g-mixed', 'r1'],
      ['g-mixed', 'r2'],
      ['g-flat', 'r3'],
      ['g-flat', 'r4'],
      ['g-flat', 'r5'],
    ],
  );
  for (const row of rows) {
    const calls = callsOf(batch, row.rollout_id);
    // The main path: the first and the last main-agent call (r0's subagent calls sit between them).
    const first = calls[0]!;
    const last = calls.at(-1)!;
    assert.deepEqual(row.prompt_ids, first.prompt_token_ids, `${row.rollout_id}: prompt is the root call's prompt`);
    assert.deepEqual(
      [...row.prompt_ids, ...row.completion_ids],
      [...last.prompt_token_ids!, ...last.completion_token_ids!],
      'prompt + completion is the leaf prompt + completion',
    );
    assert.equal(row.logprobs.length, row.completion_ids.length);
    assert.equal(row.env_mask.length, row.completion_ids.length);
    const firstOut = first.completion_token_ids!.length;
    assert.deepEqual(row.env_mask.slice(0, firstOut), new Array(firstOut).fill(1), 'the first sampled span is model tokens');
    assert.deepEqual(row.logprobs.slice(0, firstOut), first.logprobs);
    const lastOut = last.completion_token_ids!.length;
    assert.deepEqual(row.env_mask.slice(-lastOut), new Array(lastOut).fill(1));
    assert.deepEqual(row.logprobs.slice(-lastOut), last.logprobs);
    assert.equal(
      row.env_mask.reduce((a, b) => a + b, 0),
      firstOut + lastOut,
      'only the main path is trained',
    );
    row.env_mask.forEach((e, i) => e === 0 && assert.equal(row.logprobs[i], 0, 'tool tokens carry logprob 0.0'));
    assert.equal(typeof row.reward, 'number');
    assert.equal(row.num_turns, last.engine_request!.messages.length + 1);
  }
  assert.equal(rows.find((x) => x.rollout_id === 'r2')!.policy_version, STALE_POLICY, 'the oldest version on the row');
  const m = manifestOf(r.file);
  assert.deepEqual(m.grouping, { key: 'group_id', rows_per_group: 3, consecutive: true });
  assert.deepEqual(
    m.dropped_groups.map((g) => [g.group_id, g.reason, g.members]),
    [['g-broken', 'incomplete_group', 2]],
  );
  assert.deepEqual(m.counts.rollouts_dropped, { discarded_infra_error: 1, group_incomplete_group: 2 });
  assert.deepEqual(
    m.auxiliary_paths.map((p) => [p.rollout_id, p.role, p.n_turns]),
    [['r0', 'agent', 2]],
    "r0's subagent path is listed, not exported",
  );
  assert.deepEqual(m.policy_versions.present, [STALE_POLICY, FIXTURE_POLICY]);
  assert.equal(m.policy_versions.newest, FIXTURE_POLICY);
  assert.deepEqual(m.sampling.pinned, { temperature: TEMPERATURE, top_p: 1, top_k: -1, min_p: 0 });
  assert.ok(m.sampling.observed.length >= 1 && m.sampling.observed.every((s) => s.temperature === TEMPERATURE));
  assert.equal(m.batch!.batch_id, 'b-fixture');
  const py = python('trl', r.file);
  assert.equal(py.code, 0, py.err);
  assert.deepEqual(JSON.parse(py.out), { rows: 6, groups: 2, num_generations: 3, groups_std_zero: 1, group_ids: ['g-mixed', 'g-flat'] });
});

test('verl: segments keyed {uid}_{session}_{index}, the main path final with the reward, loss weights 1/N', () => {
  const r = exportBatch('verl');
  assert.equal(r.code, 0, r.err);
  const rows = lines<VerlRow>(r.file);
  assert.equal(rows.length, 9, "8 rollouts, r0's subagent is a second segment");
  const r0 = rows.filter((x) => x.extra_fields.rollout_id === 'r0');
  const sid = batch.sessions.r0!;
  assert.deepEqual(
    r0.map((x) => x.key),
    [`g-mixed_${sid}_0`, `g-mixed_${sid}_1`],
  );
  assert.deepEqual(
    r0.map((x) => x.extra_fields.trajectory_role),
    ['intermediate', 'final'],
  );
  assert.deepEqual(
    r0.map((x) => x.reward_score),
    [null, 1],
  );
  assert.deepEqual(
    r0.map((x) => x.loss_weight),
    [0.5, 0.5],
  );
  const calls = callsOf(batch, 'r0');
  assert.deepEqual(r0[0]!.prompt_ids, calls[1]!.prompt_token_ids, 'the subagent segment starts at its own root');
  assert.deepEqual(r0[1]!.prompt_ids, calls[0]!.prompt_token_ids);
  for (const row of rows) {
    assert.equal(row.response_ids.length, row.response_mask.length);
    assert.equal(row.response_ids.length, row.response_logprobs.length);
    assert.equal(row.uid, row.extra_fields.group_id);
    if (row.extra_fields.rollout_id !== 'r0') {
      assert.equal(row.loss_weight, 1);
      assert.equal(row.extra_fields.trajectory_role, 'final');
      assert.equal(row.reward_score, batch.plan.find((p) => p.id === row.extra_fields.rollout_id)!.reward);
    }
  }
  assert.ok(!rows.some((x) => x.extra_fields.rollout_id === 'r8'));
  assert.deepEqual(manifestOf(r.file).dropped_groups, [], 'g-broken keeps its two members (veRL groups by uid, any size >= 2)');
  const tooFew = exportBatch('verl', batch.dir, ['--min-group-size', '3']);
  assert.equal(tooFew.code, 0, tooFew.err);
  assert.deepEqual(
    manifestOf(tooFew.file).dropped_groups.map((g) => [g.group_id, g.reason]),
    [['g-broken', 'too_few_members']],
  );
  const py = python('verl', r.file);
  assert.equal(py.code, 0, py.err);
  assert.deepEqual(JSON.parse(py.out), { rows: 9, sessions: 8, uids: 3, multi_segment_sessions: 1 });
});

test('--drop-no-contrast drops the flat group, and the Python reader rejects a broken row', () => {
  const r = exportBatch('trl', batch.dir, ['--drop-no-contrast']);
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(
    lines<TrlRow>(r.file).map((x) => x.group_id),
    ['g-mixed', 'g-mixed', 'g-mixed'],
  );
  assert.deepEqual(manifestOf(r.file).counts.groups_dropped, { incomplete_group: 1, no_contrast: 1 });
  const tt = exportBatch('trainingtrace', batch.dir, ['--drop-no-contrast']);
  assert.equal(tt.code, 0, tt.err);
  assert.deepEqual(
    lines<TrainingTraceLine>(tt.file).map((x) => x.rollout_id),
    ['r0', 'r1', 'r2', 'r6', 'r7'],
  );
  // The reader is a real check: a row whose env_mask is one short must fail it.
  const rows = lines<TrlRow>(r.file);
  rows[1]!.env_mask.pop();
  const broken = join(tmp, 'broken-trl.jsonl');
  writeFileSync(broken, rows.map((x) => JSON.stringify(x)).join('\n') + '\n');
  writeFileSync(`${broken}.manifest.json`, readFileSync(`${r.file}.manifest.json`));
  const py = python('trl', broken);
  assert.equal(py.code, 1);
  assert.match(py.err, /row 1 \(r1\): env_mask has one entry per completion token/);
});

/** Rewrites one stored call of a rollout's session file in a copy of the batch. */
function corrupt(
  label: string,
  rollout: string,
  callIndex: number,
  edit: (c: CallRecord) => void,
): { dir: string; file: string; callId: string } {
  const dir = copyBatch(batch.dir, join(tmp, `corrupt-${label}`));
  const file = join(dir, 'capture', 'sessions', `${batch.sessions[rollout]}.jsonl`);
  let callId = '';
  const text = readFileSync(file, 'utf8')
    .split('\n')
    .map((line) => {
      if (!line) return line;
      const obj = JSON.parse(line) as { type: string; enc?: { p?: unknown } } & CallRecord;
      if (obj.type !== 'call' || obj.index !== callIndex) return line;
      const prompt = JSON.stringify(obj.prompt_token_ids);
      edit(obj);
      // A stored call may hold its prompt as a suffix of an earlier call's (call-codec.ts): an edit of
      // the prompt makes the stored list the whole one.
      if (JSON.stringify(obj.prompt_token_ids) !== prompt && obj.enc) delete obj.enc.p;
      callId = obj.call_id;
      return JSON.stringify(obj);
    })
    .join('\n');
  writeFileSync(file, text);
  return { dir, file, callId };
}

test('a capture that breaks the contract stops every trainer export, naming file, session and call', () => {
  const cases: [string, (c: CallRecord) => void, RegExp][] = [
    ['nan', (c) => ((c.logprobs as (number | null)[])[2] = null), /NaN or non-finite logprob at completion position 2/],
    ['missing', (c) => (c.logprobs = null), /missing logprobs for \d+ completion tokens/],
    ['mismatch', (c) => c.logprobs!.pop(), /mask length mismatch: \d+ logprobs for \d+ completion tokens/],
    ['noprompt', (c) => (c.prompt_token_ids = []), /empty prompt ids/],
  ];
  for (const [label, edit, why] of cases) {
    const { dir, file, callId } = corrupt(label, 'r1', 1, edit);
    for (const format of ['trainingtrace', 'trl', 'verl']) {
      const r = exportBatch(format, dir);
      assert.equal(r.code, 1, `${label}/${format}: ${r.out}${r.err}`);
      assert.ok(r.err.includes(file), `${label}/${format} names the file: ${r.err}`);
      assert.ok(r.err.includes(`session ${batch.sessions.r1}`), `${label}/${format} names the session: ${r.err}`);
      assert.ok(r.err.includes(`call ${callId}`), `${label}/${format} names the call: ${r.err}`);
      assert.match(r.err, why);
      assert.ok(!existsSync(r.file) && !existsSync(`${r.file}.manifest.json`), 'nothing half-written is left');
    }
  }
});

test('a discarded rollout with a broken capture is never read: the export still succeeds', () => {
  const { dir } = corrupt('discarded', 'r8', 0, (c) => (c.logprobs = null));
  const r = exportBatch('trainingtrace', dir);
  assert.equal(r.code, 0, r.err);
  assert.ok(!readFileSync(r.file, 'utf8').includes(batch.sessions.r8!));
});

test('--session and --rollouts: trainingtrace with reward null (unknown, not 0); trl and verl need a batch', () => {
  const capture = join(batch.dir, 'capture');
  const out = join(tmp, 'session.jsonl');
  const r = run(['export', '--format', 'trainingtrace', '--session', batch.sessions.r1!, '--data-dir', capture, '--out', out]);
  assert.equal(r.code, 0, r.err);
  const [line] = lines<TrainingTraceLine>(out);
  assert.equal(line!.reward, null);
  assert.equal(line!.group_id, null);
  assert.equal(python('trainingtrace', out).code, 0);
  const dirOut = join(tmp, 'rollouts.jsonl');
  const d = run(['export', '--format', 'trainingtrace', '--rollouts', capture, '--out', dirOut]);
  assert.equal(d.code, 0, d.err);
  assert.equal(lines(dirOut).length, 8, 'every session with training data; the crashed one-call session has none');
  assert.deepEqual(manifestOf(dirOut).counts.rollouts_dropped, { no_trainable_path: 1 });
  const trl = run(['export', '--format', 'trl', '--session', batch.sessions.r1!, '--data-dir', capture, '--out', join(tmp, 'x.jsonl')]);
  assert.equal(trl.code, 2);
  assert.match(trl.err, /--format trl needs --batch DIR/);
  const nodir = run(['export', '--format', 'trl', '--batch', batch.dir, '--out', join(tmp, 'no-such-dir', 'x.jsonl')]);
  assert.equal(nodir.code, 2);
  assert.match(nodir.err, /does not exist/);
  const two = run(['export', '--batch', batch.dir, '--rollouts', capture, '--out', join(tmp, 'y.jsonl')]);
  assert.equal(two.code, 2);
  assert.match(two.err, /exactly one source/);
});

test("without --format the export writes the lab's per-path TrainingTrace, as before", () => {
  const out = join(tmp, 'paths.jsonl');
  const r = run(['export', '--data-dir', join(batch.dir, 'capture'), '--session', batch.sessions.r0!, '--out', out]);
  assert.equal(r.code, 0, r.err);
  const traces = lines(out).map((t) => TrainingTraceSchema.parse(t));
  assert.equal(traces.length, 2, 'main path and subagent path');
  assert.ok(traces.every((t) => t.trainable));
});

test('--rollouts reads rollout documents (*.rollout.json) too; a session id with "_" gets a hashed veRL key part', async () => {
  const { readRollout } = await import('../../src/export/source.js');
  const { verlSessionKey } = await import('../../src/export/rows.js');
  const docs = join(tmp, 'docs');
  const { mkdirSync } = await import('node:fs');
  mkdirSync(docs);
  const r = readRollout(sessionPath(batch, 'r2'));
  writeFileSync(join(docs, `${batch.sessions.r2}.rollout.json`), JSON.stringify(r.doc));
  const out = join(tmp, 'docs.jsonl');
  const x = run(['export', '--format', 'trainingtrace', '--rollouts', docs, '--out', out]);
  assert.equal(x.code, 0, x.err);
  const [line] = lines<TrainingTraceLine>(out);
  assert.equal(line!.session_id, batch.sessions.r2);
  assert.deepEqual(
    line!.trace.turns.map((t) => t.node_id),
    callsOf(batch, 'r2').map((c) => c.call_id),
  );
  assert.equal(verlSessionKey('abc'), 'abc');
  assert.match(verlSessionKey('a_b'), /^h[0-9a-f]{16}$/);
  assert.equal(verlSessionKey('a_b').includes('_'), false);
});

test('a kept timeout without a reward: trainingtrace writes null (not 0), trl drops it and so its group', async () => {
  const { readRolloutState, writeRolloutState } = await import('../../src/batch/state.js');
  const dir = copyBatch(batch.dir, join(tmp, 'timeout-kept'));
  const s = readRolloutState(dir, 'r4');
  writeRolloutState(dir, { ...s, class: 'timeout', reward: null, rewards: {} });
  const tt = exportBatch('trainingtrace', dir);
  assert.equal(tt.code, 0, tt.err);
  const rows = lines<TrainingTraceLine>(tt.file);
  assert.strictEqual(rows.find((x) => x.rollout_id === 'r4')!.reward, null);
  assert.strictEqual(rows.find((x) => x.rollout_id === 'r3')!.reward, 0);
  assert.deepEqual(JSON.parse(python('trainingtrace', tt.file).out).rewards, { null: 1, zero: 4, positive: 3 });
  const trl = exportBatch('trl', dir);
  assert.equal(trl.code, 0, trl.err);
  const m = manifestOf(trl.file);
  assert.deepEqual(
    m.dropped_rollouts.filter((d) => d.rollout_id === 'r4').map((d) => d.reason),
    ['no_reward'],
  );
  assert.deepEqual(m.dropped_groups.map((g) => g.group_id).sort(), ['g-broken', 'g-flat']);
  assert.ok(lines<TrlRow>(trl.file).every((x) => typeof x.reward === 'number'));
});

test('batch collect is the export writer in its collected format: finished groups of 2+ trainable members, batch facts around each trainable path, checked', () => {
  const out = join(tmp, 'collected.jsonl');
  const r = run(['batch', 'collect', batch.dir, '--out', out]);
  assert.equal(r.code, 0, r.err);
  // g-broken keeps r6 and r7 (r8 is discarded): two trainable members are enough; g-flat has no contrast but is kept.
  assert.match(r.out, /from 8 trainable rollout\(s\) in 3 group\(s\)/);
  const rows = lines<{
    batch_id: string;
    group_id: string;
    rollout_id: string;
    reward: number;
    sampling: Record<string, number>;
    trace: unknown;
  }>(out);
  const paths = lines<{ session_id: string; trainable: boolean }>(exportBatch('paths').file).filter((t) => t.trainable);
  assert.equal(rows.length, paths.length, 'one line per trainable path of the kept rollouts');
  assert.match(r.out, new RegExp(`wrote ${rows.length} trace\\(s\\)`));
  for (const row of rows) {
    assert.equal(row.batch_id, manifestOf(out).batch!.batch_id);
    assert.equal(row.sampling.temperature, TEMPERATURE);
    assert.ok(['g-mixed', 'g-flat', 'g-broken'].includes(row.group_id));
    assert.notEqual(row.rollout_id, 'r8');
    const trace = TrainingTraceSchema.parse(row.trace);
    assert.equal(trace.trainable, true);
  }
  assert.equal(manifestOf(out).format, 'collected');

  const { dir, file, callId } = corrupt('collect-nan', 'r1', 1, (c) => ((c.logprobs as (number | null)[])[2] = null));
  const bad = run(['batch', 'collect', dir, '--out', join(tmp, 'bad.jsonl')]);
  assert.equal(bad.code, 1, bad.out);
  assert.ok(bad.err.includes(file) && bad.err.includes(`call ${callId}`), bad.err);
  assert.match(bad.err, /NaN or non-finite logprob at completion position 2/);
  assert.ok(!existsSync(join(tmp, 'bad.jsonl')), 'nothing half-written is left');
});
