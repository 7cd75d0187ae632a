// Planning a batch: tasks from DIR or GLOB, readable stable ids, groups = tasks x harnesses of G
// members, bad input failing before anything is written (naming file and field, the unknown
// harness, the group size), the concurrency default, and the directory it writes.
import assert from 'node:assert/strict';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  BatchPlanError,
  attemptSessionId,
  defaultParallel,
  expandGlob,
  planBatch,
  resolveTaskDirs,
  writeBatch,
} from '../../src/batch/plan.js';
import { BatchFileError, readManifest, readRolloutState, readRolloutStates } from '../../src/batch/state.js';
import { SESSION_ID_PATTERN } from '../../src/capture/sessions.js';
import { TaskError } from '../../src/tasks/task.js';

const EXAMPLES = join(__dirname, '..', '..', 'examples', 'tasks');

function suite(): string {
  const root = mkdtempSync(join(tmpdir(), 'hl-plan-'));
  cpSync(join(EXAMPLES, 'hello-file'), join(root, 'suite', 'a-hello'), { recursive: true });
  cpSync(join(EXAMPLES, 'fix-script'), join(root, 'suite', 'b-fix'), { recursive: true });
  cpSync(join(EXAMPLES, 'hello-file'), join(root, 'other', 'hello-again'), { recursive: true });
  mkdirSync(join(root, 'suite', 'not-a-task'));
  return root;
}

test('tasks from a folder, a task folder, a glob and ** ; each once, in a stable order', () => {
  const root = suite();
  assert.deepEqual(resolveTaskDirs([join(root, 'suite')]), [join(root, 'suite', 'a-hello'), join(root, 'suite', 'b-fix')]);
  assert.deepEqual(resolveTaskDirs([join(root, 'suite', 'b-fix')]), [join(root, 'suite', 'b-fix')]);
  assert.deepEqual(resolveTaskDirs(['suite/a-*', 'suite/*'], root), [join(root, 'suite', 'a-hello'), join(root, 'suite', 'b-fix')]);
  assert.deepEqual(resolveTaskDirs(['**/hello*'], root), [join(root, 'other', 'hello-again')]);
  assert.deepEqual(expandGlob('*/[ab]-*', root), [join(root, 'suite', 'a-hello'), join(root, 'suite', 'b-fix')]);
  assert.throws(() => resolveTaskDirs(['nothing-*'], root), /matches no task directory/);
  assert.throws(() => resolveTaskDirs([join(root, 'missing')]), /no such directory/);
  assert.throws(() => resolveTaskDirs([join(root, 'suite', 'not-a-task')]), /no Harbor task here/);
});

test('groups are tasks x harnesses of G members with readable ids; sampling is pinned training sampling', () => {
  const root = suite();
  const plan = planBatch({
    tasks: [join(root, 'suite'), join(root, 'other')],
    harnesses: ['react', 'codex'],
    groupSize: 3,
    temperature: 0.6,
    policyVersion: 'step-12',
    outDir: join(root, 'b'),
    checkInstalled: false,
  });
  const m = plan.manifest;
  assert.match(m.batch_id, /^b\d{8}-\d{6}-[0-9a-f]{4}$/);
  // Two tasks are both called hello-file: the second gets a suffix.
  assert.deepEqual(
    m.groups.map((g) => g.group_id),
    ['hello-file.react', 'hello-file.codex', 'b-fix.react', 'b-fix.codex', 'hello-file-2.react', 'hello-file-2.codex'],
  );
  assert.deepEqual(m.groups[0]!.rollout_ids, ['hello-file.react.0', 'hello-file.react.1', 'hello-file.react.2']);
  for (const g of m.groups) assert.ok(m.groups.filter((o) => o.group_id === g.group_id).length === 1);
  assert.equal(plan.states.length, 18);
  assert.ok(plan.states.every((s) => s.state === 'queued' && s.class === null && s.reward === null && s.policy_version === 'step-12'));
  assert.deepEqual(m.sampling, { temperature: 0.6, top_p: 1, top_k: -1, min_p: 0 });
  assert.equal(m.timeout_sec, 300, 'the tasks agent.timeout_sec');
  assert.equal(m.on_timeout, 'discard');
  assert.equal(m.engine_url, null);
  assert.match(attemptSessionId(m.batch_id, 'hello-file-2.codex.2', 3), SESSION_ID_PATTERN);
});

test('bad input fails before anything is written', () => {
  const root = suite();
  const out = join(root, 'never');
  const req = { tasks: [join(root, 'suite')], harnesses: ['react'], groupSize: 2, outDir: out, checkInstalled: false };
  assert.throws(
    () => planBatch({ ...req, groupSize: 1 }),
    (e: unknown) => e instanceof BatchPlanError && /--group-size must be an integer of at least 2/.test(e.message),
  );
  assert.throws(
    () => planBatch({ ...req, harnesses: ['react', 'cursor-cli'] }),
    /unknown harness 'cursor-cli'; known harnesses: react, codex/,
  );
  assert.throws(() => planBatch({ ...req, temperature: 0 }), /--temperature must be a finite number above 0/);
  assert.throws(() => planBatch({ ...req, parallel: 0 }), /--parallel must be a positive integer/);
  writeFileSync(join(root, 'suite', 'b-fix', 'task.toml'), '[environment]\nmemory = "plenty"\n');
  assert.throws(
    () => planBatch(req),
    (e: unknown) => e instanceof TaskError && e.file === 'b-fix/task.toml' && e.field === 'environment.memory',
  );
  writeFileSync(join(root, 'suite', 'b-fix', 'task.toml'), '[agent]\ntimeout_sec = 30\n');
  writeFileSync(join(root, 'suite', 'b-fix', 'policy.json'), '{}');
  cpSync(join(EXAMPLES, 'hello-file'), join(root, 'nopolicy', 'hello'), { recursive: true });
  rmSync(join(root, 'nopolicy', 'hello', 'policy.json'));
  assert.throws(
    () => planBatch({ ...req, tasks: [join(root, 'nopolicy')] }),
    /has no policy\.json for the embedded engine; pass --engine-url/,
  );
  assert.doesNotThrow(() => planBatch({ ...req, tasks: [join(root, 'nopolicy')], engineUrl: 'http://127.0.0.1:9/v1' }));
  assert.equal(existsSync(out), false);
});

test('the --parallel default follows the cores and the largest task caps', () => {
  const task = (cpus?: number, memoryMb?: number) => ({ environment: { cpus, memoryMb } }) as Parameters<typeof defaultParallel>[0][number];
  assert.equal(defaultParallel([task(1, 2048)], 2, 24 * 1024), 2);
  assert.equal(defaultParallel([task(1, 2048), task(2, 1024)], 8, 64 * 1024), 4);
  assert.equal(defaultParallel([task(0.5, 1024)], 4, 2048), 1, 'memory bounds it: 75% of 2 GiB holds one 1 GiB task');
  assert.equal(defaultParallel([task(4)], 2, 64 * 1024), 1, 'never below 1');
  assert.equal(defaultParallel([task()], 16, 64 * 1024), 16, 'unset caps count as 1 CPU and 2 GiB');
});

test('writeBatch writes queued states and the manifest, and refuses to overwrite a batch', () => {
  const root = suite();
  const plan = planBatch({
    tasks: [join(root, 'suite')],
    harnesses: ['react'],
    groupSize: 2,
    outDir: join(root, 'b'),
    checkInstalled: false,
    parallel: 3,
  });
  writeBatch(plan);
  const m = readManifest(plan.dir);
  assert.equal(m.parallel, 3);
  assert.deepEqual(
    readRolloutStates(plan.dir).map((s) => s.rollout_id),
    ['hello-file.react.0', 'hello-file.react.1', 'b-fix.react.0', 'b-fix.react.1'],
  );
  assert.deepEqual(readdirSync(plan.dir).sort(), ['batch.json', 'rollouts']);
  assert.throws(() => writeBatch(plan), /already holds a batch .*batch resume/);
  writeFileSync(join(root, 'busy.txt'), 'x');
  assert.throws(() => writeBatch({ ...plan, dir: root }), /exists and is not empty/);
});

test('ids read back from batch.json and rollout states that would name a path outside the batch are refused, naming the file and field', () => {
  const root = suite();
  const plan = planBatch({
    tasks: [join(root, 'suite')],
    harnesses: ['react'],
    groupSize: 2,
    outDir: join(root, 'b'),
    checkInstalled: false,
    parallel: 1,
  });
  writeBatch(plan);
  const manifestFile = join(plan.dir, 'batch.json');
  const good = JSON.parse(readFileSync(manifestFile, 'utf8')) as {
    batch_id: string;
    groups: { group_id: string; rollout_ids: string[] }[];
  };
  const edits: [string, (m: typeof good) => void, RegExp][] = [
    ['batch_id', (m) => (m.batch_id = '../../outside'), /batch\.json: batch_id: must be an id/],
    ['rollout id', (m) => (m.groups[0]!.rollout_ids[1] = '../../../tmp/pwn'), /batch\.json: groups\.0\.rollout_ids\.1: must be an id/],
    ['group id', (m) => (m.groups[0]!.group_id = '/etc'), /batch\.json: groups\.0\.group_id: must be an id/],
  ];
  for (const [what, edit, message] of edits) {
    const hostile = structuredClone(good);
    edit(hostile);
    writeFileSync(manifestFile, JSON.stringify(hostile));
    assert.throws(
      () => readManifest(plan.dir),
      (e: Error) => e instanceof BatchFileError && message.test(e.message),
      what,
    );
  }
  writeFileSync(manifestFile, JSON.stringify(good));
  const [first] = readRolloutStates(plan.dir);
  const stateFile = join(plan.dir, 'rollouts', `${first!.rollout_id}.json`);
  const attempt = {
    attempt: 0,
    session_id: 'b1.x.0',
    started_at: 'now',
    ended_at: null,
    out_dir: '../../../home',
    outcome: 'running',
    trainable: false,
  };
  writeFileSync(stateFile, JSON.stringify({ ...first, attempts: [attempt] }));
  assert.throws(
    () => readRolloutState(plan.dir, first!.rollout_id),
    /rollouts\/hello-file\.react\.0\.json: attempts\.0\.out_dir: must be a path inside the batch directory/,
  );
  writeFileSync(
    stateFile,
    JSON.stringify({ ...first, attempts: [{ ...attempt, out_dir: 'attempts/hello-file.react.0/0', session_id: '../sessions/other' }] }),
  );
  assert.throws(() => readRolloutState(plan.dir, first!.rollout_id), /attempts\.0\.session_id: must be an id/);
  assert.throws(() => readRolloutState(plan.dir, '../batch'), /rollout id '\.\.\/batch' must be an id/);
});
