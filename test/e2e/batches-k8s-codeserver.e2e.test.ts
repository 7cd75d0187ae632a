// Submit Rollout Batch with backend k8s in a real workbench (code-server 4.100.3 with the platform .vsix
// packaged from this repository and installed as a user installs it) against the Kubernetes API server
// double, whose node runs pods as real Docker containers. KUBECONFIG in code-server's environment names
// the double; the in-cluster proxy runs from a local harness-lab image (HARNESS_LAB_K8S_PROXY_IMAGE)
// and the pods mount this machine's node and reference harness (HARNESS_LAB_K8S_HARNESS_FROM=hostPath);
// the policy engine runs on the host's loopback, and the namespace reaches it as the Service hl-engine
// (a relay pod behind it forwards to the port the double exposes). As a user would: the quick picks
// (task, harness react, group size 2, backend k8s, the double's kube context, then the engine: with the
// defaults no setting names one the cluster reaches, so "Enter the engine URL the cluster's pods reach…",
// where a loopback URL is refused as typed and an unreachable one keeps the box open with the reason,
// and the Service name is accepted, its model listed through the loopback Engine URL; the offer to
// remember it in harnessLab.clusterEngineUrl is taken), the batch appears in the Batches
// view; while a rollout waits in its tool call (until the test lets it go: no race on "while"), its
// row shows the call captured so far and the rollout viewer opened from its context menu shows it,
// both mirrored live from the cluster's proxy; then both rollouts finish with class and reward, the
// open viewer follows to the last call, and the finished batch's other rollout opens in the viewer.
// With the defaults a new user has: harnessLab.model empty (the wizard fills it from the engine's
// /v1/models), harnessLab.engineURL on loopback (refused for the cluster, with the reason) and no
// harnessLab.clusterEngineUrl (the engine as the pods reach it, a Service name in the double, is typed
// into the wizard). The finished batch leaves nothing in the namespace; Export Batch… writes TRL rows;
// Install Harness… installs qwen-code from npm; the Harness Lab terminal runs `harness-lab --help`, the
// installed harness and a real rollout of the reference harness on a task (`harness-lab rollout`, its
// outcome line with the reward); Delete Batch removes the batch. Then a second batch with "keep cluster
// objects" on, its engine now offered from the remembered setting: Cancel Batch while its rollout runs,
// Resume Batch from the row's menu runs it to the end, its objects are kept, and Tear Down Batch from
// the row's menu removes them.
// Screenshots: test-artifacts/e2e/k8s-batches-*.png.
import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type Docker from 'dockerode';
import type { Page } from 'playwright-core';
import { readManifest, readRolloutStates } from '../../src/batch/state.js';
import { loadSessionFile } from '../../src/capture/store.js';
import { buildProxyImage, engineFor, testCluster, type EngineInNamespace } from '../integration/k8s-fixtures.js';
import { dockerReady } from '../integration/sandbox-fixtures.js';
import type { KubeDouble } from '../k8s-double/index.js';
import { missingPrerequisite, pickFromContextMenu, runCommand } from './code-server.js';
import {
  ARTIFACTS,
  ROOT,
  atStep,
  findFiles,
  notificationTexts,
  openRolloutRow,
  openWorkbench,
  pick,
  showBatchesView,
  submitBatch,
  viewerFrame,
  type Workbench,
} from './workbench.js';

const NS = 'default';
const PROXY_IMAGE = `harness-lab/k8s-proxy-e2e:${process.pid}`;
const GATE = '/tmp/hl-e2e-go';
/** The engine relay pod's port, behind the hl-engine Service. */
const RELAY_PORT = 8000;
// The first call asks for a tool that waits until the test creates GATE in the rollout's container.
const POLICY = {
  name: 'gated-hello',
  rules: [
    {
      when: { last_message: 'STEP_BY_STEP' },
      then: { call: { tool: '^bash$', input: `until [ -f ${GATE} ]; do sleep 0.2; done; printf 'Hello, world!' > hello.txt` } },
    },
  ],
  fallback: { say: 'Done.' },
};

let workbench: Workbench | undefined;
let cluster: KubeDouble | undefined;
let engine: EngineInNamespace | undefined;
let docker: Docker | undefined;
let stateDir = '';
let releasing = false;

after(async () => {
  releasing = false;
  await workbench?.close();
  await engine?.engine.close();
  await cluster?.close();
  await docker
    ?.getImage(PROXY_IMAGE)
    .remove({ force: true })
    .catch(() => undefined);
  if (stateDir && !process.env.HL_E2E_KEEP) rmSync(stateDir, { recursive: true, force: true });
});

const shot = (page: Page, name: string) => page.screenshot({ path: join(ARTIFACTS, `k8s-batches-${name}.png`) });

/** What of a batch is in the namespace: jobs, deployments, services, secrets, config maps and pods by name. */
async function leftInNamespace(batchId: string): Promise<string[]> {
  const kinds = [
    `/apis/batch/v1/namespaces/${NS}/jobs`,
    `/apis/apps/v1/namespaces/${NS}/deployments`,
    `/api/v1/namespaces/${NS}/services`,
    `/api/v1/namespaces/${NS}/secrets`,
    `/api/v1/namespaces/${NS}/configmaps`,
    `/api/v1/namespaces/${NS}/pods`,
  ];
  const out: string[] = [];
  for (const k of kinds) {
    const r = await fetch(`${cluster!.url}${k}?labelSelector=${encodeURIComponent(`harness-lab/batch=${batchId}`)}`, {
      headers: { authorization: `Bearer ${cluster!.api.token}` },
    });
    for (const o of ((await r.json()) as { items: { metadata: { name: string } }[] }).items)
      out.push(`${k.split('/').pop()}/${o.metadata.name}`);
  }
  return out;
}

/** Opens the gate in every running rollout container of the batch until stopped (members may start one after another). */
async function releaseRollouts(d: Docker, batchId: string): Promise<void> {
  releasing = true;
  while (releasing) {
    const running = await d.listContainers({
      filters: JSON.stringify({
        label: [`k8s.label/harness-lab/batch=${batchId}`, 'k8s.label/harness-lab/role=rollout'],
        status: ['running'],
      }),
    });
    for (const c of running) {
      const exec = await d
        .getContainer(c.Id)
        .exec({ Cmd: ['touch', GATE], User: '0' })
        .catch(() => undefined);
      await exec?.start({ hijack: false, stdin: false }).catch(() => undefined);
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

test(
  'Submit Rollout Batch with backend k8s on the API server double: live calls while running, classes and rewards, a rollout in the viewer',
  { timeout: 1_500_000 },
  async () => {
    const missing = missingPrerequisite();
    if (missing) assert.fail(`real-workbench e2e cannot run: ${missing}`);
    const built = spawnSync(process.execPath, ['esbuild.mjs'], { cwd: ROOT, encoding: 'utf8' });
    assert.equal(built.status, 0, built.stderr);
    mkdirSync(ARTIFACTS, { recursive: true });
    for (const f of readdirSync(ARTIFACTS)) if (f.startsWith('k8s-batches-')) rmSync(join(ARTIFACTS, f));

    docker = await dockerReady();
    await buildProxyImage(docker, PROXY_IMAGE);
    cluster = await testCluster();
    stateDir = mkdtempSync(join(tmpdir(), 'hl-batches-k8s-e2e-'));
    const policyFile = join(stateDir, 'policy.json');
    writeFileSync(policyFile, JSON.stringify(POLICY));
    // Pods reach it as the Service hl-engine (below): the engine's request guard is told that name.
    engine = await engineFor(cluster, NS, policyFile, [`hl-engine.${NS}.svc`]);

    const workspace = join(stateDir, 'workspace');
    const batches = join(workspace, 'harness-lab-batches');
    const task = join(workspace, 'tasks', 'stepper');
    cpSync(join(ROOT, 'examples', 'tasks', 'hello-file'), task, { recursive: true });
    writeFileSync(
      join(task, 'task.toml'),
      readFileSync(join(task, 'task.toml'), 'utf8').replace('name = "harness-lab/hello-file"', 'name = "e2e/stepper"'),
    );
    writeFileSync(join(task, 'instruction.md'), 'STEP_BY_STEP: create a file named `hello.txt` holding `Hello, world!`.\n');

    const hostEngineUrl = `${engine.url}/v1`;
    // The engine as the namespace's pods reach it: a Service name. The double gives a Service endpoints
    // only through a selector (as a cluster does without an Endpoints object), so a relay pod behind it
    // forwards RELAY_PORT to the engine on the host (the port the double exposes to the namespace).
    const api = (path: string, body: unknown) =>
      fetch(`${cluster!.url}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${cluster!.api.token}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      }).then(async (r) => assert.equal(r.status, 201, `POST ${path}: ${r.status} ${await r.text()}`));
    const relay = `const net=require('net');net.createServer((c)=>{const u=net.connect(${engine.port},'127.0.0.1');c.pipe(u).pipe(c);u.on('error',()=>c.destroy());c.on('error',()=>u.destroy());}).listen(${RELAY_PORT},'0.0.0.0');`;
    await api(`/api/v1/namespaces/${NS}/pods`, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'hl-engine-relay', namespace: NS, labels: { app: 'hl-engine-relay' } },
      spec: {
        containers: [
          {
            name: 'relay',
            image: 'harness-lab/base-node:bookworm',
            command: ['node', '-e', relay],
            ports: [{ containerPort: RELAY_PORT }],
          },
        ],
      },
    });
    await api(`/api/v1/namespaces/${NS}/services`, {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'hl-engine', namespace: NS },
      spec: { selector: { app: 'hl-engine-relay' }, ports: [{ port: RELAY_PORT, targetPort: RELAY_PORT }] },
    });
    for (let i = 0; ; i++) {
      const pod = (await fetch(`${cluster.url}/api/v1/namespaces/${NS}/pods/hl-engine-relay`, {
        headers: { authorization: `Bearer ${cluster.api.token}` },
      }).then((r) => r.json())) as { status?: { phase?: string } };
      if (pod.status?.phase === 'Running') break;
      if (i >= 120) assert.fail(`the engine relay pod is not running: ${JSON.stringify(pod.status)}`);
      await new Promise((r) => setTimeout(r, 500));
    }
    const engineUrl = `http://hl-engine.${NS}.svc:${RELAY_PORT}/v1`;
    workbench = await openWorkbench({
      stateDir,
      workspace,
      env: {
        KUBECONFIG: cluster.kubeconfig,
        HARNESS_LAB_K8S_PROXY_IMAGE: PROXY_IMAGE,
        HARNESS_LAB_K8S_HARNESS_FROM: 'hostPath',
        // Install Harness… runs npm with code-server's HOME (a throwaway one): the machine's npm cache
        // spares a download when it holds the pinned harness already.
        npm_config_cache: join(homedir(), '.npm'),
        npm_config_prefer_offline: 'true',
      },
      // The Model setting stays at its default (empty); harnessLab.clusterEngineUrl too (the wizard is told it).
      userSettings: { 'harnessLab.engineURL': hostEngineUrl },
      vsix: true,
    });
    const { page } = workbench;
    try {
      const view = await showBatchesView(page);
      // The loopback URL and the embedded engine are shown as not offered, with the reason.
      const notOffered = async (p: Page) => {
        await shot(p, '00-engine-pick');
        const rows = await p.locator('.quick-input-list .monaco-list-row').allInnerTexts();
        assert.ok(
          rows.some((r) => r.includes('Embedded engine') && r.includes("a cluster's pods cannot call it")),
          rows.join(' | '),
        );
        assert.ok(
          rows.some((r) => r.includes(hostEngineUrl) && r.includes('loopback')),
          rows.join(' | '),
        );
        // No setting names an engine the cluster reaches: the entry to type it is first, not a dead end.
        assert.match(rows[0] ?? '', /Enter the engine URL the cluster's pods reach…/, rows.join(' | '));
      };
      const settingsFile = join(stateDir, 'user-data', 'User', 'settings.json');
      assert.doesNotMatch(readFileSync(settingsFile, 'utf8'), /clusterEngineUrl/, 'the default: no cluster engine URL');
      await submitBatch(page, { task: 'tasks/stepper', harness: 'react', groupSize: 2, backend: 'k8s', kubeContext: 'double' });
      await atStep(page, 'engine');
      await notOffered(page);
      await pick(page, 'Enter the engine URL');
      await atStep(page, 'engine URL as the cluster reaches it');
      const urlBox = page.locator('.quick-input-widget input.input:visible');
      const message = page.locator('.quick-input-widget .quick-input-message:visible');
      // As typed: a loopback URL is refused with the reason.
      await urlBox.fill(hostEngineUrl);
      await message.filter({ hasText: /loopback address: inside a pod it is the pod itself/ }).waitFor({ timeout: 20_000 });
      await shot(page, '00b-engine-url-loopback');
      // On Enter: an engine this machine cannot reach keeps the box open with the reason (a documentation address, never routed).
      await urlBox.fill('http://192.0.2.1:8000/v1');
      await page.keyboard.press('Enter');
      await message.filter({ hasText: /cannot be reached from this machine/ }).waitFor({ timeout: 60_000 });
      assert.match(await message.innerText(), /Enter a URL both this machine and the cluster's pods reach, or the engine's Service name/);
      await shot(page, '00c-engine-url-unreachable');
      // The Service name: its models are listed through the loopback Engine URL; Enter goes on to the checks.
      await urlBox.fill(engineUrl);
      await page
        .locator('.quick-input-widget .quick-input-message:visible, .quick-input-widget .quick-input-description:visible')
        .filter({ hasText: /resolves only inside the cluster: its models are listed through harnessLab\.engineUrl/ })
        .first()
        .waitFor({ timeout: 20_000 });
      await shot(page, '00d-engine-url-service');
      await page.keyboard.press('Enter');
      // Once the checks passed: remember it for later k8s batches (User settings).
      const remember = page.locator('.notification-toast', { hasText: /remember .* as the engine the cluster's pods reach/ });
      await remember.waitFor({ timeout: 120_000 });
      await remember.locator('.monaco-button', { hasText: /^Remember$/ }).click();
      for (let i = 0; i < 60 && !readFileSync(settingsFile, 'utf8').includes('harnessLab.clusterEngineUrl'); i++)
        await new Promise((r) => setTimeout(r, 500));
      assert.equal(
        (JSON.parse(readFileSync(settingsFile, 'utf8')) as Record<string, unknown>)['harnessLab.clusterEngineUrl'],
        engineUrl,
        'Remember wrote harnessLab.clusterEngineUrl to the User settings',
      );
      const toast = page.locator('.notification-toast', { hasText: /Harness Lab: batch b\d{8}-\d{6}-[0-9a-f]{4}/ });
      await toast.waitFor({ timeout: 60_000 });
      const batchRow = view.locator('.monaco-list-row[aria-level="1"]', { hasText: /^\s*b\d{8}-\d{6}-[0-9a-f]{4}/ }).first();
      await batchRow.filter({ hasText: /running \(pid \d+\) · 0\/2 finished · k8s/ }).waitFor({ timeout: 60_000 });
      const [dirName] = readdirSync(batches);
      const dir = join(batches, dirName!);
      const m = readManifest(dir);
      assert.deepEqual(
        [m.backend, m.k8s?.context, m.k8s?.namespace, m.engine_url, m.model],
        ['k8s', 'double', NS, engineUrl, engine.engine.model],
      );
      await shot(page, '01-submitted');

      // Live: the first member waits in its tool call; the call that asked for it is in <batch>/capture and in the view.
      const r0 = view.locator('.monaco-list-row', { hasText: '#0 stepper.react.0' });
      const r1 = view.locator('.monaco-list-row', { hasText: '#1 stepper.react.1' });
      await r0.filter({ hasText: 'running · 1 call' }).waitFor({ timeout: 480_000 });
      const running = readRolloutStates(dir)[0]!;
      assert.equal(running.state, 'running', 'the attempt has not ended');
      const sessionFile = join(dir, 'capture', 'sessions', `${running.session_id}.jsonl`);
      assert.ok(existsSync(sessionFile));
      assert.equal(loadSessionFile(sessionFile)!.calls.length, 1, "the running rollout's call was mirrored from the cluster's proxy");
      const jobs = cluster.api.requests('POST', new RegExp(`/apis/batch/v1/namespaces/${NS}/jobs$`));
      assert.ok(jobs.length >= 1, "the rollout runs as a Job the extension's lab created");
      await shot(page, '02-running-live-call');

      // The running rollout in the viewer, from its context menu: the call so far.
      await pickFromContextMenu(page, r0, 'Open in Rollout Viewer');
      await page.locator('.tab', { hasText: `${running.session_id}.jsonl` }).waitFor({ timeout: 60_000 });
      const frame = viewerFrame(page);
      await frame.locator('[data-testid="counts"]').waitFor({ timeout: 60_000 });
      assert.equal(await frame.locator('.graph-row').count(), 1, "the viewer shows the running rollout's call");
      await shot(page, '03-running-in-viewer');

      // Let the rollouts go: both finish with class and reward; the open viewer follows to the last call.
      const release = releaseRollouts(docker, m.batch_id);
      await r0.filter({ hasText: 'completed · reward 1' }).waitFor({ timeout: 300_000 });
      await r1.filter({ hasText: 'completed · reward 1' }).waitFor({ timeout: 300_000 });
      const group = view.locator('.monaco-list-row', { hasText: 'stepper.react' }).filter({ hasText: 'mean' }).first();
      await group.filter({ hasText: '2/2 · mean 1 · std 0 · NO CONTRAST' }).waitFor({ timeout: 30_000 });
      await batchRow.filter({ hasText: /finished · 2\/2 finished · k8s/ }).waitFor({ timeout: 120_000 });
      await page.locator('.notification-toast', { hasText: /finished: 2 done, 0 discarded of 2/ }).waitFor({ timeout: 60_000 });
      releasing = false;
      await release;
      // Torn down at its end: nothing of the batch is left in the namespace.
      for (let i = 0; i < 60 && (await leftInNamespace(m.batch_id)).length; i++) await new Promise((r) => setTimeout(r, 1000));
      assert.deepEqual(await leftInNamespace(m.batch_id), [], 'the finished batch left nothing in the namespace');
      const states = readRolloutStates(dir);
      assert.deepEqual(
        states.map((s) => [s.rollout_id, s.class, s.reward]),
        [
          ['stepper.react.0', 'completed', 1],
          ['stepper.react.1', 'completed', 1],
        ],
      );
      assert.ok(states[0]!.n_calls >= 2, `calls: ${states[0]!.n_calls}`);
      await frame
        .locator('.graph-row')
        .nth(states[0]!.n_calls - 1)
        .waitFor({ timeout: 30_000 });
      assert.equal(await frame.locator('.graph-row').count(), states[0]!.n_calls, 'the open viewer followed the rollout to its last call');
      const mirrored = loadSessionFile(sessionFile)!.calls.map((c) => c.call_id);
      assert.equal(new Set(mirrored).size, states[0]!.n_calls, 'each call mirrored once');
      assert.equal(mirrored.length, states[0]!.n_calls);
      await shot(page, '04-finished');

      // The other rollout of the finished batch opens in the viewer too.
      await runCommand(page, 'View: Close All Editors');
      await openRolloutRow(page, r1, states[1]!.session_id!);
      await frame.locator('[data-testid="counts"]').waitFor({ timeout: 60_000 });
      await frame
        .locator('.graph-row')
        .nth(states[1]!.n_calls - 1)
        .waitFor({ timeout: 30_000 });
      assert.equal(await frame.locator('.graph-row').count(), states[1]!.n_calls, 'the viewer shows every call of the rollout');
      assert.ok(Number(await frame.locator('[data-testid="counts"]').getAttribute('data-sampled')) > 0, 'sampled tokens captured');
      await shot(page, '05-rollout-viewer');

      // Export Batch…: the batch, the format, the save dialog (its default path beside the batch); TRL rows and the counts.
      await runCommand(page, 'View: Close All Editors');
      await runCommand(page, 'Harness Lab: Export Batch…');
      await atStep(page, 'Batch to export');
      await pick(page, m.batch_id);
      await atStep(page, 'format');
      await pick(page, 'TRL');
      const out = join(batches, `${m.batch_id}.trl.jsonl`);
      await page.locator('.quick-input-widget input.input:visible').waitFor({ timeout: 20_000 });
      await page.keyboard.press('Enter');
      await page
        .locator('.notification-toast', { hasText: /exported .*: 2 TRL row\(s\) from 2 rollout\(s\)/ })
        .waitFor({ timeout: 60_000 });
      const rows = readFileSync(out, 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { reward: number; completion_ids: number[] });
      assert.deepEqual(
        rows.map((r) => r.reward),
        [1, 1],
      );
      assert.ok(rows.every((r) => r.completion_ids.length > 0));
      await shot(page, '06-exported');

      // Install Harness…: the picker marks qwen-code as not installed (this HOME's harness cache is
      // empty); npm installs the pinned version into it.
      await runCommand(page, 'Notifications: Clear All Notifications');
      await runCommand(page, 'Harness Lab: Install Harness…');
      await atStep(page, 'Install Harness');
      const qwenRow = page.locator('.quick-input-list .monaco-list-row', { hasText: 'qwen-code' }).first();
      await qwenRow.waitFor({ timeout: 20_000 });
      assert.match(await qwenRow.innerText(), /not installed: @qwen-code\/qwen-code@0\.15\.10/);
      await pick(page, 'qwen-code');
      const qwenBin = join(
        stateDir,
        'home',
        '.cache',
        'harness-lab',
        'harnesses',
        '@qwen-code',
        'qwen-code@0.15.10',
        'node_modules',
        '.bin',
        'qwen',
      );
      await page.locator('.notification-toast', { hasText: 'qwen-code is installed' }).waitFor({ timeout: 600_000 });
      assert.ok(existsSync(qwenBin), `Install Harness… installed ${qwenBin}`);
      await shot(page, '07-harness-installed');

      // The Harness Lab terminal: the bundled CLI and the installed harness on PATH, and a harness run on
      // a task for real: one rollout of the reference harness (local sandbox) on hello-file, answered by
      // the task's scripted policy, printing its outcome line (on the terminal too, for the screenshot).
      const terminalTask = join(stateDir, 'terminal-task');
      cpSync(join(ROOT, 'examples', 'tasks', 'hello-file'), terminalTask, { recursive: true });
      const terminalRollouts = join(stateDir, 'terminal-rollouts');
      await runCommand(page, 'Harness Lab: Open Harness Lab Terminal');
      await page.locator('.terminal-wrapper.active, .xterm').first().waitFor({ timeout: 30_000 });
      const helpFile = join(stateDir, 'help.txt');
      const qwenFile = join(stateDir, 'qwen-version.txt');
      const rolloutFile = join(stateDir, 'terminal-rollout.txt');
      await new Promise((r) => setTimeout(r, 1500));
      await page.keyboard.type(
        `harness-lab --help > ${helpFile} 2>&1; qwen --version > ${qwenFile}.tmp 2>&1; mv ${qwenFile}.tmp ${qwenFile}; ` +
          `harness-lab rollout --task ${terminalTask} --harness react --sandbox local -n 1 --out ${terminalRollouts} ` +
          `2>&1 | tee ${rolloutFile}.tmp; mv ${rolloutFile}.tmp ${rolloutFile}\n`,
        { delay: 5 },
      );
      for (let i = 0; i < 120 && !existsSync(qwenFile); i++) await new Promise((r) => setTimeout(r, 500));
      assert.match(readFileSync(helpFile, 'utf8'), /^usage: harness-lab <command>/);
      assert.match(readFileSync(qwenFile, 'utf8').trim(), /^0\.15\.10$/, 'the installed harness runs from the terminal');
      for (let i = 0; i < 600 && !existsSync(rolloutFile); i++) await new Promise((r) => setTimeout(r, 500));
      const rolloutOut = existsSync(rolloutFile) ? readFileSync(rolloutFile, 'utf8') : '(no output yet)';
      assert.match(rolloutOut, /\[react \/ local\] task hello-file: ok reward=1\.00 /, rolloutOut);
      const record = JSON.parse(readFileSync(join(terminalRollouts, 'hello-file', 'react', '0', 'rollout.json'), 'utf8')) as {
        reward?: unknown;
      };
      assert.equal(record.reward, 1, "the rollout's record holds the verifier's reward");
      await shot(page, '08-lab-terminal');

      // Delete Batch from the view's menu: asked first, then the directory is gone (its cluster objects were already).
      await pickFromContextMenu(page, batchRow, 'Delete Batch');
      await page.locator('.monaco-dialog-box .monaco-button', { hasText: /^Delete$/ }).click({ timeout: 20_000 });
      await page.locator('.notification-toast', { hasText: /deleted batch/ }).waitFor({ timeout: 60_000 });
      assert.ok(!existsSync(dir), 'Delete Batch removed the batch directory');
      await view.locator('.monaco-list-row', { hasText: m.batch_id }).waitFor({ state: 'detached', timeout: 30_000 });
      await shot(page, '09-deleted');

      // A second batch, its cluster objects kept (the setting, as a user sets it): Cancel Batch while its
      // rollout runs, then Resume Batch and Tear Down Batch from the batch row's menu.
      // The Settings editor: search the setting, tick its box (the workbench writes the User settings).
      await runCommand(page, 'Notifications: Clear All Notifications');
      await runCommand(page, 'View: Close All Editors');
      await runCommand(page, 'Preferences: Open User Settings');
      const keepBox = page
        .locator('.settings-editor .setting-item-bool', { hasText: 'Keep a finished k8s batch' })
        .locator('.setting-value-checkbox');
      for (let attempt = 0; !(await keepBox.isVisible()); attempt++) {
        if (attempt >= 3) throw new Error('the Settings editor did not show harnessLab.keepClusterObjects');
        await page.locator('.settings-editor .suggest-input-container').click({ timeout: 30_000 });
        await page.keyboard.press('Control+A');
        await page.keyboard.type('harnessLab.keepClusterObjects', { delay: 10 });
        await keepBox.waitFor({ timeout: 15_000 }).catch(() => undefined);
      }
      await keepBox.click();
      for (let i = 0; i < 60 && !/"harnessLab\.keepClusterObjects": true/.test(readFileSync(settingsFile, 'utf8')); i++)
        await new Promise((r) => setTimeout(r, 500));
      assert.match(readFileSync(settingsFile, 'utf8'), /"harnessLab\.keepClusterObjects": true/, 'the Settings editor wrote the setting');
      await runCommand(page, 'View: Close All Editors');
      await submitBatch(page, {
        task: 'tasks/stepper',
        harness: 'react',
        groupSize: 2,
        backend: 'k8s',
        kubeContext: 'double',
        engine: engineUrl,
      });
      const second = view.locator('.monaco-list-row[aria-level="1"]', { hasText: /^\s*b\d{8}-\d{6}-[0-9a-f]{4}/ }).first();
      await second.filter({ hasText: /running \(pid \d+\) · 0\/2 finished · k8s/ }).waitFor({ timeout: 60_000 });
      const dir2 = join(
        batches,
        readdirSync(batches).find((d) => d !== dirName && existsSync(join(batches, d, 'batch.json')))!,
      );
      const m2 = readManifest(dir2);
      const only = view.locator('.monaco-list-row', { hasText: '#0 stepper.react.0' });
      await only.filter({ hasText: 'running · 1 call' }).waitFor({ timeout: 480_000 });
      await pickFromContextMenu(page, second, 'Cancel Batch');
      await page.locator('.notification-toast', { hasText: new RegExp(`batch ${m2.batch_id} cancelled`) }).waitFor({ timeout: 180_000 });
      await second.filter({ hasText: /cancelled · 0\/2 finished · k8s/ }).waitFor({ timeout: 60_000 });
      assert.deepEqual(
        readRolloutStates(dir2).map((r) => r.state),
        ['queued', 'queued'],
        'the cancelled rollouts are queued again for Resume',
      );
      await shot(page, '10-cancelled');
      await runCommand(page, 'Notifications: Clear All Notifications');
      await pickFromContextMenu(page, second, 'Resume Batch');
      const release2 = releaseRollouts(docker, m2.batch_id);
      await only.filter({ hasText: 'completed · reward 1' }).waitFor({ timeout: 480_000 });
      await view
        .locator('.monaco-list-row', { hasText: '#1 stepper.react.1' })
        .filter({ hasText: 'completed · reward 1' })
        .waitFor({ timeout: 480_000 });
      await second.filter({ hasText: /finished · 2\/2 finished · k8s/ }).waitFor({ timeout: 180_000 });
      await page.locator('.notification-toast', { hasText: /finished: 2 done, 0 discarded of 2/ }).waitFor({ timeout: 60_000 });
      releasing = false;
      await release2;
      const attempts = readRolloutStates(dir2)[0]!.attempts.map((a) => a.outcome);
      assert.ok(
        attempts.length >= 2 && attempts[0] === 'cancelled',
        `a cancelled attempt, then the resumed one: ${JSON.stringify(attempts)}`,
      );
      const kept = await leftInNamespace(m2.batch_id);
      assert.ok(
        kept.some((k) => k.startsWith('deployments/')) && kept.some((k) => k.startsWith('services/')),
        `the kept proxy Deployment and Service are in the namespace: ${kept.join(', ')}`,
      );
      await shot(page, '11-resumed-kept');
      await runCommand(page, 'Notifications: Clear All Notifications');
      await pickFromContextMenu(page, second, 'Tear Down Batch');
      await page.locator('.notification-toast', { hasText: /Harness Lab: tore down/ }).waitFor({ timeout: 120_000 });
      for (let i = 0; i < 60 && (await leftInNamespace(m2.batch_id)).length; i++) await new Promise((r) => setTimeout(r, 1000));
      assert.deepEqual(await leftInNamespace(m2.batch_id), [], 'Tear Down Batch removed what the batch kept');
      assert.ok(existsSync(dir2), 'Tear Down keeps the batch directory');
      await shot(page, '12-torn-down');
    } catch (err) {
      await shot(page, '99-failure').catch(() => undefined);
      const logs = findFiles(stateDir, (f) => f.endsWith('Harness Lab.log'));
      throw new Error(
        `${err instanceof Error ? err.message : String(err)}\nNotifications:\n${await notificationTexts(page)}\nHarness Lab log:\n${logs
          .map((f) => readFileSync(f, 'utf8'))
          .join('\n')
          .slice(-6000)}`,
        { cause: err },
      );
    }
  },
);
