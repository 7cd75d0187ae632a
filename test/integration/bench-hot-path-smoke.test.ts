// Smoke test of the hot-path benchmark (issue 31): both capture modes, every section, at a tiny load.
// It proves the bench runs end to end, that every hop answers every call and the proxy stores every
// call it answered, and that the targets are judged from the figures; it asserts no timings.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { evaluate, formatReport, parseHotPathArgs, runHotPath, type HotPathReport } from '../../bench/hot-path.js';

test('hot-path: both modes, load / sizes / ramp, every hop answered, every proxy call stored', { timeout: 900_000 }, async () => {
  const options = parseHotPathArgs(
    [
      '--quick',
      '--proxy-from-source',
      '--levels',
      '4,8',
      '--sizes',
      '300',
      '--ramp-start',
      '6',
      '--ramp-seconds',
      '1',
      '--think-ms',
      '0,20',
    ],
    {},
  );
  const report = await runHotPath({ ...options, log: () => {} });
  assert.deepEqual(
    report.modes.map((m) => m.mode),
    ['chat', 'token-in'],
  );
  for (const m of report.modes) {
    assert.deepEqual(
      m.load.map((l) => l.sessions),
      [4, 8],
    );
    for (const level of m.load) {
      assert.deepEqual(level.runs.map((r) => r.hop).sort(), ['direct', 'passthrough', 'pipe', 'proxy']);
      for (const r of level.runs) {
        assert.deepEqual(r.errors, {}, `${m.mode} ${r.hop} at ${level.sessions}: no errors`);
        assert.equal(r.calls_ok, level.sessions * 3, `${m.mode} ${r.hop}: every call answered`);
        if (r.hop !== 'direct') assert.ok(Number.isFinite(r.cpu_ms_per_call) && r.cpu_ms_per_call >= 0, `${r.hop}: a CPU figure`);
      }
      const proxy = level.runs.find((r) => r.hop === 'proxy')!;
      assert.equal(proxy.stored_calls, proxy.calls_ok, `${m.mode}: the proxy stored every answered call`);
      assert.ok(Number.isFinite(level.cpu_ratio), 'a CPU ratio');
    }
    assert.deepEqual(
      m.sizes.map((s) => s.prompt_tokens),
      [300],
    );
    assert.deepEqual(m.sizes[0]!.runs.map((r) => r.hop).sort(), ['passthrough', 'pipe', 'proxy']);
    assert.ok(m.ramp.steps.some((s) => s.hop === 'passthrough') && m.ramp.steps.some((s) => s.hop === 'proxy'), 'both hops ramped');
    for (const step of m.ramp.steps) assert.ok(step.achieved_rate > 0, `${m.mode} ${step.hop} at ${step.rate}/s: calls answered`);
  }
  assert.deepEqual(report.failures, evaluate(report.modes, { quick: true }));
  assert.match(formatReport(report), /== chat mode ==\nsessions {2}CPU ms\/call pipe\/pt\/proxy/);
  assert.throws(() => parseHotPathArgs(['--modes', 'nope'], {}), /--modes: 'nope' is not chat or token-in/);
});

test('hot-path targets: each ratio over its bound is a failure naming the mode and the figure; within bounds, none', () => {
  const run = (hop: 'direct' | 'pipe' | 'passthrough' | 'proxy', cpu: number) => ({
    hop,
    calls_ok: 3000,
    errors: {},
    p50_ms: 10,
    p99_ms: 20,
    health_p99_ms: 5,
    health_errors: 0,
    wall_ms: 1000,
    cpu_ms: cpu * 3000,
    cpu_ms_per_call: cpu,
    ...(hop === 'proxy' ? { stored_calls: 3000 } : {}),
  });
  const mode = (cpuRatio: number, p99Ratio: number, sizeRatio: number, share: number): HotPathReport['modes'][number] => ({
    mode: 'chat',
    load: [
      {
        sessions: 1000,
        runs: [run('direct', 0), run('pipe', 0.4), run('passthrough', 0.5), run('proxy', 0.5 * cpuRatio)],
        cpu_ratio: cpuRatio,
        added_p50: { passthrough: 10, proxy: 10, ratio: 1 },
        added_p99: { passthrough: 10, proxy: 10 * p99Ratio, ratio: p99Ratio },
      },
    ],
    sizes: [{ prompt_tokens: 32000, runs: [run('passthrough', 2), run('proxy', 2 * sizeRatio)], cpu_ratio: sizeRatio }],
    ramp: { steps: [{ rate: 100, hop: 'proxy', achieved_rate: 100, errors: 0, health_p99_ms: 5, sustained: true }], ceiling: {}, share },
  });
  assert.deepEqual(evaluate([mode(1.9, 1.5, 2.4, 0.6)], { quick: false }), []);
  const failures = evaluate([mode(2.2, 2.5, 2.6, 0.4)], { quick: false });
  assert.equal(failures.length, 4);
  assert.match(failures[0]!, /^chat: CPU per call 2.2x the pass-through's at 1000 sessions/);
  assert.match(failures[1]!, /^chat: added p99 2.5x/);
  assert.match(failures[2]!, /^chat: CPU per call 2.6x the pass-through's at 32000 tokens/);
  assert.match(failures[3]!, /^chat: the proxy sustains/);
  // A proxy that answered a call it did not store fails in every mode, quick included.
  const lost = mode(1, 1, 1, 1);
  lost.load[0]!.runs[3]!.stored_calls = 2999;
  assert.match(evaluate([lost], { quick: true }).join('\n'), /the proxy stored 2999 of 3000 answered calls/);
});
