// Audit Batch and Open Group View as plain data, on a real batch directory (planned and written by
// src/batch/plan.ts, captures written by the capture store, states as a lab writes them): the audit's
// Markdown names every group, member, stale call and contract failure (file, session, call); its
// problems say what to act on; arguments from every kind of Batches tree node; quick-pick rows;
// errors of a missing or broken batch in the user's terms.
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { planBatch, writeBatch } from '../../src/batch/plan.js';
import { batchPaths, readRolloutStates, writeRolloutState } from '../../src/batch/state.js';
import { batchStatus } from '../../src/batch/status.js';
import { CaptureStore } from '../../src/capture/store.js';
import type { CallRecord } from '../../src/capture/types.js';
import { auditBatch } from '../../src/export/audit.js';
import {
  auditMarkdown,
  auditProblems,
  auditWarning,
  batchDirOf,
  batchReadError,
  groupPickItems,
  groupTargetOf,
  md,
  memberSessionFile,
} from '../../src/extension/batch-review-model.js';
import { BatchesTreeModel, type BatchNode, type GroupNode, type BatchRolloutNode } from '../../src/extension/batches-model.js';
import { buildGroupView } from '../../src/report/group-view.js';
import { chain } from './rollout-fixtures.js';

const EXAMPLES = join(__dirname, '..', '..', 'examples', 'tasks');
const tmp = mkdtempSync(join(tmpdir(), 'hl-batch-review-'));
after(() => rmSync(tmp, { recursive: true, force: true }));

/**
 * hello-file.react: both completed with reward 1 (no contrast).
 * fix-script.react: .0 completed (1), .1 policy failure (0); .0's second call lost its logprobs
 * (contract), .1 was sampled under step-1 while the batch is at step-6 (stale).
 */
async function reviewBatch(name: string): Promise<string> {
  const tasks = join(tmp, `${name}-tasks`);
  cpSync(join(EXAMPLES, 'hello-file'), join(tasks, 'hello-file'), { recursive: true });
  cpSync(join(EXAMPLES, 'fix-script'), join(tasks, 'fix-script'), { recursive: true });
  const plan = planBatch({
    tasks: [tasks],
    harnesses: ['react'],
    groupSize: 2,
    parallel: 2,
    outDir: join(tmp, 'batches', name),
    checkInstalled: false,
    timeoutSec: 30,
    policyVersion: 'step-6',
    now: new Date('2026-02-01T09:00:00Z'),
  });
  writeBatch(plan);
  const store = new CaptureStore(batchPaths(plan.dir).capture);
  const outcome: Record<
    string,
    { cls: 'completed' | 'policy_failure'; reward: number; policy?: string; edit?: (calls: CallRecord[]) => void }
  > = {
    'hello-file.react.0': { cls: 'completed', reward: 1 },
    'hello-file.react.1': { cls: 'completed', reward: 1 },
    'fix-script.react.0': { cls: 'completed', reward: 1, edit: (calls) => (calls[1]!.logprobs = null) },
    'fix-script.react.1': { cls: 'policy_failure', reward: 0, policy: 'step-1' },
  };
  for (const s of readRolloutStates(plan.dir)) {
    const o = outcome[s.rollout_id]!;
    const session = `sess-${s.rollout_id.replace(/\./g, '-')}`;
    const calls = chain(3, { prefix: `${session}-c` }).map((c) => ({ ...c, session_id: session }));
    o.edit?.(calls);
    await store.append(session, {
      type: 'session',
      session_id: session,
      created_at: s.queued_at,
      model: 'm',
      engine_url: 'http://127.0.0.1:1',
      max_model_calls: 0,
      metadata: { rollout_id: s.rollout_id, ...(o.policy ? { policy_version: o.policy } : {}) },
    });
    for (const c of calls) await store.append(session, { type: 'call', ...c });
    writeRolloutState(plan.dir, {
      ...s,
      state: 'done',
      class: o.cls,
      reward: o.reward,
      trainable: true,
      session_id: session,
      attempts: [
        {
          attempt: 0,
          session_id: session,
          started_at: s.queued_at,
          ended_at: s.queued_at,
          out_dir: `attempts/${s.rollout_id}/0`,
          outcome: 'finished',
          trainable: true,
        },
      ],
      started_at: s.queued_at,
      ended_at: s.queued_at,
      duration_ms: 1000,
      error: null,
      n_calls: calls.length,
    });
  }
  await store.close();
  return plan.dir;
}

test('the audit document: problems first, each group with its members, staleness and the contract naming file, session and call', async () => {
  const dir = await reviewBatch('audited');
  const report = auditBatch(dir);
  const broken = report.contract.failures;
  assert.equal(broken.length, 1, 'one kept rollout breaks the contract');
  assert.deepEqual(
    [broken[0]!.rollout_id, broken[0]!.session_id, broken[0]!.call_id, broken[0]!.file],
    [
      'fix-script.react.0',
      'sess-fix-script-react-0',
      'sess-fix-script-react-0-c1',
      join(dir, 'capture', 'sessions', 'sess-fix-script-react-0.jsonl'),
    ],
  );
  assert.match(broken[0]!.problem, /missing logprobs for 3 completion tokens/);
  assert.equal(report.contract.checked_rollouts, 4);

  const problems = auditProblems(report);
  assert.deepEqual(
    problems.map((p) => p.kind),
    ['contract', 'no_contrast', 'stale'],
  );
  assert.match(
    problems[0]!.text,
    /Rollout fix-script\.react\.0 \(group fix-script\.react\) breaks the capture contract, so an export stops on it: .*sess-fix-script-react-0\.jsonl, session sess-fix-script-react-0, call sess-fix-script-react-0-c1: \(index 1\) missing logprobs/,
  );
  assert.equal(
    problems[1]!.text,
    'Group hello-file.react has no contrast: every kept reward is 1, so all its advantages are 0 and it teaches nothing.',
  );
  assert.match(
    problems[2]!.text,
    /^3 calls sampled more than 4 policy versions behind the newest \(step-6\), e\.g\. rollout fix-script\.react\.1, session sess-fix-script-react-1, call sess-fix-script-react-1-c0 under step-1\.$/,
  );
  const warning = auditWarning(report, problems);
  assert.match(
    warning,
    /^Audit of batch b20260201-090000-[0-9a-f]{4}: capture contract broken, groups without contrast, stale calls\. Rollout fix-script\.react\.0 .* \(\+2 more\)$/,
  );

  const doc = auditMarkdown(report);
  assert.match(doc, new RegExp(`^# Audit of batch ${report.batch_id}\n`));
  assert.match(doc, /4 rollouts in 2 groups of 2: kept 4, discarded 0, unfinished 0/);
  const section = (title: string) => doc.slice(doc.indexOf(`## ${title}`), doc.indexOf('\n## ', doc.indexOf(`## ${title}`) + 3));
  assert.equal(
    section('Problems')
      .split('\n')
      .filter((l) => l.startsWith('- ')).length,
    3,
  );
  // Groups: the summary table, then one section per group with a row per member.
  assert.match(doc, /\| hello-file\.react \| hello-file \| react \| 2\/2 \| \[1, 1\] \| 1 \| 0 \| NO CONTRAST \|/);
  assert.match(doc, /\| fix-script\.react \| [^|]+ \| react \| 2\/2 \| \[1, 0\] \| 0\.5 \| 0\.707 \| {2}\|/);
  assert.match(doc, /### Group hello-file\.react — NO CONTRAST/);
  for (const id of ['hello-file.react.0', 'hello-file.react.1', 'fix-script.react.0', 'fix-script.react.1'])
    assert.match(
      doc,
      new RegExp(
        `\\| \\d \\| ${md(id).replace(/\\/g, '\\\\').replace(/\./g, '\\.')} \\| (completed|policy\\\\_failure) \\| [01] \\| yes \\| 3 \\|`,
      ),
      id,
    );
  assert.match(section('Policy versions and staleness'), /3 of 12 call\(s\) of the kept rollouts are stale/);
  assert.match(
    section('Policy versions and staleness'),
    /\| fix-script\.react\.1 \| `sess-fix-script-react-1` \| `sess-fix-script-react-1-c0` \| 0 \| step-1 \| 5 \|/,
  );
  assert.match(section('Capture contract'), /1 kept rollout of 4 break the contract/);
  assert.ok(
    section('Capture contract').includes(
      `| fix-script.react.0 | fix-script.react | \`${broken[0]!.file}\` | \`sess-fix-script-react-0\` | \`sess-fix-script-react-0-c1\` |`,
    ),
  );
  assert.match(section('Behaviour'), /\| harness react \| 4 \|/);
  assert.match(section('Harnesses'), /\| react \| 4 \| 4 \| 0 \| 0\.75 \|/);
  // Nothing in a cell can break its table row: every row of a table has its header's columns.
  const columns = (line: string) => line.replace(/\\\|/g, '').split('|').length;
  let header = 0;
  for (const line of doc.split('\n')) {
    if (!line.startsWith('|')) header = 0;
    else if (!header) header = columns(line);
    else assert.equal(columns(line), header, line);
  }
});

test('a clean batch has no problems; Markdown escapes what would break a table', async () => {
  const dir = await reviewBatch('clean');
  const report = auditBatch(dir);
  // Without the broken, stale and flat members the same shapes report nothing to act on.
  const clean = {
    ...report,
    groups: report.groups.filter((g) => !g.no_contrast),
    contract: { ...report.contract, failures: [] },
    policy: { ...report.policy, stale: [], stale_calls: 0 },
  };
  assert.deepEqual(auditProblems(clean), []);
  assert.match(auditMarkdown(clean), /## Problems\n\nNone: every group has contrast/);
  assert.equal(md('a|b *c* <d>\nnext'), 'a\\|b \\*c\\* \\<d\\> next');
});

test('command arguments: every Batches tree node names its batch; group rows and rollout rows name their group', async () => {
  const dir = await reviewBatch('args');
  const model = new BatchesTreeModel(() => [join(tmp, 'batches')]);
  const batch = (model.roots() as BatchNode[]).find((b) => b.dir === dir)!;
  const [fix, hello] = model.children(batch) as GroupNode[];
  const rollout = model.children(hello) as BatchRolloutNode[];
  assert.equal(batchDirOf(batch), dir);
  assert.deepEqual(groupTargetOf(batch), { dir, groupId: null });
  assert.deepEqual(groupTargetOf(fix), { dir, groupId: 'fix-script.react' });
  assert.deepEqual(groupTargetOf(rollout[1]), { dir, groupId: 'hello-file.react' });
  assert.deepEqual(groupTargetOf(dir), { dir, groupId: null });
  assert.deepEqual(groupTargetOf({ scheme: 'file', fsPath: dir }), { dir, groupId: null });
  assert.equal(batchDirOf(undefined), undefined);
  assert.equal(batchDirOf({ scheme: 'untitled', fsPath: dir }), undefined);
  assert.equal(memberSessionFile(dir, 'sess-x'), join(dir, 'capture', 'sessions', 'sess-x.jsonl'));
  assert.equal(memberSessionFile(dir, null), null);

  const items = groupPickItems(batchStatus(dir));
  assert.deepEqual(
    items.map((i) => [i.label, i.description]),
    [
      ['fix-script.react', '2/2 finished · mean 0.5 · std 0.707'],
      ['hello-file.react', '2/2 finished · mean 1 · std 0 · NO CONTRAST'],
    ],
  );
  assert.match(items[1]!.detail, /task hello-file · harness react · rewards \[1, 1\]/);
  // The group view the webview gets holds every member, with its reward and session.
  const view = buildGroupView(dir, 'hello-file.react');
  assert.deepEqual(
    view.members.map((m) => [m.rollout_id, m.reward, m.session_id]),
    [
      ['hello-file.react.0', 1, 'sess-hello-file-react-0'],
      ['hello-file.react.1', 1, 'sess-hello-file-react-1'],
    ],
  );
});

test("errors in the user's terms: a folder without batch.json, a torn batch.json, a kept rollout without its capture, an unknown group", async () => {
  const empty = join(tmp, 'batches', 'not-a-batch');
  const catchOf = (fn: () => unknown) => {
    try {
      fn();
    } catch (err) {
      return err;
    }
    assert.fail('expected an error');
  };
  const missing = batchReadError(
    'audit',
    empty,
    catchOf(() => auditBatch(empty)),
  );
  assert.equal(
    missing.message,
    `Cannot audit batch 'not-a-batch': its batch.json is missing (not found (is this a batch directory?)). File: ${join(empty, 'batch.json')}`,
  );

  const torn = await reviewBatch('torn');
  writeFileSync(join(torn, 'batch.json'), '{"schema_version": 1, "batch_id": ');
  assert.match(
    batchReadError(
      'audit',
      torn,
      catchOf(() => auditBatch(torn)),
    ).message,
    /^Cannot audit batch 'torn': its batch\.json is unreadable \(not JSON: .*\)\. File: .*torn\/batch\.json$/,
  );

  const lost = await reviewBatch('lost');
  const file = join(lost, 'capture', 'sessions', 'sess-hello-file-react-1.jsonl');
  rmSync(file);
  assert.equal(
    batchReadError(
      'audit',
      lost,
      catchOf(() => auditBatch(lost)),
    ).message,
    `Cannot audit batch 'lost': a kept rollout's capture cannot be read (no such file). File: ${file}`,
  );

  assert.match(
    batchReadError(
      'show a group of',
      lost,
      catchOf(() => buildGroupView(lost, 'nope')),
    ).message,
    /^Cannot show a group of batch 'lost' \(.*\): .*batch\.json: no group 'nope'; groups: fix-script\.react, hello-file\.react$/,
  );
});
