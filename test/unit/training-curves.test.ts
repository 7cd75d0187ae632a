// A training run's curves: its scalars parsed from the three log formats (the lab's JSON lines, TRL's
// printed dicts, veRL's console lines), drawn as SVG panels with runs overlaid, and the script-free page.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { curvesHtml, extent, panelSvg, PANELS, tickLabel } from '../../src/report/curves-svg.js';
import { curvesPage } from '../../src/extension/training-curves-page.js';
import { parseMetricLine, parseMetrics, parseMetricsFile } from '../../src/training/metrics.js';
import { metricsFileRunName } from '../../src/extension/metrics-file-runs.js';

const JSON_LOG = [
  'loading model...',
  '{"step": 1, "reward_mean": 0.25, "reward_std": 0.4, "loss": 0.5, "kl": 0.0, "learning_rate": 1e-6}',
  '2026-12-02 10:00:01 INFO {"step": 2, "reward_mean": 0.5, "reward_std": 0.3, "loss": 0.4, "kl": 0.01, "learning_rate": 1e-6, "tokens": 900}',
  '{"model": "qwen", "lr_schedule": "cosine"}',
  '{"step": 2, "reward_mean": 0.55}',
].join('\n');

const TRL_LOG = [
  "{'loss': 0.0123, 'grad_norm': 1.5, 'learning_rate': 1e-06, 'num_tokens': 2048.0, 'reward': 0.375, 'reward_std': 0.2165, 'kl': 0.00041, 'epoch': 0.02}",
  ' 10%|#         | 1/10 [00:05<00:45,  5.01s/it]',
  "{'loss': '0.0101', 'learning_rate': 9e-07, 'reward': 0.5, 'reward_std': 0.25, 'kl': 0.0007, 'epoch': 0.04}",
  "{'train_runtime': 12.5, 'train_samples_per_second': 3.2, 'epoch': 1.0}",
].join('\n');

const VERL_LOG = [
  '(TaskRunner pid=1) step:1 - actor/entropy:0.61 - actor/pg_loss:0.031 - actor/kl_loss:0.002 - actor/lr:1e-06 - critic/score/mean:0.125 - critic/score/std:0.33',
  '(TaskRunner pid=1) step:2 - actor/pg_loss:0.027 - actor/kl_loss:0.003 - actor/lr:1e-06 - critic/score/mean:0.25 - critic/score/std:0.43',
].join('\n');

test('the lab JSON lines: step, the five canonical series and the other numbers; a step logged twice keeps its last value', () => {
  const m = parseMetrics(JSON_LOG);
  assert.equal(m.lines, 3, 'the config dump is no metrics line');
  assert.deepEqual(m.formats, ['json']);
  assert.deepEqual(m.series.reward_mean, [
    { step: 1, value: 0.25 },
    { step: 2, value: 0.55 },
  ]);
  assert.deepEqual(
    m.series.reward_std!.map((p) => p.value),
    [0.4, 0.3],
  );
  assert.deepEqual(
    m.series.kl!.map((p) => p.value),
    [0, 0.01],
  );
  assert.deepEqual(m.series.tokens, [{ step: 2, value: 900 }]);
  assert.equal(m.series.step, undefined, 'the step is the axis, not a series');
});

test("TRL's printed dicts (no step: the n-th dict is step n) and veRL's console lines map onto the same series", () => {
  const trl = parseMetrics(TRL_LOG);
  assert.equal(trl.lines, 2, 'the progress bar and the run summary are skipped');
  assert.deepEqual(trl.series.reward_mean, [
    { step: 1, value: 0.375 },
    { step: 2, value: 0.5 },
  ]);
  assert.deepEqual(
    trl.series.loss!.map((p) => p.value),
    [0.0123, 0.0101],
    'a quoted number is a number',
  );
  assert.deepEqual(
    trl.series.learning_rate!.map((p) => p.value),
    [1e-6, 9e-7],
  );
  assert.deepEqual(
    trl.series.epoch!.map((p) => p.value),
    [0.02, 0.04],
  );
  const verl = parseMetrics(VERL_LOG);
  assert.deepEqual(verl.formats, ['verl']);
  assert.deepEqual(verl.series.reward_mean, [
    { step: 1, value: 0.125 },
    { step: 2, value: 0.25 },
  ]);
  assert.deepEqual(
    verl.series.reward_std!.map((p) => p.value),
    [0.33, 0.43],
  );
  assert.deepEqual(
    verl.series.loss!.map((p) => p.value),
    [0.031, 0.027],
  );
  assert.deepEqual(
    verl.series.kl!.map((p) => p.value),
    [0.002, 0.003],
  );
  assert.deepEqual(verl.series['actor/entropy'], [{ step: 1, value: 0.61 }]);
  assert.equal(parseMetricLine('Epoch 1 done, nothing to see'), undefined);
  assert.equal(parseMetricLine('{"a": "b"}'), undefined);
});

test('panels: one polyline per run with its points, the reward band, axis ticks; an unlogged scalar says so', () => {
  const runs = [
    { name: 'trl-a', metrics: parseMetrics(TRL_LOG) },
    { name: 'verl-<b>', metrics: parseMetrics(VERL_LOG) },
  ];
  const reward = panelSvg(runs, PANELS[0]!);
  assert.equal((reward.match(/<polyline class="curve"/g) ?? []).length, 2);
  assert.equal((reward.match(/<polygon class="band"/g) ?? []).length, 2, 'mean ± std band per run');
  assert.match(reward, /data-run="verl-&lt;b&gt;" data-points="2"/, 'names escaped');
  const box = extent(runs, PANELS[0]!)!;
  assert.ok(Math.abs(box.y1 - 0.75) < 1e-9 && Math.abs(box.y0 - (0.125 - 0.33)) < 1e-9, JSON.stringify(box));
  assert.match(
    panelSvg([{ name: 'x', metrics: parseMetrics('{"step":1,"loss":2}') }], PANELS[2]!),
    /class="panel empty" data-metric="kl".*not logged/,
  );
  // A flat single point still gets a visible scale and a dot.
  assert.match(panelSvg([{ name: 'x', metrics: parseMetrics('{"step":1,"loss":2}') }], PANELS[1]!), /<circle /);
  assert.deepEqual([0, 1e-6, 1.05e-6, 0.000412, 123456, 0.5, 12.345].map(tickLabel), [
    '0',
    '1e-6',
    '1.05e-6',
    '4.12e-4',
    '1.23e+5',
    '0.5',
    '12.3',
  ]);
  const html = curvesHtml(runs);
  assert.equal((html.match(/<svg class="panel/g) ?? []).length, 4);
  assert.match(html, /<li data-run="trl-a">.*2 metric line\(s\) · hf-dict/);
});

test('the page: no script, a CSP with only its nonce style, each run with its data source and why it has no points', () => {
  const page = curvesPage(
    [
      {
        name: 'r1',
        metrics: parseMetrics(JSON_LOG),
        data: 'export b1/trl.jsonl on PVC exports (trl export of batch b1, 4 rows)',
        dataFile: '/tmp/b1.trl.jsonl.manifest.json',
        note: null,
      },
      {
        name: 'r2',
        metrics: parseMetrics(''),
        data: null,
        dataFile: null,
        note: 'training run r2 has no log yet: pod r2-x is waiting: ImagePullBackOff',
      },
    ],
    'NONCE',
    '12:00',
  );
  assert.ok(!/<script/i.test(page));
  assert.match(page, /content="default-src 'none'; style-src 'nonce-NONCE';"/);
  assert.match(
    page,
    /trains on export b1\/trl\.jsonl .*<a href="command:vscode\.open\?%5B%22file%3A%2F%2F%2Ftmp%2Fb1\.trl\.jsonl\.manifest\.json%22%5D">/,
  );
  assert.match(page, /r2<\/b>: data source unknown .*ImagePullBackOff/);
});

test("a metrics file: Hugging Face's trainer_state.json log_history, JSON lines (nested data flattened); anything else is refused naming the file", () => {
  const state = {
    best_metric: null,
    global_step: 20,
    log_history: [
      { epoch: 0.5, learning_rate: 1e-6, loss: 0.4, reward: 0.25, reward_std: 0.4, kl: 0.001, step: 10 },
      { epoch: 1, learning_rate: 5e-7, loss: 0.2, reward: 0.5, reward_std: 0.3, kl: 0.002, step: 20 },
      { train_runtime: 12.5, train_loss: 0.3, step: 20, epoch: 1 },
    ],
  };
  const hf = parseMetricsFile(JSON.stringify(state, null, 2), 'checkpoint-20/trainer_state.json');
  assert.deepEqual(hf.series.reward_mean, [
    { step: 10, value: 0.25 },
    { step: 20, value: 0.5 },
  ]);
  assert.deepEqual(
    hf.series.loss!.map((p) => p.step),
    [10, 20],
  );
  assert.deepEqual(hf.series.learning_rate!.at(-1), { step: 20, value: 5e-7 });
  assert.equal(hf.series.train_runtime!.length, 1, 'other numbers keep their own series');
  const lines = [
    JSON.stringify({ step: 1, reward_mean: 0.1, loss: 1 }),
    JSON.stringify({ step: 2, data: { 'critic/score/mean': 0.3, 'actor/pg_loss': 0.5, 'actor/kl_loss': 0.01 } }),
    '',
  ].join('\n');
  const jl = parseMetricsFile(lines, 'metrics.jsonl');
  assert.deepEqual(jl.series.reward_mean, [
    { step: 1, value: 0.1 },
    { step: 2, value: 0.3 },
  ]);
  assert.deepEqual(jl.series.kl, [{ step: 2, value: 0.01 }]);
  assert.throws(() => parseMetricsFile('{"name": "x"}\n', '/w/config.jsonl'), /\/w\/config\.jsonl holds no metrics: .*trainer_state\.json/);
  assert.throws(() => parseMetricsFile('not json', 'm.jsonl'), /m\.jsonl holds no metrics/);
  assert.equal(metricsFileRunName('/out/checkpoint-20/trainer_state.json'), 'checkpoint-20/trainer_state');
  assert.equal(metricsFileRunName('/out/run-a.metrics.jsonl'), 'run-a.metrics');
  const page = curvesPage(
    [{ name: 'run-a.metrics', metrics: jl, data: null, dataFile: null, note: null, source: '/out/run-a.metrics.jsonl' }],
    'n0nce',
    'now',
  );
  assert.match(page, /<b>run-a\.metrics<\/b>: from the metrics file \/out\/run-a\.metrics\.jsonl <a href="command:vscode\.open\?/);
});
