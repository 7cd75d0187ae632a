// Export Batch… as the editor runs it: the bundled CLI (dist/cli.js, what the .vsix ships) with the
// arguments exportArgs gives, on a real captured batch (the group fixture: 6 rollouts in 2 groups, one
// infra_error, one group without contrast), then the report read back from the export's manifest.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { runBundledCli } from '../../src/extension/bundled-cli.js';
import { defaultExportFile, exportArgs, exportSummary, readExportManifest } from '../../src/extension/export-batch-model.js';
import { buildGroupBatch } from './group-fixture.js';

const CLI = join(__dirname, '..', '..', 'dist', 'cli.js');

test('Export Batch writes TRL rows through the bundled CLI and reports the kept and dropped counts', { timeout: 120_000 }, async () => {
  assert.ok(existsSync(CLI), 'dist/cli.js is missing: run `npm run build`');
  const tmp = mkdtempSync(join(tmpdir(), 'hl-export-editor-'));
  const { dir } = await buildGroupBatch(join(tmp, 'batch'));
  const out = defaultExportFile(dir, 'batch', 'trl');
  const lines: string[] = [];
  const run = await runBundledCli(CLI, exportArgs(dir, 'trl', out), { cwd: tmp, onLine: (l) => lines.push(l) });
  assert.equal(run.code, 0, run.output);
  assert.match(lines.join('\n'), /wrote \d+ trl row\(s\)/);
  const rows = readFileSync(out, 'utf8')
    .trim()
    .split('\n')
    .map(
      (l) =>
        JSON.parse(l) as {
          prompt_ids: number[];
          completion_ids: number[];
          logprobs: number[];
          env_mask: number[];
          reward: number;
          group_id: string;
        },
    );
  assert.ok(rows.length > 0);
  for (const r of rows) {
    assert.ok(
      r.prompt_ids.length > 0 && r.completion_ids.length === r.logprobs.length && r.env_mask.length === r.completion_ids.length,
      'token-aligned TRL row',
    );
    assert.equal(typeof r.reward, 'number');
  }
  const m = readExportManifest(`${out}.manifest.json`);
  assert.equal(m.counts.rows, rows.length);
  const summary = exportSummary(m, 'TRL');
  assert.match(summary, new RegExp(`^${rows.length} TRL row\\(s\\) from ${m.counts.rollouts_kept} rollout\\(s\\)`));
  assert.match(summary, /dropped rollouts: .*infra_error/, summary);
  // A failing export (no such batch) is a failure with the CLI's reason.
  const bad = await runBundledCli(CLI, exportArgs(join(tmp, 'nope'), 'trl', join(tmp, 'x.jsonl')), { cwd: tmp });
  assert.notEqual(bad.code, 0);
  assert.match(bad.output, /nope/);
});
