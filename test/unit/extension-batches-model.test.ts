// The Batches tree read from real batch directories (planned and written by src/batch/plan.ts, rollout
// states rewritten as a lab would): batch -> group -> rollout with class, reward and duration, group
// mean/std and the no-contrast flag, broken directories as error nodes naming the file; the folder
// setting; kube contexts from a kubeconfig; Submit Rollout Batch's plan step and lab child process.
import assert from 'node:assert/strict';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { test } from 'node:test';
import { acquireLock } from '../../src/batch/lock.js';
import { planBatch, writeBatch } from '../../src/batch/plan.js';
import { readRolloutStates, writeRolloutState, type RolloutState } from '../../src/batch/state.js';
import { planAndWriteBatch, startBatchLab } from '../../src/extension/batch-submit.js';
import {
  BatchesTreeModel,
  ShownBatchesTree,
  batchDirs,
  resolveBatchesFolder,
  type BatchNode,
  type BatchRolloutNode,
  type GroupNode,
} from '../../src/extension/batches-model.js';
import { CaptureStore } from '../../src/capture/store.js';
import { kubeconfigFiles } from '../../src/cluster/kubeconfig-files.js';
import { NoKubeconfigError, readKubeContexts } from '../../src/extension/kube-contexts.js';

import { chain } from './rollout-fixtures.js';

const EXAMPLES = join(__dirname, '..', '..', 'examples', 'tasks');

function tasksDir(): string {
  const root = mkdtempSync(join(tmpdir(), 'hl-batches-model-'));
  cpSync(join(EXAMPLES, 'hello-file'), join(root, 'tasks', 'hello-file'), { recursive: true });
  cpSync(join(EXAMPLES, 'fix-script'), join(root, 'tasks', 'fix-script'), { recursive: true });
  return root;
}

/** A batch of 2 tasks x react x 2 under `folder/name`, created at `now`. */
function batch(folder: string, name: string, now: Date): string {
  const root = tasksDir();
  const plan = planBatch({
    tasks: [join(root, 'tasks')],
    harnesses: ['react'],
    groupSize: 2,
    parallel: 2,
    outDir: join(folder, name),
    checkInstalled: false,
    timeoutSec: 30,
    now,
  });
  writeBatch(plan);
  return plan.dir;
}

function finish(dir: string, id: string, cls: NonNullable<RolloutState['class']>, reward: number | null, ms: number): void {
  const s = readRolloutStates(dir).find((x) => x.rollout_id === id)!;
  const discarded = reward === null;
  const session = `sess-${id}`;
  writeRolloutState(dir, {
    ...s,
    state: discarded ? 'discarded' : 'done',
    class: cls,
    reward,
    trainable: !discarded,
    session_id: session,
    attempts: [
      {
        attempt: 0,
        session_id: session,
        started_at: s.queued_at,
        ended_at: s.queued_at,
        out_dir: `attempts/${id}/0`,
        outcome: 'finished',
        trainable: !discarded,
      },
    ],
    started_at: s.queued_at,
    ended_at: s.queued_at,
    duration_ms: ms,
    error: discarded ? 'the sandbox was stopped from outside the lab' : null,
    n_calls: 2,
  });
}

test('batch -> group -> rollout: classes, rewards, durations, mean/std and NO CONTRAST', () => {
  const folder = mkdtempSync(join(tmpdir(), 'hl-batches-'));
  const dir = batch(folder, 'first', new Date('2026-01-01T10:00:00Z'));
  finish(dir, 'hello-file.react.0', 'completed', 1, 12_300);
  finish(dir, 'hello-file.react.1', 'completed', 1, 800);
  finish(dir, 'fix-script.react.0', 'policy_failure', 0, 2_000);
  finish(dir, 'fix-script.react.1', 'infra_error', null, 65_000);
  const model = new BatchesTreeModel(() => [folder]);
  const [b] = model.roots() as BatchNode[];
  assert.equal(b!.kind, 'batch');
  assert.match(b!.label, /^first \(b20260101-100000-[0-9a-f]{4}\)$/);
  // One attempt of four failed in the sandbox backend: the rate on the row, the causes in its tooltip.
  assert.equal(b!.description, 'finished · 4/4 finished · infra-failed 1/4 (25%) · docker');
  assert.match(b!.tooltip, /^Infra-failed attempts: 1 of 4 \(25%\); causes: other 1$/m);
  assert.equal(b!.contextValue, 'harnessLab.batch');
  for (const c of ['completed 2', 'policy_failure 1', 'infra_error 1']) assert.ok(b!.tooltip.includes(c), `${c} in ${b!.tooltip}`);

  const groups = model.children(b) as GroupNode[];
  // In the manifest's group order.
  assert.deepEqual(
    groups.map((g) => [g.label, g.description]),
    [
      ['fix-script.react', '2/2 · mean 0 · std - · FEWER THAN 2 TRAINABLE'],
      ['hello-file.react', '2/2 · mean 1 · std 0 · NO CONTRAST'],
    ],
  );
  assert.deepEqual(
    groups.map((g) => g.noContrast),
    [false, true],
  );
  assert.match(groups[1]!.tooltip, /No contrast: every trainable reward is equal/);

  const rollouts = model.children(groups[0]) as BatchRolloutNode[];
  assert.deepEqual(
    rollouts.map((r) => [r.label, r.description]),
    [
      ['#0 fix-script.react.0', 'policy_failure · reward 0 · 2.00 s'],
      ['#1 fix-script.react.1', 'infra_error · reward null · 1 m 5 s'],
    ],
  );
  assert.equal(rollouts[0]!.sessionFile, join(dir, 'capture', 'sessions', 'sess-fix-script.react.0.jsonl'));
  assert.match(rollouts[1]!.tooltip, /stopped from outside the lab/);
  assert.deepEqual(model.children(rollouts[0]), []);
});

test('a batch being run: queued and running rollouts, no class yet, no session file for the queued', () => {
  const folder = mkdtempSync(join(tmpdir(), 'hl-batches-'));
  const dir = batch(folder, 'live', new Date('2026-01-02T10:00:00Z'));
  const s = readRolloutStates(dir)[0]!;
  writeRolloutState(dir, {
    ...s,
    state: 'running',
    session_id: 'sess-live',
    attempts: [
      {
        attempt: 0,
        session_id: 'sess-live',
        started_at: new Date().toISOString(), // started now: not stalled
        ended_at: null,
        out_dir: 'attempts/x/0',
        outcome: 'running',
        trainable: false,
      },
    ],
    started_at: s.queued_at,
  });
  const model = new BatchesTreeModel(() => [folder]);
  const [b] = model.roots() as BatchNode[];
  assert.match(b!.description, /^(idle|interrupted) · 0\/4 finished · docker$/);
  const [g] = model.children(b) as GroupNode[];
  assert.equal(g!.description, '0/2 · mean - · std -');
  const [running, queued] = model.children(g) as BatchRolloutNode[];
  assert.equal(running!.description, 'running');
  assert.ok(running!.sessionFile);
  assert.equal(queued!.description, 'queued');
  assert.equal(queued!.sessionFile, null);
});

test('a running rollout shows the calls captured so far, as they land in its session file', async () => {
  const folder = mkdtempSync(join(tmpdir(), 'hl-batches-'));
  const dir = batch(folder, 'live', new Date('2026-01-02T10:00:00Z'));
  const s = readRolloutStates(dir)[0]!;
  writeRolloutState(dir, {
    ...s,
    state: 'running',
    session_id: 'sess-live',
    attempts: [
      {
        attempt: 0,
        session_id: 'sess-live',
        started_at: new Date().toISOString(), // started now: not stalled
        ended_at: null,
        out_dir: 'attempts/x/0',
        outcome: 'running',
        trainable: false,
      },
    ],
    started_at: s.queued_at,
  });
  const model = new BatchesTreeModel(() => [folder]);
  const running = () => {
    const [b] = model.roots() as BatchNode[];
    return (model.children(model.children(b)[0]) as BatchRolloutNode[])[0]!;
  };
  assert.equal(running().description, 'running', 'no session file yet: no count');
  assert.equal(running().liveCalls, null);
  // Appended as the batch's capture store does (a local proxy, or a cluster batch's mirror).
  const store = new CaptureStore(join(dir, 'capture'));
  await store.append('sess-live', {
    type: 'session',
    session_id: 'sess-live',
    created_at: s.queued_at,
    model: 'm',
    engine_url: 'http://e',
    max_model_calls: 0,
    metadata: {},
  });
  assert.equal(running().description, 'running · 0 calls');
  const calls = chain(3).map((c) => ({ ...c, session_id: 'sess-live' }));
  await store.append('sess-live', { type: 'call', ...calls[0]! });
  assert.equal(running().description, 'running · 1 call');
  await store.append('sess-live', { type: 'call', ...calls[1]! });
  await store.append('sess-live', { type: 'call', ...calls[2]! });
  assert.equal(running().description, 'running · 3 calls');
  assert.match(running().tooltip, /3 call\(s\) captured so far/);
  await store.close();
  // Finished: class and reward instead of the live count.
  finish(dir, s.rollout_id, 'completed', 1, 900);
  assert.equal(running().description, 'completed · reward 1 · 900 ms');
});

test('the shown tree: a re-read with nothing new changes nothing; a call or a finish updates its rows in place; a new batch reshapes', async () => {
  const folder = mkdtempSync(join(tmpdir(), 'hl-batches-'));
  const dir = batch(folder, 'live', new Date('2026-01-02T10:00:00Z'));
  const s = readRolloutStates(dir)[0]!;
  writeRolloutState(dir, {
    ...s,
    state: 'running',
    session_id: 'sess-live',
    attempts: [
      {
        attempt: 0,
        session_id: 'sess-live',
        started_at: new Date().toISOString(), // started now: not stalled
        ended_at: null,
        out_dir: 'attempts/x/0',
        outcome: 'running',
        trainable: false,
      },
    ],
    started_at: s.queued_at,
  });
  const tree = new ShownBatchesTree(new BatchesTreeModel(() => [folder]));
  const [b] = tree.children() as BatchNode[];
  const [g] = tree.children(b) as GroupNode[];
  const [running, queued] = tree.children(g) as BatchRolloutNode[];
  assert.equal(running!.description, 'running');
  assert.deepEqual(tree.reread(), { kind: 'none' }, 'the same files: nothing to re-render');
  // A call lands: only the running rollout's row, as the same object the view handed out.
  const store = new CaptureStore(join(dir, 'capture'));
  await store.append('sess-live', {
    type: 'session',
    session_id: 'sess-live',
    created_at: s.queued_at,
    model: 'm',
    engine_url: 'http://e',
    max_model_calls: 0,
    metadata: {},
  });
  await store.append('sess-live', { type: 'call', ...chain(1).map((c) => ({ ...c, session_id: 'sess-live' }))[0]! });
  await store.close();
  const calls = tree.reread();
  assert.equal(calls.kind, 'rows');
  assert.deepEqual(calls.kind === 'rows' ? calls.nodes : [], [running]);
  assert.equal(running!.description, 'running · 1 call');
  assert.equal((tree.children(g) as BatchRolloutNode[])[0], running, 'children hand out the objects already shown');
  assert.deepEqual(tree.reread(), { kind: 'none' });
  // Another rollout starts: only its row. A batch or group row that changed here would make VS Code drop
  // its rollouts' handles until re-read, and a context-menu pick on a running rollout then got no rollout.
  const second = readRolloutStates(dir)[1]!;
  writeRolloutState(dir, { ...second, state: 'running', session_id: 'sess-second', started_at: s.queued_at });
  const started = tree.reread();
  assert.deepEqual(started.kind === 'rows' ? started.nodes : started, [queued], 'only the started rollout row changes');
  writeRolloutState(dir, second);
  assert.deepEqual(tree.reread().kind, 'rows');
  // It finishes: its row, its group's (1/2, mean) and the batch's (1/4 finished), all in place.
  finish(dir, s.rollout_id, 'completed', 1, 900);
  const done = tree.reread();
  assert.equal(done.kind, 'rows');
  assert.deepEqual(new Set(done.kind === 'rows' ? done.nodes : []), new Set([b, g, running]));
  assert.equal(running!.description, 'completed · reward 1 · 900 ms');
  assert.equal(running!.rollout.class, 'completed', "the node's data follows, not only its text");
  assert.match(b!.description, /1\/4 finished/);
  assert.equal(queued!.description, 'queued');
  // A second batch: the tree's shape changed, so the whole tree is read again (new objects).
  batch(folder, 'second', new Date('2026-01-03T10:00:00Z'));
  assert.deepEqual(tree.reread(), { kind: 'shape' });
  const roots = tree.children() as BatchNode[];
  assert.deepEqual(
    roots.map((n) => basename(n.dir)),
    ['second', 'live'],
    'newest first',
  );
  assert.notEqual(roots[1], b);
});

test('the shown tree says while a lab runs a batch (the view then re-reads on a timer too, not only on file events)', () => {
  const folder = mkdtempSync(join(tmpdir(), 'hl-batches-running-'));
  const dir = batch(folder, 'labbed', new Date('2026-01-02T10:00:00Z'));
  const tree = new ShownBatchesTree(new BatchesTreeModel(() => [folder]));
  tree.reread();
  assert.equal(tree.anyRunning(), false, 'no lab holds it');
  const lock = acquireLock(dir, 'batch submit');
  tree.reread();
  assert.equal(tree.anyRunning(), true, 'this process holds its lock: a lab runs it');
  lock.release();
  tree.reread();
  assert.equal(tree.anyRunning(), false, 'the lab is gone');
  rmSync(folder, { recursive: true, force: true });
});

test('broken directories are error nodes naming the file; newest batch first, errors last', () => {
  const folder = mkdtempSync(join(tmpdir(), 'hl-batches-'));
  const older = batch(folder, 'older', new Date('2026-01-01T10:00:00Z'));
  const newer = batch(folder, 'newer', new Date('2026-02-01T10:00:00Z'));
  mkdirSync(join(folder, 'torn'));
  writeFileSync(join(folder, 'torn', 'batch.json'), '{"schema_version": 1,');
  const missing = batch(folder, 'missing-rollout', new Date('2026-03-01T10:00:00Z'));
  const gone = readRolloutStates(missing)[0]!.rollout_id;
  // Rollout state files are what a lab rewrites: one deleted by hand.
  rmSync(join(missing, 'rollouts', `${gone}.json`));
  mkdirSync(join(folder, 'bad-field', 'rollouts'), { recursive: true });
  writeFileSync(join(folder, 'bad-field', 'batch.json'), JSON.stringify({ schema_version: 1, batch_id: 'x' }));
  mkdirSync(join(folder, 'not-a-batch'));
  writeFileSync(join(folder, 'notes.json'), '{}');

  assert.deepEqual(
    batchDirs(folder)
      .map((d) => d.slice(folder.length + 1))
      .sort(),
    ['bad-field', 'missing-rollout', 'newer', 'older', 'torn'],
  );
  const roots = new BatchesTreeModel(() => [folder]).roots();
  assert.deepEqual(
    roots.filter((n) => n.kind === 'batch').map((n) => n.dir),
    [newer, older],
  );
  const errors = roots.filter((n) => n.kind === 'error');
  assert.deepEqual(
    roots.slice(2).map((n) => n.kind),
    ['error', 'error', 'error'],
  );
  const byDir = new Map(errors.map((e) => [e.dir.slice(folder.length + 1), e]));
  assert.equal(byDir.get('torn')!.file, join(folder, 'torn', 'batch.json'));
  assert.equal(byDir.get('torn')!.label, 'torn: cannot read batch.json');
  assert.match(byDir.get('torn')!.description, /^not JSON: /);
  assert.equal(byDir.get('missing-rollout')!.file, join(missing, 'rollouts', `${gone}.json`));
  assert.match(byDir.get('missing-rollout')!.description, /missing: the manifest lists this rollout/);
  assert.match(byDir.get('bad-field')!.description, /^created_at: /);
  assert.match(byDir.get('bad-field')!.tooltip, new RegExp(`^${join(folder, 'bad-field', 'batch.json').replace(/[.]/g, '\\.')}\\n`));
  // No folder yet (nothing submitted): an empty tree, not an error.
  assert.deepEqual(new BatchesTreeModel(() => [join(folder, 'nope')]).roots(), []);
});

test('the batches folder setting: relative to the workspace, absolute as is, empty means the default', () => {
  assert.equal(resolveBatchesFolder('harness-lab-batches', '/ws'), '/ws/harness-lab-batches');
  assert.equal(resolveBatchesFolder('  out/batches ', '/ws'), '/ws/out/batches');
  assert.equal(resolveBatchesFolder('/data/batches', '/ws'), '/data/batches');
  assert.equal(resolveBatchesFolder('', '/ws'), '/ws/harness-lab-batches');
});

test('kube contexts come from $KUBECONFIG (a path list) or ~/.kube/config; none is an error saying where it looked', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'hl-kube-'));
  const kubeconfig = (contexts: [string, string, string?][], current: string) =>
    [
      'apiVersion: v1',
      'kind: Config',
      `current-context: ${current}`,
      'clusters:',
      ...[...new Set(contexts.map((c) => c[1]))].flatMap((c) => [`- name: ${c}`, '  cluster:', '    server: https://127.0.0.1:6443']),
      'users:',
      '- name: me',
      '  user:',
      '    token: not-a-real-token',
      'contexts:',
      ...contexts.flatMap(([name, cluster, ns]) => [
        `- name: ${name}`,
        '  context:',
        `    cluster: ${cluster}`,
        '    user: me',
        ...(ns ? [`    namespace: ${ns}`] : []),
      ]),
    ].join('\n');
  const a = join(dir, 'a.yaml');
  const b = join(dir, 'b.yaml');
  writeFileSync(
    a,
    kubeconfig(
      [
        ['dev', 'kind-dev'],
        ['prod', 'gke-prod', 'training'],
      ],
      'prod',
    ),
  );
  writeFileSync(b, kubeconfig([['lab', 'k3s-lab']], 'lab'));
  const home = join(dir, 'home');
  const one = await readKubeContexts({ KUBECONFIG: a }, home);
  assert.deepEqual(one.contexts, [
    { name: 'dev', cluster: 'kind-dev', namespace: null },
    { name: 'prod', cluster: 'gke-prod', namespace: 'training' },
  ]);
  assert.equal(one.current, 'prod');
  const both = await readKubeContexts({ KUBECONFIG: `${a}:${b}` }, home);
  assert.deepEqual(both.contexts.map((c) => c.name).sort(), ['dev', 'lab', 'prod']);
  assert.equal(both.current, 'prod', 'the first file sets the current context');
  mkdirSync(join(home, '.kube'), { recursive: true });
  assert.deepEqual(kubeconfigFiles({}, home), [join(home, '.kube', 'config')]);
  await assert.rejects(
    readKubeContexts({}, home),
    (err: Error) => err instanceof NoKubeconfigError && err.message.includes(join(home, '.kube', 'config')),
  );
  writeFileSync(join(home, '.kube', 'config'), kubeconfig([['home-ctx', 'c']], 'home-ctx'));
  assert.deepEqual(
    (await readKubeContexts({}, home)).contexts.map((c) => c.name),
    ['home-ctx'],
  );
});

test('Submit Rollout Batch plans into <folder>/<batch id>; a bad request writes nothing', async () => {
  const root = tasksDir();
  const folder = join(root, 'harness-lab-batches');
  const plan = await planAndWriteBatch({
    tasks: [join(root, 'tasks', 'hello-file')],
    harnesses: ['react'],
    groupSize: 2,
    backend: 'docker',
    folder,
    engineUrl: null,
  });
  assert.equal(plan.dir, join(folder, plan.manifest.batch_id));
  assert.ok(existsSync(join(plan.dir, 'batch.json')));
  assert.deepEqual(
    readRolloutStates(plan.dir).map((s) => [s.rollout_id, s.state]),
    [
      ['hello-file.react.0', 'queued'],
      ['hello-file.react.1', 'queued'],
    ],
  );
  const before = readdirSync(folder);
  await assert.rejects(
    planAndWriteBatch({
      tasks: [join(root, 'tasks', 'hello-file')],
      harnesses: ['react'],
      groupSize: 1,
      backend: 'docker',
      folder,
      engineUrl: null,
    }),
    /group size|group-size|at least 2/i,
  );
  await assert.rejects(
    planAndWriteBatch({
      tasks: [join(root, 'tasks', 'hello-file')],
      harnesses: ['no-such-harness'],
      groupSize: 2,
      backend: 'docker',
      folder,
      engineUrl: null,
    }),
    /no-such-harness/,
  );
  assert.deepEqual(readdirSync(folder), before);
});

test('the lab child: lines as they come, its exit code, a missing CLI bundle named', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'hl-lab-child-'));
  const cli = join(dir, 'cli.js');
  // Stands in for dist/cli.js: prints its argv and exits as a cancelled batch does.
  writeFileSync(
    cli,
    "process.stdout.write('first\\nsecond ' + process.argv.slice(2).join(' ') + '\\nno newline'); process.stderr.write('electron ' + process.env.ELECTRON_RUN_AS_NODE + '\\n'); process.exitCode = 1;",
  );
  const lines: string[] = [];
  const lab = startBatchLab({ cliJs: cli, dir: '/some/batch', cwd: dir, onLine: (l) => lines.push(l) });
  assert.equal(await lab.exited, 1);
  assert.deepEqual(lines.sort(), ['electron 1', 'first', 'no newline', 'second batch resume /some/batch'].sort());
  assert.match(lab.output(), /second batch resume/);
  const cancel = startBatchLab({ cliJs: cli, dir: '/some/batch', cwd: dir, sub: 'cancel' });
  assert.equal(await cancel.exited, 1);
  assert.match(cancel.output(), /second batch cancel \/some\/batch/);
  assert.throws(() => startBatchLab({ cliJs: join(dir, 'missing.js'), dir: '/x', cwd: dir }), /missing\.js is missing/);
});

test('a running rollout with no sign of life for the stall time is flagged on its row, with where it stands', () => {
  const folder = mkdtempSync(join(tmpdir(), 'hl-batches-'));
  const dir = batch(folder, 'stuck', new Date('2026-01-03T10:00:00Z'));
  const s = readRolloutStates(dir)[0]!;
  const started = (ago: number) => new Date(Date.now() - ago * 1000).toISOString();
  const running = (ago: number) =>
    writeRolloutState(dir, {
      ...s,
      state: 'running',
      session_id: 'sess-stuck',
      attempts: [
        {
          attempt: 0,
          session_id: 'sess-stuck',
          started_at: started(ago),
          ended_at: null,
          out_dir: 'attempts/x/0',
          outcome: 'running',
          trainable: false,
        },
      ],
      started_at: started(ago),
    });
  const rolloutRow = () => {
    const model = new BatchesTreeModel(() => [folder]);
    const [b] = model.roots() as BatchNode[];
    const [g] = model.children(b) as GroupNode[];
    return (model.children(g) as BatchRolloutNode[])[0]!;
  };
  running(60);
  assert.equal(rolloutRow().description, 'running');
  running(900);
  const row = rolloutRow();
  assert.equal(row.description, 'running · STALLED (starting sandbox)');
  assert.match(row.tooltip, /^Stalled: no model call and no sandbox output for 9\d\d s \(starting sandbox\)$/m);
});
