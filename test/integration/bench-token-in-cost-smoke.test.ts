// Smoke test of the token-in cost benchmark: two small contexts, a few turns, every hop (the proxy
// rendering with and without the full-render check, the proxy in chat mode, the pass-through). It
// proves the bench runs end to end and reports every field; it asserts no timings.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { formatTokenInCost, HOPS, parseTokenInCostArgs, runTokenInCost } from '../../bench/token-in-cost.js';

const dir = mkdtempSync(join(tmpdir(), 'hl-bench-token-in-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('token-in-cost: every hop at every size, prompts near the sizes, the ratios and the JSON file', { timeout: 600_000 }, async () => {
  const out = join(dir, 'token-in-cost.json');
  const options = parseTokenInCostArgs(['--sizes', '600,1500', '--turns', '3', '--loops', '2', '--out', out], {});
  const result = await runTokenInCost({ ...options, log: () => {} });
  assert.deepEqual(
    result.rows.map((r) => [r.hop, r.context_tokens_target]),
    HOPS.flatMap((h) => [
      [h, 600],
      [h, 1500],
    ]),
  );
  for (const row of result.rows) {
    assert.equal(row.turns, 3);
    assert.equal(row.loops, 2);
    assert.ok(row.prompt_tokens_mean > row.context_tokens_target * 0.7, `${row.hop}: prompts near the size (${row.prompt_tokens_mean})`);
    assert.ok(Number.isFinite(row.cpu_ms_per_turn) && row.cpu_ms_per_turn >= 0, 'a finite, non-negative figure');
    assert.ok(typeof row.rss_mb === 'number' && row.rss_mb > 0, "the hop's resident memory, from /proc");
    // Per-turn CPU from schedstat (ns): a session's first turn and the turns after it, both measured.
    assert.ok(row.first_turn_cpu_ms !== null && row.first_turn_cpu_ms > 0, `${row.hop}: the first turn's CPU`);
    assert.ok(row.cpu_ms_per_turn_after_first !== null && row.cpu_ms_per_turn_after_first > 0, `${row.hop}: the later turns' CPU`);
  }
  for (const hop of HOPS) assert.ok(Number.isFinite(result.ratios_after_first[hop]), `${hop}: a ratio over the turns after the first`);
  // The same loops reach the engine through every hop: token-in and chat prompts agree in size.
  const prompt = (hop: string, size: number) =>
    result.rows.find((r) => r.hop === hop && r.context_tokens_target === size)!.prompt_tokens_mean;
  assert.ok(Math.abs(prompt('token-in', 1500) - prompt('chat', 1500)) < 50, `${prompt('token-in', 1500)} vs ${prompt('chat', 1500)}`);
  // A ratio for every hop whose small context measured any CPU (/proc counts 10 ms ticks: a fast
  // hop over 3 turns can read 0, and a ratio to 0 is no figure).
  for (const hop of HOPS) {
    const lo = result.rows.find((r) => r.hop === hop && r.context_tokens_target === 600)!;
    if (lo.cpu_ms_per_turn > 0) assert.ok(Number.isFinite(result.ratios[hop]), `${hop}: a ratio`);
    else assert.equal(result.ratios[hop], undefined, `${hop}: no ratio to 0`);
  }
  assert.ok(Number.isFinite(result.ratios['token-in']), 'token in, the hop the target judges, always measures some CPU');
  assert.deepEqual(JSON.parse(readFileSync(out, 'utf8')).rows, JSON.parse(JSON.stringify(result.rows)), 'the JSON file holds the rows');
  assert.match(formatTokenInCost(result), /^CPU ms per turn {2}1k context {2}2k context {2}largest\/smallest\ntoken-in /);
  assert.match(formatTokenInCost(result), /\nturns after a session's first \(its first turn, ms\)\ntoken-in +[\d.]+ \(\d+\)/);
  assert.throws(() => parseTokenInCostArgs(['--hops', 'nope'], {}), /--hops: unknown 'nope'/);
});
