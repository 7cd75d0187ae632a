// Smoke test of the proxy load benchmark harness: tiny levels, a 10 ms engine, the proxy from src/.
// It proves the harness runs end to end and reports every field; it asserts no timings.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { extractMessage } from '../../bench/load-generator.js';
import { startNode, stopChild } from '../../bench/processes.js';
import { formatReport, parseProxyLoadArgs, runProxyLoad, type ProxyLoadReport } from '../../bench/proxy-load.js';
import type { ChatMessage } from '../../src/capture/types.js';
import { buildFakeCompletion, startFakeEngine } from '../../src/engine/fake-engine.js';

const dir = mkdtempSync(join(tmpdir(), 'hl-bench-smoke-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const summaryKeys = ['count', 'p50', 'p90', 'p99', 'max', 'mean'];

test('proxy-load quick mode: every path answers every call, the report and its JSON carry all fields', async () => {
  const out = join(dir, 'proxy-load.json');
  const options = parseProxyLoadArgs(
    ['--quick', '--levels', '4', '--turns', '2', '--think-ms', '10', '--ramp-ms', '20', '--proxy-from-source', '--out', out],
    {},
  );
  const log: string[] = [];
  const report = await runProxyLoad({ ...options, log: (line) => log.push(line) });

  assert.equal(report.bench, 'proxy-load');
  assert.equal(report.levels.length, 1);
  const level = report.levels[0]!;
  assert.equal(level.sessions, 4);
  for (const path of [level.direct, level.pipe, level.passthrough, level.proxy]) {
    assert.deepEqual(path.errors, {}, `${path.mode} had errors`);
    assert.equal(path.calls_ok, 8, `${path.mode}: 4 sessions x 2 turns`);
    assert.deepEqual(Object.keys(path.latency).sort(), [...summaryKeys].sort());
    assert.equal(path.latency.count, 8);
    assert.equal(path.later_turns.count, 4, `${path.mode}: second calls of 4 sessions`);
    assert.ok(path.health && path.health.polls > 0, `${path.mode}: /health was polled`);
    assert.deepEqual(path.health.errors, {}, `${path.mode}: /health failed`);
  }
  assert.equal(level.proxy.stored_calls, 8, 'every answered proxy call is in the durable store');
  // The sessions' registrations are measured apart from the calls (CPU per call counts the calls only).
  assert.ok(
    level.proxy.registration.cpu_ms >= 0 && Number.isFinite(level.proxy.registration.cpu_ms_per_session),
    'registration CPU is reported',
  );
  for (const value of [...Object.values(level.added), ...Object.values(level.added_later_turns), level.health_p50_ms, level.health_p99_ms])
    assert.equal(typeof value, 'number');
  for (const path of [level.direct, level.pipe, level.passthrough, level.proxy])
    assert.equal(typeof path.listen_overflows, 'number', `${path.mode}: listen drops counted`);
  assert.ok(level.proxy_rss_peak_mb > 0, 'proxy memory was sampled');
  assert.ok(level.passthrough.process.rss_peak_mb > 0, 'pass-through memory was sampled');
  for (const p of [level.pipe.process, level.passthrough.process, level.proxy.process]) {
    assert.ok(p.cpu_ms_per_call >= 0 && Number.isFinite(p.cpu_ms_per_call), 'CPU per call is a number');
    assert.equal(typeof p.cpu_ms_by_thread, 'object');
  }
  assert.equal(typeof level.cpu_ratio, 'number');
  assert.equal(typeof level.cpu_ratio_pipe, 'number');
  assert.equal(report.targets.latency_evaluated_at, null, 'quick mode does not judge the latency ratio');
  assert.equal(typeof level.pass, 'boolean');

  const written = JSON.parse(readFileSync(out, 'utf8')) as ProxyLoadReport;
  assert.deepEqual(written, JSON.parse(JSON.stringify(report)), 'the JSON file is the report');
  const text = formatReport(report);
  assert.match(text, /^sessions\s+errors d\/pi\/pt\/px/);
  assert.match(text, /\n4\s+0\/0\/0\/0\s/);
  assert.match(text, /\n(PASS|FAIL)/);
});

test("proxy-load flags: bad levels and think times are refused in the caller's terms", () => {
  assert.throws(() => parseProxyLoadArgs(['--levels', '64,abc'], {}), /--levels must be a comma-separated list of positive integers/);
  assert.throws(() => parseProxyLoadArgs(['--think-ms', '1,2,3'], {}), /--think-ms must be a number of ms or "min,max"/);
  assert.deepEqual(parseProxyLoadArgs([], { BENCH_QUICK: '1' }).levels, [8, 32]);
  assert.deepEqual(parseProxyLoadArgs([], {}).levels, [64, 512, 1000, 2000]);
});

test('load generator reads the assistant message without parsing token arrays, and the same as a full parse', () => {
  const request = {
    model: 'm',
    messages: [{ role: 'user', content: 'say "message": {not this}' }] as ChatMessage[],
    tools: [{ type: 'function' as const, function: { name: 'bash', parameters: {} } }],
    logprobs: true,
    return_token_ids: true,
  };
  for (const turn of [0, 1]) {
    if (turn) request.messages.push({ role: 'assistant', content: 'x' }, { role: 'user', content: 'go on } { "a\\"' });
    const body = buildFakeCompletion(request, {}, 'm') as { choices: { message: unknown }[] };
    assert.deepEqual(extractMessage(JSON.stringify(body)), body.choices[0]!.message);
  }
  assert.deepEqual(extractMessage(JSON.stringify({ choices: [{ message: { role: 'assistant', content: 'a}b{"c\\' } }] })), {
    role: 'assistant',
    content: 'a}b{"c\\',
  });
  assert.equal(extractMessage('{"choices":[]}'), undefined);
});

test('pass-throughs: the pipe forwards any bytes; --parse (the floor) parses the request and the answer, and refuses a body that is not JSON', async () => {
  const engine = await startFakeEngine();
  const started = await Promise.all(
    [[], ['--parse']].map((flags) =>
      startNode(
        'pass-through',
        ['--import', 'tsx', join(__dirname, '..', '..', 'bench', 'passthrough.ts'), '--engine-url', engine.url, ...flags],
        (l) => l.startsWith('{'),
      ),
    ),
  );
  try {
    const [pipeUrl, parseUrl] = started.map((s) => (JSON.parse(s.line) as { url: string }).url);
    const post = (url: string, body: string) =>
      fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const call = JSON.stringify({ model: engine.model, messages: [{ role: 'user', content: 'hi' }] });
    for (const url of [pipeUrl!, parseUrl!]) {
      const res = await post(url, call);
      assert.equal(res.status, 200);
      const answer = (await res.json()) as { choices: { message: ChatMessage }[] };
      assert.equal(answer.choices[0]!.message.role, 'assistant');
    }
    assert.equal(engine.requests.length, 2);
    const refused = await post(parseUrl!, 'not json');
    assert.equal(refused.status, 400);
    assert.match(await refused.text(), /body must be JSON/);
    assert.equal(engine.requests.length, 2, 'the parsing pass-through never forwards a body it cannot parse');
    // The pipe hands the same bytes on: the engine's own answer to them comes back, byte for byte.
    const direct = await fetch(`${engine.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: 'not json',
    });
    const piped = await post(pipeUrl!, 'not json');
    assert.notEqual(direct.status, 200);
    assert.deepEqual([piped.status, await piped.text()], [direct.status, await direct.text()]);
  } finally {
    for (const s of started) await stopChild(s.child);
    await engine.close();
  }
});
