// The Training Runs view and Start Training Run... in a real workbench (code-server 4.100.3 with the
// platform .vsix installed as a user installs it) against the Kubernetes API server double: KUBECONFIG in
// code-server's environment names the double, the three quick picks (trainer, config file, kube
// context) start a run, which without operator CRDs is a plain Job that the double's Docker node runs
// (a node script reading an export from a hostPath volume); the tree shows the run with trainer,
// phase and age, the status bar follows it, the output channel shows its log. Screenshots: test-artifacts/e2e/.
import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, test } from 'node:test';
import type { KubeDouble } from '../k8s-double/index.js';
import { testCluster } from '../integration/k8s-fixtures.js';
import { missingPrerequisite, runCommand } from './code-server.js';
import { atStep, openWorkbench, pick, type Workbench } from './workbench.js';

const ROOT = resolve(__dirname, '..', '..');
const ARTIFACTS = join(ROOT, 'test-artifacts', 'e2e');

let workbench: Workbench | undefined;
let cluster: KubeDouble | undefined;
let stateDir = '';

after(async () => {
  await workbench?.close();
  await cluster?.close();
  if (stateDir && !process.env.HL_E2E_KEEP) rmSync(stateDir, { recursive: true, force: true });
});

test(
  'Start Training Run... against the API server double: the run in the Training Runs view, its log and status',
  { timeout: 400_000 },
  async () => {
    const missing = missingPrerequisite();
    if (missing) assert.fail(`real-workbench e2e cannot run: ${missing}`);
    const built = spawnSync(process.execPath, ['esbuild.mjs'], { cwd: ROOT, encoding: 'utf8' });
    assert.equal(built.status, 0, built.stderr);
    cluster = await testCluster();

    stateDir = mkdtempSync(join(tmpdir(), 'hl-train-e2e-'));
    const workspace = join(stateDir, 'workspace');
    const exports = join(stateDir, 'exports');
    mkdirSync(join(workspace, 'training'), { recursive: true });
    mkdirSync(exports, { recursive: true });
    writeFileSync(
      join(exports, 'trl.jsonl'),
      [1, 0, 1]
        .map((reward) => JSON.stringify({ prompt_ids: [1], completion_ids: [2], logprobs: [-0.1], env_mask: [1], reward }))
        .join('\n') + '\n',
    );
    // Long enough to be seen Running in the status bar, then it ends by itself.
    const script =
      "const rows=require('fs').readFileSync(process.env.HARNESS_LAB_EXPORT,'utf8').trim().split('\\n').length;console.log('trainer read '+rows+' rows');setTimeout(()=>console.log('step 1 done'),6000);";
    writeFileSync(
      join(workspace, 'training', 'trl-e2e.yaml'),
      `name: trl-e2e\nimage: harness-lab/base-node:bookworm\ncommand: [node, -e, ${JSON.stringify(script)}]\ndata:\n  source: export\n  file: trl.jsonl\n  volume: {hostPath: {path: ${exports}}}\n`,
    );

    workbench = await openWorkbench({
      stateDir,
      workspace,
      env: { KUBECONFIG: cluster.kubeconfig, HARNESS_LAB_DATA_DIR: join(stateDir, 'lab') },
      vsix: true,
    });
    const { page } = workbench;
    mkdirSync(ARTIFACTS, { recursive: true });

    await page.locator('.activitybar .action-item a[aria-label^="Harness Lab"]').click({ timeout: 60_000 });
    const pane = page.locator('.pane', { has: page.locator('.pane-header', { hasText: /training runs/i }) });
    const header = pane.locator('.pane-header');
    await header.waitFor({ timeout: 30_000 });
    if ((await header.getAttribute('aria-expanded')) !== 'true') await header.click();
    await pane
      .locator('.monaco-list-row', { hasText: 'No training runs in default (double)' })
      .waitFor({ timeout: 60_000 })
      .catch(async (err: unknown) => {
        await page.screenshot({ path: join(ARTIFACTS, 'training-00-empty-missing.png') });
        throw err;
      });
    await page.screenshot({ path: join(ARTIFACTS, 'training-01-empty.png') });

    await runCommand(page, 'Harness Lab: Start Training Run...');
    await atStep(page, '1/3');
    await pick(page, 'trl');
    await atStep(page, '2/3');
    await pick(page, 'training/trl-e2e.yaml');
    await atStep(page, '3/3');
    await pick(page, 'double');

    const status = page.locator('.statusbar-item', { hasText: /trl-e2e: Running/ });
    await status.waitFor({ timeout: 90_000 }).catch(async (err: unknown) => {
      await page.screenshot({ path: join(ARTIFACTS, 'training-02-no-status.png') });
      throw err;
    });
    const row = pane.locator('.monaco-list-row', { hasText: 'trl-e2e' });
    await row.waitFor({ timeout: 30_000 });
    await page
      .locator('.monaco-editor .view-lines', { hasText: 'trainer read 3 rows' })
      .first()
      .waitFor({ timeout: 60_000 })
      .catch(async (err: unknown) => {
        await page.screenshot({ path: join(ARTIFACTS, 'training-02-no-log.png') });
        throw err;
      });
    await page.screenshot({ path: join(ARTIFACTS, 'training-02-running.png') });

    // The Job ends by itself: the tree says Succeeded, the log has its last line, the status bar item goes.
    await pane
      .locator('.monaco-list-row', { hasText: /trl-e2e.*trl · Succeeded/ })
      .waitFor({ timeout: 90_000 })
      .catch(async (err: unknown) => {
        await page.screenshot({ path: join(ARTIFACTS, 'training-03-no-success.png') });
        throw err;
      });
    await page.locator('.monaco-editor .view-lines', { hasText: 'step 1 done' }).first().waitFor({ timeout: 30_000 });
    await status.waitFor({ state: 'detached', timeout: 30_000 });
    await page.screenshot({ path: join(ARTIFACTS, 'training-03-succeeded.png') });
    const job = await fetch(`${cluster.url}/apis/batch/v1/namespaces/default/jobs/trl-e2e`, {
      headers: { authorization: `Bearer ${cluster.api.token}` },
    });
    assert.equal(job.status, 200);
    const body = (await job.json()) as { metadata: { labels: Record<string, string> } };
    assert.equal(body.metadata.labels['harness-lab/run'], 'trl-e2e');
  },
);
