// Training runs you can watch, in a real workbench (code-server 4.100.3 with the platform .vsix packaged
// from this repository and installed as a user installs it) against the Kubernetes API server double: the config picker lists only the
// workspace's trainer configs (not its other YAML/JSON); a run whose image cannot be pulled shows as
// Pending with the pod's reason (not "Running"), and Show Logs says why there is no log; a run that
// prints the lab's metric lines ends Succeeded and Show Training Curves draws its reward, loss, KL and
// learning rate from its log in the webview, with the export it trains on. The submit toast says the
// object kind (a plain Job: the double has no operator) and the resources. Then a trainer's metrics
// file (TRL's trainer_state.json in a checkpoint folder) opened with Show Training Curves from Metrics
// File… draws in the same panel.
// Screenshots: test-artifacts/e2e/curves-*.png.
import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { Locator, Page } from 'playwright-core';
import type { KubeDouble } from '../k8s-double/index.js';
import { testCluster } from '../integration/k8s-fixtures.js';
import { missingPrerequisite, pickFromContextMenu, runCommand } from './code-server.js';
import { ARTIFACTS, ROOT, atStep, openWorkbench, pane, pick, viewerFrame, type Workbench } from './workbench.js';

let workbench: Workbench | undefined;
let cluster: KubeDouble | undefined;
let stateDir = '';

after(async () => {
  await workbench?.close();
  await cluster?.close();
  if (stateDir && !process.env.HL_E2E_KEEP) rmSync(stateDir, { recursive: true, force: true });
});

const shot = (page: Page, name: string) => page.screenshot({ path: join(ARTIFACTS, `curves-${name}.png`) });

async function startRun(page: Page, config: string): Promise<number> {
  await runCommand(page, 'Harness Lab: Start Training Run...');
  await atStep(page, '1/3');
  await pick(page, 'trl');
  await atStep(page, '2/3');
  const rows = await page.locator('.quick-input-list .monaco-list-row').count();
  await pick(page, config);
  await atStep(page, '3/3');
  await pick(page, 'double');
  return rows;
}

async function waitOrShoot(page: Page, l: Locator, name: string, timeout: number): Promise<void> {
  await l.waitFor({ timeout }).catch(async (err: unknown) => {
    await shot(page, `99-${name}`).catch(() => undefined);
    throw err;
  });
}

test('training runs you can watch: configs only, a stuck image explained, curves from the log', { timeout: 900_000 }, async () => {
  const missing = missingPrerequisite();
  if (missing) assert.fail(`real-workbench e2e cannot run: ${missing}`);
  const built = spawnSync(process.execPath, ['esbuild.mjs'], { cwd: ROOT, encoding: 'utf8' });
  assert.equal(built.status, 0, built.stderr);
  mkdirSync(ARTIFACTS, { recursive: true });
  cluster = await testCluster();

  stateDir = mkdtempSync(join(tmpdir(), 'hl-curves-e2e-'));
  const workspace = join(stateDir, 'workspace');
  const exports = join(stateDir, 'exports');
  mkdirSync(join(workspace, 'training'), { recursive: true });
  mkdirSync(join(workspace, 'harness-lab-batches'), { recursive: true });
  mkdirSync(exports, { recursive: true });
  writeFileSync(
    join(exports, 'b-e2e.trl.jsonl'),
    `${JSON.stringify({ prompt_ids: [1], completion_ids: [2], logprobs: [-0.1], env_mask: [1], reward: 1 })}\n`,
  );
  // A local export of the same name: the run is linked to it.
  writeFileSync(
    join(workspace, 'harness-lab-batches', 'b-e2e.trl.jsonl.manifest.json'),
    JSON.stringify({ format: 'trl', file: 'b-e2e.trl.jsonl', batch: { batch_id: 'b-e2e' }, counts: { rows: 1 } }),
  );
  // Noise the picker must leave out.
  writeFileSync(join(workspace, 'package.json'), '{"name":"ws","version":"1.0.0"}');
  writeFileSync(join(workspace, 'training', 'notes.yaml'), 'owner: someone\nimage: not-a-config\n');
  writeFileSync(join(workspace, 'ci.yml'), 'on: push\njobs: {}\n');
  const data = `data:\n  source: export\n  file: b-e2e.trl.jsonl\n  volume: {hostPath: {path: ${exports}}}\n`;
  // The trainer prints the lab's JSON metric lines, one per step, then ends.
  const script =
    'for(let s=1;s<=5;s++)console.log(JSON.stringify({step:s,reward_mean:s/5,reward_std:0.3-s*0.04,loss:1/s,kl:0.01*s,learning_rate:1e-6}));';
  writeFileSync(
    join(workspace, 'training', 'curves.yaml'),
    `name: trl-curves\nimage: harness-lab/base-node:bookworm\ncommand: [node, -e, ${JSON.stringify(script)}]\n${data}`,
  );
  // A metrics file as TRL's trainer saves it in a checkpoint: log_history with a step per entry.
  const stateFile = join(workspace, 'out', 'checkpoint-20', 'trainer_state.json');
  mkdirSync(join(workspace, 'out', 'checkpoint-20'), { recursive: true });
  writeFileSync(
    stateFile,
    JSON.stringify({
      global_step: 20,
      log_history: [
        { epoch: 0.5, learning_rate: 1e-6, loss: 0.4, reward: 0.25, reward_std: 0.4, kl: 0.001, step: 10 },
        { epoch: 1, learning_rate: 5e-7, loss: 0.2, reward: 0.5, reward_std: 0.3, kl: 0.002, step: 20 },
      ],
    }),
  );
  writeFileSync(
    join(workspace, 'training', 'stuck.yaml'),
    `name: trl-stuck\nimage: harness-lab/no-such-image:e2e\ncommand: [python, train.py]\ngpusPerNode: 0\n${data}`,
  );

  workbench = await openWorkbench({
    stateDir,
    workspace,
    env: { KUBECONFIG: cluster.kubeconfig, HARNESS_LAB_DATA_DIR: join(stateDir, 'lab') },
    // One row per folder in the Explorer (compact folders would show out/checkpoint-20 as one row).
    userSettings: { 'explorer.compactFolders': false },
    vsix: true,
  });
  const { page } = workbench;
  await page.locator('.activitybar .action-item a[aria-label^="Harness Lab"]').click({ timeout: 60_000, force: true });
  const runs = pane(page, /training runs/i);
  const header = runs.locator('.pane-header');
  await header.waitFor({ timeout: 30_000 });
  for (const other of [/^sessions/i, /^engines/i, /^tasks/i]) {
    const h = pane(page, other).locator('.pane-header');
    if ((await h.getAttribute('aria-expanded')) === 'true') await h.click();
  }
  if ((await header.getAttribute('aria-expanded')) !== 'true') await header.click();

  // 1. A run whose image cannot be pulled: Pending with the pod's reason; Show Logs says why there is no log.
  const listed = await startRun(page, 'training/stuck.yaml');
  assert.equal(listed, 2, 'the picker lists the two trainer configs, not notes.yaml, ci.yml or package.json');
  await waitOrShoot(
    page,
    page.locator('.notification-toast', {
      hasText: /trl-stuck created as Job \(a plain batch\/v1 Job: no trainer operator\).*1 node\(s\), no GPU/,
    }),
    'no-kind-toast',
    60_000,
  );
  const stuck = runs.locator('.monaco-list-row', { hasText: 'trl-stuck' });
  await waitOrShoot(page, stuck.filter({ hasText: /trl · Pending: (ImagePullBackOff|ErrImagePull) · \d+s/ }), 'no-waiting-reason', 90_000);
  const ageBefore = (await stuck.innerText()).match(/· (\d+)s/)?.[1];
  await waitOrShoot(
    page,
    page
      .locator('.monaco-editor .view-lines', {
        hasText: /has\sno\slog\syet:\spod\strl-stuck-\S+\sis\swaiting:\s(ImagePullBackOff|ErrImagePull)/,
      })
      .first(),
    'no-log-reason',
    60_000,
  );
  await new Promise((r) => setTimeout(r, 6_000));
  const ageAfter = (await stuck.innerText()).match(/· (\d+)s/)?.[1];
  assert.ok(ageBefore && ageAfter && Number(ageAfter) > Number(ageBefore), `the age ticks: ${ageBefore} then ${ageAfter}`);
  await shot(page, '01-stuck-image');

  // 2. A run that logs metrics: Succeeded, then its curves from the log.
  await startRun(page, 'training/curves.yaml');
  const done = runs.locator('.monaco-list-row', { hasText: 'trl-curves' });
  await waitOrShoot(page, done.filter({ hasText: /trl · Succeeded/ }), 'no-success', 120_000);
  await pickFromContextMenu(page, done, 'Show Training Curves');
  await page.locator('.tab', { hasText: 'Training Curves' }).waitFor({ timeout: 30_000 });
  const frame = viewerFrame(page);
  const reward = frame.locator('svg.panel[data-metric="reward_mean"] polyline.curve[data-run="trl-curves"]');
  await waitOrShoot(page, reward, 'no-curve', 60_000);
  assert.equal(await reward.getAttribute('data-points'), '5');
  assert.equal(await frame.locator('svg.panel[data-metric="reward_mean"] polygon.band').count(), 1, 'the ± std band');
  for (const m of ['loss', 'kl', 'learning_rate'])
    assert.equal(await frame.locator(`svg.panel[data-metric="${m}"] polyline.curve`).getAttribute('data-points'), '5', m);
  assert.match(
    await frame.locator('ul.runs').innerText(),
    /trl-curves: trains on export b-e2e\.trl\.jsonl on hostPath .* \(trl export of batch b-e2e, 1 rows\)/,
  );
  await shot(page, '02-curves');

  // 3. A trainer's metrics file from the Explorer's menu on it: the same panel draws it.
  await runCommand(page, 'View: Show Explorer');
  const explorer = page.locator('.explorer-folders-view');
  // Select each folder, then expand it from the keyboard (a click may only select a row that re-renders).
  for (const folder of ['out', 'checkpoint-20']) {
    const row = explorer.locator(`.monaco-list-row[aria-label="${folder}"]`);
    await row.click({ timeout: 30_000 });
    if ((await row.getAttribute('aria-expanded')) !== 'true') await page.keyboard.press('ArrowRight');
    await explorer.locator(`.monaco-list-row[aria-label="${folder}"][aria-expanded="true"]`).waitFor({ timeout: 15_000 });
  }
  const stateRow = explorer.locator('.monaco-list-row', { hasText: 'trainer_state.json' }).first();
  await waitOrShoot(page, stateRow, 'no-metrics-file-row', 30_000);
  await pickFromContextMenu(page, stateRow, 'Show Training Curves from Metrics File');
  await waitOrShoot(page, page.locator('.tab', { hasText: 'Training Curves: checkpoint-20/trainer_state' }), 'no-file-tab', 30_000);
  const fileLoss = frame.locator('svg.panel[data-metric="loss"] polyline.curve[data-run="checkpoint-20/trainer_state"]');
  await waitOrShoot(page, fileLoss, 'no-file-curve', 60_000);
  assert.equal(await fileLoss.getAttribute('data-points'), '2');
  assert.equal(
    await frame
      .locator('svg.panel[data-metric="reward_mean"] polyline.curve[data-run="checkpoint-20/trainer_state"]')
      .getAttribute('data-points'),
    '2',
  );
  assert.match(await frame.locator('ul.runs').innerText(), /checkpoint-20\/trainer_state: from the metrics file .*trainer_state\.json/);
  await shot(page, '03-metrics-file');
});
