import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildRollout } from '../../src/capture/rollout.js';
import { spawnSync } from 'node:child_process';
import { findTrajectory, loadRollout } from '../../src/report/rollout-loader.js';
import { generateRollout } from '../../bench/rollout-generator.js';

const ROOT = join(__dirname, '..', '..');

/** The real CLI in a child process: exit code, stdout and stderr as a user sees them. */
function run(argv: string[]): { code: number; out: string; err: string } {
  const r = spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'src', 'cli', 'main.ts'), ...argv], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { code: r.status ?? -1, out: r.stdout, err: r.stderr };
}

const dir = mkdtempSync(join(tmpdir(), 'hl-viewer-cli-'));
const g = generateRollout({ calls: 4, firstPrompt: 30, sampled: 10, glue: 5, retry: true });
const doc = buildRollout(g.session, g.records, { budgetStopCount: 0, captureLevel: 'tokens', includeDiscarded: true });
const rolloutFile = join(dir, 'run.rollout.json');
writeFileSync(rolloutFile, JSON.stringify(doc));
const counts = doc.turns.map((t) => t.n_sampled);
const traj = (c: number[]) => ({
  schema_version: 'ATIF-v1.7',
  agent: { name: 'h', version: '1' },
  steps: c.map((n, i) => ({ step_id: i + 1, source: 'agent', message: '', metrics: { completion_tokens: n } })),
});

test('atif-check: exit 0 on a match, 1 on a mismatch, 2 on bad input', async () => {
  const good = join(dir, 'good.json');
  const bad = join(dir, 'bad.json');
  writeFileSync(good, JSON.stringify(traj(counts)));
  writeFileSync(bad, JSON.stringify(traj(counts.map((c) => c + 2))));
  const ok = run(['atif-check', rolloutFile, good]);
  assert.equal(ok.code, 0, ok.err);
  assert.match(ok.out, /verdict: match/);
  const mis = run(['atif-check', rolloutFile, bad]);
  assert.equal(mis.code, 1);
  assert.match(mis.out, /\[FATAL\] turn_mismatch/);
  assert.match(mis.out, /verdict: MISMATCH/);
  const json = run(['atif-check', rolloutFile, bad, '--json']);
  assert.equal(JSON.parse(json.out).verdict, 'MISMATCH');
  writeFileSync(join(dir, 'broken.json'), '{"schema_version":"ATIF-v1.7"}');
  const broken = run(['atif-check', rolloutFile, join(dir, 'broken.json')]);
  assert.equal(broken.code, 2);
  assert.match(broken.err, /broken\.json is not a valid ATIF v1\.x trajectory: agent/);
  assert.equal(run(['atif-check', rolloutFile]).code, 2);
});

test('report: one self-contained HTML file with the data, the viewer and a trajectory found next to the rollout', async () => {
  const bundle = join(__dirname, '..', '..', 'dist', 'webview', 'viewer.js');
  assert.ok(existsSync(bundle), `the report inlines the built viewer, and ${bundle} is missing: run \`npm run build\``);
  writeFileSync(join(dir, 'trajectory.json'), JSON.stringify(traj(counts)));
  assert.equal(findTrajectory(rolloutFile), join(dir, 'trajectory.json'));
  const out = join(dir, 'report.html');
  const r = run(['report', rolloutFile, '-o', out]);
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /ATIF cross-check against .*trajectory\.json: Match/);
  const html = readFileSync(out, 'utf8');
  const head = html.slice(0, html.indexOf('<script>'));
  assert.ok(
    head.match(/<script\b[^>]*>/g)!.every((tag) => /^<script type="application\/json" id="hl-(data|d-\d+)">$/.test(tag)),
    'no script loaded from elsewhere',
  );
  assert.doesNotMatch(head, /<link\b|\ssrc=|\shref=/i, 'no external assets');
  assert.match(html, /Content-Security-Policy" content="default-src 'none'; style-src 'sha256-/);
  const data = JSON.parse(/<script type="application\/json" id="hl-data">(.*?)<\/script>/s.exec(html)![1]!);
  assert.equal(data.turns.length, doc.turns.length);
  assert.equal(data.atif.verdict, 'match');
  assert.deepEqual(
    data.turns.map((t: { sampled_ids: number[] }) => t.sampled_ids.length),
    [...doc.turns].sort((a, b) => a.index - b.index).map((t) => t.n_sampled),
  );
});

test('session store files and trace lines load too; a missing file is a clear error', () => {
  const sessionFile = join(dir, 'abc.jsonl');
  writeFileSync(
    sessionFile,
    [JSON.stringify({ type: 'session', ...g.session }), ...g.records.map((r) => JSON.stringify({ type: 'call', ...r }))].join('\n') + '\n',
  );
  const s = loadRollout(sessionFile);
  assert.equal(s.data.turns.length, g.records.length);
  assert.ok(s.doc);
  assert.throws(() => loadRollout(join(dir, 'nope.rollout.json')), /no such file/);
});
