// Smoke test of the soak benchmark: 20 sessions for 10 s through a real proxy process (from src/),
// with 2 s baseline phases paced at the proxy's rate. It proves the entry runs end to end, verifies every session against the
// proxy and reports every field; it asserts no speeds and does not judge the RSS slope.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { assembleAnthropicStream } from '../../bench/soak-load.js';
import { leastSquares, parseSoakArgs, type SoakReport } from '../../bench/soak.js';

const ROOT = join(__dirname, '..', '..');
const dir = mkdtempSync(join(tmpdir(), 'hl-bench-soak-smoke-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const summaryKeys = ['count', 'max', 'mean', 'p50', 'p90', 'p99'];

test('bench soak --quick with tiny numbers: rolling sessions in two dialects, zero errors, every call stored, the report carries every field', () => {
  const out = join(dir, 'soak.json');
  const args = [
    '--import',
    'tsx',
    join(ROOT, 'bench', 'soak.ts'),
    '--quick',
    '--sessions',
    '20',
    '--minutes',
    String(10 / 60),
    '--baseline-s',
    '2',
    '--proxy-from-source',
    '--out',
    out,
  ];
  const r = spawnSync(process.execPath, args, { cwd: ROOT, encoding: 'utf8', timeout: 300_000 });
  assert.ok(r.status === 0 || r.status === 1, `exit ${r.status}: ${r.stderr}`);
  const report = JSON.parse(readFileSync(out, 'utf8')) as SoakReport;
  assert.equal(r.status, report.pass ? 0 : 1, 'the exit code says whether the run passed');
  assert.match(r.stderr, /^bucket \(\d+ s\)\s+calls\s+calls\/s/m, 'the table goes to stderr');

  assert.equal(report.bench, 'soak');
  assert.equal(report.config.sessions, 20);
  assert.equal(report.config.quick, true);
  assert.deepEqual(report.config.dialects, ['chat', 'anthropic']);
  assert.deepEqual(report.totals.errors, {}, `errors: ${JSON.stringify(report.totals.errors)} ${report.failures.join('; ')}`);
  assert.equal(report.totals.errors_total, 0);
  assert.equal(report.totals.proxy_log_errors, 0);
  assert.ok(report.totals.calls > 0);
  assert.equal(report.totals.stored_calls, report.totals.calls, 'every answered call is in the durable store');
  for (const kind of ['chat_json', 'chat_stream', 'anthropic_json', 'anthropic_stream'])
    assert.ok((report.totals.calls_by_kind[kind] ?? 0) > 0, `${kind} calls ran`);
  assert.equal(
    Object.values(report.totals.calls_by_kind).reduce((a, b) => a + b, 0),
    report.totals.calls,
  );
  assert.ok(report.totals.sessions_started > 20, 'ended sessions were replaced by new ones');
  assert.ok(report.totals.sessions_completed > 0);
  assert.equal(
    report.totals.sessions_verified,
    report.totals.sessions_completed,
    "every completed session's call count matched the proxy's",
  );

  assert.ok(report.minutes.length >= 1);
  assert.equal(
    report.minutes.reduce((n, m) => n + m.calls, 0),
    report.totals.calls,
    'the buckets hold every call',
  );
  for (const m of report.minutes)
    for (const key of ['p50_ms', 'p99_ms', 'added_p50_ms', 'added_p99_ms', 'calls_per_s'] as const)
      assert.equal(typeof m[key], 'number', `bucket ${m.minute} ${key}`);
  assert.deepEqual(Object.keys(report.latency).sort(), summaryKeys);
  assert.deepEqual(
    report.baseline.phases.map((p) => `${p.path}-${p.when}`),
    ['passthrough-after', 'direct-after'],
  );
  for (const p of report.baseline.phases) {
    assert.deepEqual(p.errors, {}, `${p.path} ${p.when}`);
    assert.ok(p.calls_ok > 0, `${p.path} ${p.when} answered calls`);
    // Paced at the proxy's rate: a phase can never start more calls than rate x duration (+1, the first).
    assert.ok(p.rate_per_s > 0, `${p.path} was paced`);
    assert.ok(
      p.calls_ok <= Math.ceil((p.rate_per_s + 0.05) * report.config.baselineS) + 1,
      `${p.path}: ${p.calls_ok} calls in ${report.config.baselineS} s at ${p.rate_per_s}/s`,
    );
  }
  assert.ok(report.baseline.direct.count > 0 && report.baseline.passthrough.count > 0);
  assert.match(report.baseline.method, /paced at the call rate the proxy sustained/);
  for (const v of [report.added.p50_ms, report.added.p99_ms, report.added.after_warmup_p50_ms, report.added.after_warmup_p99_ms])
    assert.equal(typeof v, 'number');

  assert.ok(report.rss.samples.length >= 5, 'RSS was sampled over the run');
  assert.ok(
    report.rss.samples.some((s) => typeof s[2] === 'number'),
    'the sessions the proxy knows were read from /health',
  );
  assert.ok(report.rss.peak_mib > 0);
  assert.ok(Number.isFinite(report.rss.slope_mib_per_min), 'a slope was fitted');
  assert.equal(report.rss.judged, false, 'a 10 s run does not judge the slope');
  assert.equal(report.rss.warmup_s, 2, 'warm-up is 20% of the soak');
  assert.ok(report.cpu.proxy_ms_per_call > 0 && (report.cpu.passthrough_ms_per_call ?? 0) > 0);
  assert.ok(report.health.polls > 0);
  assert.deepEqual(report.health.errors, {});
  assert.equal(typeof report.health.p99_ms, 'number');
  assert.equal(typeof report.host.load_1m_start, 'number');
});

test("soak flags: defaults, quick mode and bad values in the caller's terms", () => {
  const full = parseSoakArgs([], {});
  assert.equal(full.minutes, 10);
  assert.equal(full.sessions, 1000);
  assert.equal(full.bucketS, 60);
  assert.equal(full.warmupS, 120);
  const quick = parseSoakArgs([], { BENCH_QUICK: '1' });
  assert.equal(quick.minutes, 1);
  assert.equal(quick.sessions, 100);
  assert.equal(quick.bucketS, 10);
  assert.throws(() => parseSoakArgs(['--turns', '5,2'], {}), /--turns must be "N" or "min,max"/);
  assert.throws(() => parseSoakArgs(['--dialects', 'chat,gemini'], {}), /--dialects must be a comma-separated list of chat, anthropic/);
  assert.throws(() => parseSoakArgs(['--sessions', '1.5'], {}), /--sessions must be a whole number/);
  assert.throws(() => parseSoakArgs(['--minutes', '0'], {}), /--minutes must be a positive number/);
});

test('least-squares slope and the Anthropic stream assembler', () => {
  const fit = leastSquares([
    [0, 1],
    [1, 3],
    [2, 5],
    [3, 7],
  ]);
  assert.equal(fit.slope, 2);
  assert.equal(fit.intercept, 1);
  assert.equal(fit.r2, 1);
  assert.ok(Number.isNaN(leastSquares([[1, 1]]).slope));
  const sse = (events: object[]) => events.map((e) => `event: ${(e as { type: string }).type}\ndata: ${JSON.stringify(e)}\n\n`).join('');
  const events = [
    { type: 'message_start', message: { role: 'assistant' } },
    { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
    { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Run ' } },
    { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'it.' } },
    { type: 'content_block_start', index: 1, content_block: { type: 'tool_use', id: 'toolu_1', name: 'bash', input: {} } },
    { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '{"command":' } },
    { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '"ls"}' } },
    { type: 'message_delta', delta: { stop_reason: 'tool_use' } },
  ];
  assert.equal(assembleAnthropicStream(sse(events)), undefined, 'no message_stop: the stream was cut');
  assert.deepEqual(assembleAnthropicStream(sse([...events, { type: 'message_stop' }])), [
    { type: 'text', text: 'Run it.' },
    { type: 'tool_use', id: 'toolu_1', name: 'bash', input: { command: 'ls' } },
  ]);
  assert.equal(
    assembleAnthropicStream(sse([events[0]!, { type: 'error', error: { type: 'api_error', message: 'x' } }, { type: 'message_stop' }])),
    undefined,
  );
});
