// Outcomes everywhere (#28): a run's reward, class and the verifier's last lines, read from what a run
// leaves on disk, as the Run with Harness message, the Sessions tree and the viewer header show them.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import {
  batchMemberOutcome,
  classOf,
  fileOutcome,
  OutcomeCache,
  outcomeLine,
  outcomeReason,
  outcomeSeverity,
  policyMismatch,
  readRolloutOutcome,
  verifierTail,
} from '../../src/extension/rollout-outcome.js';
import { SessionsTreeModel, sessionNode } from '../../src/extension/sessions-model.js';

const dirs: string[] = [];
after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'hl-outcome-'));
  dirs.push(d);
  return d;
}

/** A rollout folder as runRollout leaves it: rollout.json and the verifier's stdout. */
function rolloutFolder(result: Record<string, unknown>, verifier?: string): string {
  const dir = tempDir();
  writeFileSync(
    join(dir, 'rollout.json'),
    JSON.stringify({
      task: 'hello-file',
      harness: 'react',
      status: 'ok',
      reward: 0,
      error: null,
      agent: { timed_out: false },
      cancelled: false,
      ...result,
    }),
  );
  if (verifier !== undefined) {
    mkdirSync(join(dir, 'verifier'));
    writeFileSync(join(dir, 'verifier', 'test-stdout.txt'), verifier);
  }
  return dir;
}

test("a reward of 0 is a policy failure shown as a warning with the verifier's reason", () => {
  const dir = rolloutFolder({ reward: 0 }, 'checking hello.txt\n\nhello.txt is missing or wrong: Hello world\n');
  const o = readRolloutOutcome(dir)!;
  assert.equal(o.class, 'policy_failure');
  assert.equal(outcomeSeverity(o), 'warning');
  assert.equal(outcomeLine(o), 'hello-file: not solved (reward 0.00, policy_failure)');
  assert.equal(outcomeReason(o), 'verifier: hello.txt is missing or wrong: Hello world');
  assert.deepEqual(o.verifier, ['checking hello.txt', 'hello.txt is missing or wrong: Hello world'], 'blank lines dropped');
});

test('classes: completed only above 0; errors, timeouts and cancels are not successes', () => {
  assert.equal(classOf({ status: 'ok', reward: 1 }), 'completed');
  assert.equal(classOf({ status: 'ok', reward: 0 }), 'policy_failure');
  assert.equal(classOf({ status: 'errored', reward: null }), 'infra_error');
  assert.equal(classOf({ status: 'errored', reward: null, agent: { timed_out: true } }), 'timeout');
  assert.equal(classOf({ status: 'errored', reward: null, cancelled: true }), 'cancelled');
  assert.equal(outcomeSeverity({ class: 'completed' }), 'info');
  assert.equal(outcomeSeverity({ class: 'infra_error' }), 'error');
  const failed = readRolloutOutcome(rolloutFolder({ status: 'errored', reward: null, error: 'the sandbox ran out of memory\nstack' }))!;
  assert.equal(outcomeReason(failed), 'the sandbox ran out of memory', 'the error wins over the verifier, first line only');
  assert.equal(outcomeLine(failed), 'hello-file: failed before a reward (no reward, infra_error)');
});

test('the verifier tail keeps the last lines of a long log and shortens long lines', () => {
  const lines = Array.from({ length: 5000 }, (_, i) => `line ${i}`);
  lines.push('x'.repeat(1000));
  const dir = rolloutFolder({}, lines.join('\n'));
  const tail = verifierTail(dir, 3);
  assert.deepEqual(tail.slice(0, 2), ['line 4998', 'line 4999']);
  assert.equal(tail[2]!.length, 301);
  assert.deepEqual(verifierTail(tempDir()), [], 'no verifier output: no lines');
});

test('a folder without rollout.json (still running) or with a malformed one has no outcome', () => {
  assert.equal(readRolloutOutcome(tempDir()), undefined);
  const bad = tempDir();
  writeFileSync(join(bad, 'rollout.json'), '{"task": 3}');
  assert.equal(readRolloutOutcome(bad), undefined);
  writeFileSync(join(bad, 'rollout.json'), 'not json');
  assert.equal(readRolloutOutcome(bad), undefined);
});

test("the Sessions tree shows reward and class on a run's session, and its verifier lines in the tooltip", () => {
  const dir = rolloutFolder({ reward: 0 }, 'hello.txt is missing or wrong\n');
  const cache = new OutcomeCache();
  const rows = [
    {
      session_id: 's-run',
      created_at: '2026-01-01T00:00:01Z',
      n_calls: 2,
      metadata: { task: 'examples/hello-file', harness: 'react', out_dir: dir },
    },
    { session_id: 's-term', created_at: '2026-01-01T00:00:00Z', n_calls: 1, metadata: { source: 'terminal' } },
  ];
  const model = new SessionsTreeModel(
    () => ({ listSessions: () => rows, getCalls: () => [] }),
    (m) => cache.of(m),
  );
  const [run, term] = model.roots();
  assert.match(run!.description, /^reward 0\.00 · not solved · react on hello-file/);
  assert.equal(run!.outcome?.class, 'policy_failure');
  assert.match(run!.tooltip, /Outcome: reward 0\.00 · not solved \(policy_failure\) on task hello-file/);
  assert.match(run!.tooltip, /Verifier \(last lines\):\n {2}hello\.txt is missing or wrong/);
  assert.equal(term!.outcome, undefined);
  assert.doesNotMatch(term!.description, /reward/);
  // A rewritten rollout.json (the run finished again) is read again; an unchanged one is not.
  writeFileSync(join(dir, 'rollout.json'), JSON.stringify({ task: 'hello-file', harness: 'react', status: 'ok', reward: 1, error: null }));
  const later = new Date(Date.now() + 5000);
  utimesSync(join(dir, 'rollout.json'), later, later);
  assert.equal(cache.of(rows[0]!.metadata)?.class, 'completed');
  assert.match(sessionNode(rows[0]!, [], [], cache.of(rows[0]!.metadata)).description, /^reward 1\.00 · solved/);
});

test("a batch member's session file leads to its rollout state and its attempt's verifier lines (an old batch's runs/ folder)", () => {
  const batch = tempDir();
  mkdirSync(join(batch, 'capture', 'sessions'), { recursive: true });
  mkdirSync(join(batch, 'rollouts'));
  mkdirSync(join(batch, 'runs', 'r1', '0', 'verifier'), { recursive: true });
  writeFileSync(join(batch, 'runs', 'r1', '0', 'verifier', 'test-stdout.txt'), 'hello.txt is correct\n');
  const attempt = {
    attempt: 0,
    session_id: 's1',
    started_at: '2026-01-01T00:00:00Z',
    ended_at: '2026-01-01T00:00:09Z',
    out_dir: 'runs/r1/0',
    outcome: 'finished',
    trainable: true,
  };
  const state = {
    rollout_id: 'r1',
    group_id: 'g1',
    member: 0,
    task: 'hello-file',
    harness: 'react',
    state: 'done',
    class: 'completed',
    reward: 1,
    rewards: {},
    trainable: true,
    session_id: 's1',
    attempts: [attempt],
    policy_version: null,
    queued_at: '2026-01-01T00:00:00Z',
    started_at: '2026-01-01T00:00:00Z',
    ended_at: '2026-01-01T00:00:09Z',
    duration_ms: 9000,
    error: null,
    backend_ref: null,
    n_calls: 3,
  };
  writeFileSync(join(batch, 'rollouts', 'r1.json'), JSON.stringify(state));
  const file = join(batch, 'capture', 'sessions', 's1.jsonl');
  const o = batchMemberOutcome(file, { rollout_id: 'r1' });
  assert.ok(o, 'the member has an outcome');
  assert.equal(o.class, 'completed');
  assert.equal(o.reward, 1);
  assert.deepEqual(o.verifier, ['hello.txt is correct']);
  assert.deepEqual(fileOutcome(file, { rollout_id: 'r1' }), o);
  assert.equal(batchMemberOutcome(file, { rollout_id: '../../etc' }), undefined, 'an id that is not a rollout of the batch');
  assert.equal(batchMemberOutcome(join(batch, 'x.jsonl'), { rollout_id: 'r1' }), undefined, 'not a batch capture file');
  const folder = rolloutFolder({ reward: 1 });
  assert.equal(
    fileOutcome(join(folder, 'session.rollout.json'), {})?.class,
    'completed',
    "a Run with Harness rollout's document: the rollout.json beside it",
  );
});

test("policy hint: the embedded engine following another task's policy, none, or a shipped one", () => {
  const task = tempDir();
  writeFileSync(join(task, 'policy.json'), '{}');
  writeFileSync(join(task, 'policy.sampling.json'), '{}');
  const other = tempDir();
  writeFileSync(join(other, 'policy.json'), '{}');
  assert.equal(policyMismatch(undefined, task), undefined, 'another engine: no hint');
  assert.equal(policyMismatch(join(task, 'policy.json'), task), undefined);
  assert.equal(policyMismatch(join(task, 'policy.sampling.json'), task), undefined, "the task's sampling variant is its own");
  assert.match(policyMismatch(join(other, 'policy.json'), task)!, /follows .*\/policy\.json, not this task's policy\.json/);
  assert.match(policyMismatch(null, task)!, /no policy \(free sampling\)/);
  assert.match(policyMismatch('hello-world', task)!, /shipped policy hello-world/);
  assert.equal(policyMismatch(join(other, 'policy.json'), tempDir()), undefined, 'a task without a policy.json: nothing to compare');
});
