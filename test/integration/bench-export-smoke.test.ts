// Smoke test of the export benchmark: a tiny synthetic batch through the same code path as the full
// run. It proves the entry works and reports every field; it asserts no speeds.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';

const ROOT = join(__dirname, '..', '..');
const dir = mkdtempSync(join(tmpdir(), 'hl-bench-export-smoke-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('bench export: generates a batch through the store, measures raw reads and every format', () => {
  const out = join(dir, 'export.json');
  const r = spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'bench', 'export.ts'), '--calls', '400', '--out', out], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 300_000,
  });
  assert.equal(r.status, 0, r.stderr);
  const report = JSON.parse(readFileSync(out, 'utf8')) as {
    calls: number;
    sessions: number;
    batch_mb: number;
    results: { mode: string; rows: number; input_mb_s: number; peak_rss_mib: number; output_mb: number }[];
    pass: boolean;
  };
  assert.equal(report.calls, 400);
  assert.equal(report.sessions, 20);
  assert.deepEqual(
    report.results.map((x) => x.mode),
    ['raw-bytes', 'raw-parse', 'trainingtrace', 'trl', 'verl'],
  );
  const by = Object.fromEntries(report.results.map((x) => [x.mode, x]));
  assert.equal(by['raw-parse']!.rows, 420, '400 call lines and 20 session headers');
  assert.equal(by.trainingtrace!.rows, 20);
  assert.equal(by.trl!.rows, 20, 'five complete groups of four');
  assert.equal(by.verl!.rows, 40, 'a main path and a subagent segment per rollout');
  for (const x of report.results) assert.ok(x.peak_rss_mib > 0 && x.input_mb_s > 0, x.mode);
  assert.equal(typeof report.pass, 'boolean');
});
