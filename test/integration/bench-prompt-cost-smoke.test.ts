// Smoke test of the prompt-cost benchmark: one small size, a few calls, the proxy from src/ (no
// build needed). It proves the bench runs end to end and reports every field; it asserts no timings.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { formatPromptCost, parsePromptCostArgs, runPromptCost } from '../../bench/prompt-cost.js';

const dir = mkdtempSync(join(tmpdir(), 'hl-bench-prompt-cost-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('prompt-cost: the sessions are registered before the measured calls, and every field is reported', async () => {
  const out = join(dir, 'prompt-cost.json');
  const options = parsePromptCostArgs(
    ['--quick', '--sizes', '600', '--calls', '6', '--out', out, '--cli', join(dir, 'no-such-cli.js')],
    {},
  );
  const result = await runPromptCost({ ...options, log: () => {} });
  assert.equal(result.rows.length, 1);
  const row = result.rows[0]!;
  assert.equal(row.calls, 6);
  assert.ok(row.prompt_tokens_mean > 300, `prompts near the size (${row.prompt_tokens_mean})`);
  for (const value of [
    row.proxy_cpu_ms_per_call,
    row.passthrough_cpu_ms_per_call,
    row.floor_ms_per_call,
    row.ratio,
    row.registration_cpu_ms_per_session,
  ]) {
    assert.ok(Number.isFinite(value) && value >= 0, 'a finite, non-negative figure');
  }
  assert.ok(row.floor_ms_per_call > 0, 'the floor was timed');
  assert.ok(row.stored_bytes_per_call > 0, 'the store wrote the calls');
  assert.deepEqual(JSON.parse(readFileSync(out, 'utf8')).rows, JSON.parse(JSON.stringify(result.rows)), 'the JSON file holds the rows');
  assert.match(formatPromptCost(result.rows), /CPU ms\/session created/);
});
