// #30's "the same started from the editor in code-server": Start Training Run... (its three quick
// picks) with a config whose `data.serve` asks for a rollout server, in a real workbench (code-server
// 4.100.3, this repository as the development extension) against the Kubernetes API server double
// and its Docker node. The editor deploys `harness-lab serve --backend k8s` (a lab image built here)
// and, once it is ready, the trainer Job, whose pod reaches the server's Service with the key it got
// by secretKeyRef; the Training Runs view shows the run with its rollout server row (Ready, rollouts,
// infra-failed rate, reward), read from the server's /metrics; Cancel on the run's row removes both,
// leaving nothing of the run on the cluster. Screenshots: test-artifacts/e2e/training-serve-*.png.
import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import type Docker from 'dockerode';
import { harnessCacheRoot } from '../../src/harness/run-local.js';
import { ensureReactScript } from '../../src/sandbox/react-script.js';
import type { KubeDouble } from '../k8s-double/index.js';
import { buildProxyImage, testCluster } from '../integration/k8s-fixtures.js';
import { EXAMPLES, dockerReady } from '../integration/sandbox-fixtures.js';
import { missingPrerequisite, runCommand } from './code-server.js';
import { ARTIFACTS, ROOT, atStep, notificationTexts, openWorkbench, pane, pick, toast, widenSidebar, type Workbench } from './workbench.js';

const RUN = 'trl-serve-e2e';
const LAB_IMAGE = `harness-lab/k8s-proxy-test:editor-${process.pid}`;

let docker: Docker | undefined;
let cluster: KubeDouble | undefined;
let bench: Workbench | undefined;
let stateDir = '';

after(async () => {
  await bench?.close();
  await cluster?.close();
  await docker
    ?.getImage(LAB_IMAGE)
    .remove({ force: true })
    .catch(() => undefined);
  if (stateDir && !process.env.HL_E2E_KEEP) rmSync(stateDir, { recursive: true, force: true });
});

test(
  'Start Training Run... with data.serve: the rollout server and the trainer, both in the Training Runs view; Cancel removes both',
  { timeout: 900_000 },
  async () => {
    const missing = missingPrerequisite();
    if (missing) assert.fail(`real-workbench e2e cannot run: ${missing}`);
    const built = spawnSync(process.execPath, ['esbuild.mjs'], { cwd: ROOT, encoding: 'utf8' });
    assert.equal(built.status, 0, built.stderr);
    docker = await dockerReady();
    await buildProxyImage(docker, LAB_IMAGE);
    cluster = await testCluster();

    stateDir = mkdtempSync(join(tmpdir(), 'hl-train-serve-e2e-'));
    const workspace = join(stateDir, 'workspace');
    mkdirSync(join(workspace, 'training'), { recursive: true });
    cpSync(join(EXAMPLES, 'hello-file'), join(workspace, 'tasks', 'hello-file'), { recursive: true });
    // The trainer: asks the server it was given (URL and key from the run) for its splits, then waits to be cancelled.
    const script = [
      'const u=process.env.HARNESS_LAB_ROLLOUT_SERVER_URL,k=process.env.HARNESS_LAB_ADMIN_KEY;',
      "fetch(u+'/harbor_env/splits',{headers:{authorization:'Bearer '+k}}).then(r=>r.text().then(t=>console.log('trainer got '+r.status+' '+t)))",
      ".catch(e=>console.log('trainer could not reach the server: '+e.message));setTimeout(()=>{},600000);",
    ].join('');
    writeFileSync(
      join(workspace, 'training', 'trl-serve.json'),
      JSON.stringify({
        name: RUN,
        image: 'harness-lab/base-node:bookworm',
        command: ['node', '-e', script],
        data: {
          source: 'rollout-server',
          serve: {
            datasets: { train: '../tasks' },
            image: LAB_IMAGE,
            maxConcurrent: 2,
            // The double's node is this machine (as in train-serve-k8s.test.ts).
            env: {
              HARNESS_LAB_K8S_HARNESS_FROM: 'hostPath',
              HARNESS_LAB_K8S_NODE_BINARY: process.execPath,
              HARNESS_LAB_K8S_HARNESS_CACHE: harnessCacheRoot(),
              HARNESS_LAB_K8S_REACT_SCRIPT: await ensureReactScript(),
            },
          },
        },
      }),
    );

    bench = await openWorkbench({
      stateDir,
      workspace,
      env: { KUBECONFIG: cluster.kubeconfig, HARNESS_LAB_DATA_DIR: join(stateDir, 'lab') },
    });
    const { page } = bench;
    mkdirSync(ARTIFACTS, { recursive: true });
    const shot = (name: string) => page.screenshot({ path: join(ARTIFACTS, `training-serve-${name}.png`) });
    const failWith = (name: string) => async (err: unknown) => {
      await shot(name);
      throw new Error(`${err instanceof Error ? err.message : String(err)}\nnotifications:\n${await notificationTexts(page)}`);
    };

    await page.locator('.activitybar .action-item a[aria-label^="Harness Lab"]').click({ timeout: 60_000, force: true });
    await widenSidebar(page, 720);
    const view = pane(page, /training runs/i);
    const header = view.locator('.pane-header');
    await header.waitFor({ timeout: 30_000 });
    if ((await header.getAttribute('aria-expanded')) !== 'true') await header.click();
    await view.locator('.monaco-list-row', { hasText: 'No training runs in default (double)' }).waitFor({ timeout: 60_000 });

    await runCommand(page, 'Harness Lab: Start Training Run...');
    await atStep(page, '1/3');
    await pick(page, 'trl');
    await atStep(page, '2/3');
    await pick(page, 'training/trl-serve.json');
    await atStep(page, '3/3');
    await pick(page, 'double');

    // Started as one thing: the editor says it deployed the server with the trainer.
    await toast(page, new RegExp(`Training run ${RUN} created as Job .* with its rollout server ${RUN}-serve`))
      .waitFor({ timeout: 360_000 })
      .catch(failWith('01-not-started'));
    const runRow = view.locator('.monaco-list-row', { hasText: RUN }).first();
    await runRow.waitFor({ timeout: 60_000 });
    // The server's row under the run, read from its /metrics (the view lists again every 15 s while a run is unfinished).
    const serverRow = view.locator('.monaco-list-row', { hasText: `rollout server ${RUN}-serve` });
    await serverRow
      .filter({ hasText: /Ready · 0 done · infra-failed 0\.0% · no reward yet/ })
      .waitFor({ timeout: 120_000 })
      .catch(failWith('02-no-server-row'));
    // The trainer reached the server at the URL and with the key the editor's start gave it.
    await page
      // A string, not a RegExp: the editor renders spaces as no-break spaces, which only string matching normalises.
      .locator('.monaco-editor .view-lines', { hasText: 'trainer got 200 [{"name":"train","num_tasks":1}]' })
      .first()
      .waitFor({ timeout: 120_000 })
      .catch(failWith('02-trainer-did-not-reach-server'));
    await shot('02-running');

    // Cancel on the run's row: the confirmation names the server; both go.
    await runRow.click();
    await runRow.hover();
    await runRow.locator('.action-label[aria-label^="Cancel Training Run"]').click({ timeout: 10_000 });
    await page
      .locator('.monaco-dialog-box', {
        hasText: new RegExp(`Delete Job default/${RUN} and its pods and its rollout server ${RUN}-serve\\?`),
      })
      .waitFor({ timeout: 20_000 })
      .catch(failWith('03-no-confirmation'));
    await page.locator('.monaco-dialog-box .monaco-button', { hasText: /^Delete$/ }).click({ timeout: 20_000 });
    await toast(
      page,
      new RegExp(`Training run ${RUN}: deleted Job ${RUN}; rollout server: removed Deployment ${RUN}-serve, Service ${RUN}-serve`),
    )
      .waitFor({ timeout: 240_000 })
      .catch(failWith('03-not-cancelled'));
    await view.locator('.monaco-list-row', { hasText: 'No training runs in default (double)' }).waitFor({ timeout: 60_000 });
    await shot('03-cancelled');

    // Nothing of the run is left on the cluster.
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(cluster.kubeconfig);
    const selector = `harness-lab/run=${RUN}`;
    const core = kc.makeApiClient(k8s.CoreV1Api);
    const apps = kc.makeApiClient(k8s.AppsV1Api);
    const batch = kc.makeApiClient(k8s.BatchV1Api);
    const names = (l: { items: k8s.KubernetesObject[] }) => l.items.map((o) => `${o.kind ?? ''}${o.metadata?.name}`);
    const left = [
      ...names(await apps.listNamespacedDeployment({ namespace: 'default', labelSelector: selector })),
      ...names(await batch.listNamespacedJob({ namespace: 'default', labelSelector: selector })),
      ...names(await core.listNamespacedService({ namespace: 'default', labelSelector: selector })),
      ...names(await core.listNamespacedSecret({ namespace: 'default', labelSelector: selector })),
      ...names(await core.listNamespacedConfigMap({ namespace: 'default', labelSelector: selector })),
      ...names(await core.listNamespacedPersistentVolumeClaim({ namespace: 'default', labelSelector: selector })),
      ...names(await core.listNamespacedServiceAccount({ namespace: 'default', labelSelector: selector })),
    ];
    assert.deepEqual(left, [], 'nothing of the run is left');
  },
);
