import assert from 'node:assert/strict';
import { test } from 'node:test';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type * as k8s from '@kubernetes/client-node';
import { parseTrainConfig, type RunSummary } from '../../src/training/trainer-jobs.js';
import { podWaiting } from '../../src/training/trainer-pods.js';
import { parseServeMetrics } from '../../src/training/rollout-server.js';
import type { ServerStatus } from '../../src/training/run-lifecycle.js';
import {
  age,
  configSummary,
  describeData,
  errorNode,
  noLogsYet,
  runNodes,
  serverNode,
  statusText,
  trainingConfigs,
} from '../../src/extension/training-runs-model.js';

const now = Date.parse('2026-12-01T12:00:00Z');
const run = (over: Partial<RunSummary>): RunSummary => ({
  name: 'r',
  trainer: 'trl',
  kind: 'TrainJob',
  phase: 'Running',
  detail: '',
  created: '2026-12-01T11:55:00Z',
  namespace: 'rl',
  ...over,
});

test('age is kubectl-style: seconds while under 10 minutes (so it ticks), then coarse', () => {
  assert.deepEqual(
    ['2026-12-01T11:59:30Z', '2026-12-01T11:54:48Z', '2026-12-01T11:30:00Z', '2026-12-01T06:00:00Z', '2026-11-25T12:00:00Z'].map((c) =>
      age(c, now),
    ),
    ['30s', '5m12s', '30m', '6h', '6d'],
  );
  assert.notEqual(age('2026-12-01T11:54:48Z', now), age('2026-12-01T11:54:48Z', now + 5000), 'five seconds later the age has moved');
  assert.equal(age(undefined, now), '');
});

test('runs become nodes with trainer, phase and age; finished runs get their own contextValue', () => {
  const nodes = runNodes(
    [
      run({ name: 'verl-1', trainer: 'verl', kind: 'RayJob', detail: 'job RUNNING' }),
      run({ name: 'trl-1', phase: 'Failed', detail: 'Failed (OOM)' }),
    ],
    now,
    { context: 'c', namespace: 'rl' },
  );
  assert.deepEqual(
    nodes.map((n) => [n.label, n.kind === 'run' ? n.description : '', n.icon, n.kind === 'run' ? n.contextValue : '']),
    [
      ['verl-1', 'verl · Running · 5m0s', 'sync~spin', 'harnessLab.trainingRun'],
      ['trl-1', 'trl · Failed · 5m0s', 'error', 'harnessLab.trainingRun.finished'],
    ],
  );
  assert.match(nodes[0]!.tooltip, /RayJob rl\/verl-1\ntrainer: verl\nphase: Running \(job RUNNING\)/);
  assert.equal(new Set(nodes.map((n) => n.id)).size, 2);
});

test('no runs and errors are one message node', () => {
  assert.deepEqual(
    runNodes([], now, { context: 'double', namespace: 'rl' }).map((n) => [n.kind, n.label]),
    [['message', 'No training runs in rl (double)']],
  );
  assert.equal(errorNode('kube context "x" is unreachable').tooltip, 'kube context "x" is unreachable');
});

test('status bar text while runs are followed', () => {
  assert.equal(statusText([]), undefined);
  assert.equal(statusText([{ name: 'a', phase: 'Running' }]), '$(sync) a: Running');
  assert.equal(
    statusText([
      { name: 'a', phase: 'Running' },
      { name: 'b', phase: 'Pending' },
    ]),
    '$(sync) 2 training runs (1 running)',
  );
});

const pod = (name: string, status: k8s.V1PodStatus): k8s.V1Pod => ({ metadata: { name }, status });
const waitingOn = (reason: string, message = '') => ({
  phase: 'Pending',
  containerStatuses: [{ name: 'trainer', image: 'x', imageID: '', ready: false, restartCount: 0, state: { waiting: { reason, message } } }],
});

test('waiting reasons: a bad image, an unschedulable pod, a container being created, a bare Pending; a running pod is no wait', () => {
  assert.deepEqual(podWaiting([pod('p1', waitingOn('ImagePullBackOff', 'Back-off pulling image "ghcr.io/x/trl:nope"'))]), {
    pod: 'p1',
    reason: 'ImagePullBackOff',
    message: 'Back-off pulling image "ghcr.io/x/trl:nope"',
    stuck: true,
  });
  assert.deepEqual(
    podWaiting([
      pod('p2', {
        phase: 'Pending',
        conditions: [
          {
            type: 'PodScheduled',
            status: 'False',
            reason: 'Unschedulable',
            message: '0/3 nodes are available: 3 Insufficient nvidia.com/gpu.',
          },
        ],
      }),
    ]),
    { pod: 'p2', reason: 'Unschedulable', message: '0/3 nodes are available: 3 Insufficient nvidia.com/gpu.', stuck: true },
  );
  assert.equal(podWaiting([pod('p3', waitingOn('ContainerCreating'))])!.stuck, false);
  assert.deepEqual(podWaiting([pod('p4', { phase: 'Pending' })]), { pod: 'p4', reason: 'Pending', message: '', stuck: false });
  // The stuck reason wins over a transient one among several pods; a running pod means no wait.
  assert.equal(podWaiting([pod('a', waitingOn('ContainerCreating')), pod('b', waitingOn('ErrImagePull'))])!.reason, 'ErrImagePull');
  assert.equal(
    podWaiting([
      pod('r', {
        phase: 'Running',
        containerStatuses: [{ name: 't', image: 'x', imageID: '', ready: true, restartCount: 0, state: { running: {} } }],
      }),
    ]),
    null,
  );
  assert.equal(podWaiting([pod('d', { phase: 'Succeeded' })]), null);
  assert.equal(podWaiting([]), null);
});

test('a run whose pod waits shows as Pending with the reason, not Running; Show Logs says why there is no log', () => {
  const w = podWaiting([pod('trl-1-node-0', waitingOn('ImagePullBackOff', 'Back-off pulling image "x"'))]);
  const n = runNodes(
    [run({ name: 'trl-1', kind: 'Job', phase: 'Running', detail: '1 pod(s) active' })],
    now,
    { context: 'c', namespace: 'rl' },
    new Map([['trl-1', w]]),
    new Map([['trl-1', 'export b1/trl.jsonl on PVC exports']]),
  )[0]!;
  assert.ok(n.kind === 'run');
  assert.equal(n.description, 'trl · Pending: ImagePullBackOff · 5m0s');
  assert.equal(n.phase, 'Pending');
  assert.equal(n.icon, 'warning');
  assert.match(n.tooltip, /phase: Pending \(ImagePullBackOff: Back-off pulling image "x" \(pod trl-1-node-0\)\)/);
  assert.match(n.tooltip, /data: export b1\/trl\.jsonl on PVC exports/);
  assert.equal(
    noLogsYet('trl-1', w),
    'training run trl-1 has no log yet: pod trl-1-node-0 is waiting: ImagePullBackOff (Back-off pulling image "x"); it will not start by itself',
  );
  assert.match(noLogsYet('trl-1', null), /no started pod yet \(none created so far/);
  // A finished run keeps its phase whatever its pods say.
  const done = runNodes([run({ phase: 'Failed' })], now, { context: 'c', namespace: 'rl' }, new Map([['r', w]]))[0]!;
  assert.ok(done.kind === 'run' && done.phase === 'Failed');
});

const CONFIG = `name: trl-grpo
image: ghcr.io/example/trl:0.20
command: [accelerate, launch]
numNodes: 2
gpusPerNode: 8
data: {source: export, file: b1/b1.trl.jsonl, volume: {pvc: {claimName: exports}}}
`;

test('the config picker lists only files the config schema accepts; the summary says nodes, GPUs, image and data', () => {
  const dir = mkdtempSync(join(tmpdir(), 'hl-train-configs-'));
  const files = {
    'train.yaml': CONFIG,
    'ci.yml': 'on: push\njobs: {}\n',
    'package.json': '{"name":"x","image":"y","data":1}',
    'broken.yaml': 'image: x\ndata: {source: nowhere}\n',
    'rs.json': JSON.stringify({
      image: 'i',
      command: ['python', 'train.py'],
      data: { source: 'rollout-server', url: 'http://serve.rl.svc:8200' },
    }),
  };
  for (const [f, text] of Object.entries(files)) writeFileSync(join(dir, f), text);
  const found = trainingConfigs(Object.keys(files).map((f) => ({ path: join(dir, f), rel: f })));
  assert.deepEqual(
    found.map((f) => f.rel),
    ['rs.json', 'train.yaml'],
  );
  assert.equal(configSummary(found[1]!.config), '2 node(s) x 8 GPU(s), image ghcr.io/example/trl:0.20, data export b1/b1.trl.jsonl');
  assert.equal(configSummary(found[0]!.config), '1 node(s), no GPU, image i, data rollout server http://serve.rl.svc:8200');
});

test("a run's data source is matched to a local export of a batch", () => {
  const c = parseTrainConfig(CONFIG, 'train.yaml');
  const exports = [
    {
      file: '/w/harness-lab-batches/b1.trl.jsonl',
      manifest: '/w/harness-lab-batches/b1.trl.jsonl.manifest.json',
      format: 'trl',
      batchId: 'b1',
      rows: 4,
    },
  ];
  const d = describeData(c.data, exports);
  assert.equal(d.text, 'export b1/b1.trl.jsonl on PVC exports (trl export of batch b1, 4 rows)');
  assert.equal(d.match?.manifest, '/w/harness-lab-batches/b1.trl.jsonl.manifest.json');
  assert.deepEqual(describeData(c.data, []), { text: 'export b1/b1.trl.jsonl on PVC exports', match: null });
  assert.equal(describeData({ source: 'rollout-server', url: 'http://s:1' }, exports).text, 'the rollout server http://s:1');
});

// What serve's /metrics says after 12 rollouts (src/serve/rollouts.ts writeMetrics), read by the same
// parser `train status` uses.
const METRICS = `# TYPE harness_lab_serve_sandboxes gauge
harness_lab_serve_sandboxes{state="waiting_slot"} 1
harness_lab_serve_sandboxes{state="running"} 2
harness_lab_serve_rollouts_total{class="completed"} 8
harness_lab_serve_rollouts_total{class="policy_failure"} 1
harness_lab_serve_rollouts_total{class="infra_error"} 3
harness_lab_serve_infra_failures_total{cause="image_pull"} 2
harness_lab_serve_infra_failures_total{cause="sandbox_start_timeout"} 1
harness_lab_serve_reward_sum 6.5
harness_lab_serve_scored_total 9
harness_lab_serve_breaker_state{state="closed"} 1
harness_lab_serve_breaker_state{state="half-open"} 0
harness_lab_serve_breaker_state{state="open"} 0
`;

const status = (over: Partial<ServerStatus> & { state?: ServerStatus['health']['state']; detail?: string }): ServerStatus => ({
  name: 'r-serve',
  health: { state: over.state ?? 'Ready', detail: over.detail ?? 'pod r-serve-abc ready', pod: 'r-serve-abc' },
  progress: undefined,
  error: undefined,
  ...over,
});

test('a run with a rollout server has it as a child row: state, rollouts done by class, infra-failed rate, reward mean', () => {
  const progress = parseServeMetrics(METRICS);
  const servers = new Map([['trl-1', status({ progress })]]);
  const nodes = runNodes(
    [run({ name: 'trl-1', kind: 'Job' }), run({ name: 'verl-1', trainer: 'verl' })],
    now,
    { context: 'c', namespace: 'rl' },
    new Map(),
    new Map(),
    servers,
  );
  const [withServer, without] = nodes as Extract<(typeof nodes)[number], { kind: 'run' }>[];
  assert.equal(without!.server, null, 'a run without a server has no child');
  const s = withServer!.server!;
  assert.equal(s.kind, 'server');
  assert.equal(s.id, 'rl/Job/trl-1/server');
  assert.equal(s.run, 'trl-1');
  assert.equal(s.label, 'rollout server r-serve');
  assert.equal(s.description, 'Ready · 12 done (completed 8, policy_failure 1, infra_error 3) · infra-failed 25.0% · reward 0.722');
  assert.equal(s.icon, 'server-process');
  // The tooltip is what `train status` prints, a part a line: causes, running, breaker.
  assert.equal(
    s.tooltip,
    [
      'rollout server r-serve: Ready (pod r-serve-abc ready)',
      '12 rollout(s) done (completed 8, policy_failure 1, infra_error 3), 3 running',
      'infra-failed 25.0% (image_pull 2, sandbox_start_timeout 1)',
      'reward mean 0.722 over 9',
      'breaker closed',
    ].join('\n'),
  );
  assert.match(withServer!.tooltip, /\nrollout server r-serve: Ready \(pod r-serve-abc ready\); 12 rollout\(s\) done/);
  assert.doesNotMatch(without!.tooltip, /rollout server/);
  assert.notEqual(s.id, withServer!.id);
});

test('a rollout server that starts, waits, is gone, or whose metrics cannot be read says so in its row', () => {
  const row = (st: ServerStatus) => serverNode('rl/Job/r', 'r', st);
  const starting = row(status({ state: 'Starting', detail: 'pod r-serve-abc not ready yet' }));
  assert.deepEqual(
    [starting.description, starting.icon, starting.state],
    ['Starting · pod r-serve-abc not ready yet', 'loading~spin', 'Starting'],
  );
  const waiting = row(status({ state: 'Waiting', detail: 'r-serve-abc: ImagePullBackOff (no such image)' }));
  assert.deepEqual([waiting.description, waiting.icon], ['Waiting · r-serve-abc: ImagePullBackOff (no such image)', 'warning']);
  const gone = row(status({ state: 'Gone', detail: 'Deployment rl/r-serve is not there' }));
  assert.deepEqual([gone.description, gone.icon], ['Gone · Deployment rl/r-serve is not there', 'circle-slash']);
  const unread = row(status({ error: 'HTTP 401: bad key' }));
  assert.equal(unread.description, 'Ready · metrics unreadable');
  assert.match(unread.tooltip, /its \/metrics could not be read: HTTP 401: bad key/);
  // No rollout yet: no reward, not a 0; an open breaker is shown.
  const fresh = row(
    status({
      progress: parseServeMetrics('harness_lab_serve_breaker_state{state="open"} 1\nharness_lab_serve_breaker_state{state="closed"} 0\n'),
    }),
  );
  assert.equal(fresh.description, 'Ready · 0 done · infra-failed 0.0% · no reward yet · breaker open');
});

test('a config that deploys its rollout server is summarised by the splits it serves', () => {
  const dir = mkdtempSync(join(tmpdir(), 'hl-train-serve-cfg-'));
  const c = parseTrainConfig(
    JSON.stringify({
      image: 'i',
      command: ['t'],
      data: { source: 'rollout-server', serve: { datasets: { train: 'tasks', eval: 'held-out' } } },
    }),
    join(dir, 'rs.json'),
  );
  assert.equal(configSummary(c), '1 node(s), no GPU, image i, data a rollout server deployed with the run (splits train, eval)');
  assert.equal(describeData(c.data, []).text, 'a rollout server deployed with the run (splits train, eval)');
});
