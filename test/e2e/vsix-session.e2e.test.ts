// #28 from the installed .vsix, through the UI: the proxy and the embedded engine survive what users
// do, and outcomes show everywhere.
//  - Run with Harness on a task whose policy writes the wrong greeting: a warning "not solved
//    (reward 0.00, policy_failure)" with the verifier's reason; the Sessions tree and the viewer's
//    header say the same.
//  - A captured terminal keeps working across Restart Proxy (same port) and across a second Start
//    Embedded Engine (the proxy switches engines under it).
//  - A window reload restarts the embedded engine this window owned, on its port; its URL is never
//    in the User settings.
//  - Stop Embedded Engine closes its port.
//  - A batch of sum-numbers on the embedded engine follows its sampling policy: the group has
//    contrast. Each member sums right or wrong with p = 1/2 drawn from its own seed (a hash of its
//    rollout id, src/batch/plan.ts rolloutSeed), so the rewards are the same in every run:
//    [1, 1, 1, 1, 0, 0, 0, 1] (test/unit/engine-sampling-policy.test.ts pins the draws).
// Screenshots: test-artifacts/e2e/session-*.png.
import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, test } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { readRolloutStates } from '../../src/batch/state.js';
import {
  chromiumPath,
  launchCodeServer,
  missingPrerequisite,
  pickFromContextMenu,
  runCommand,
  typeAndAccept,
  type CodeServer,
} from './code-server.js';
import { packageAndInstallVsix } from './vsix-install.js';
import {
  findFiles,
  notificationTexts,
  pane,
  QUIET_SETTINGS,
  showBatchesView,
  submitBatch,
  toast,
  viewerFrame,
  widenSidebar,
} from './workbench.js';

const ROOT = resolve(__dirname, '..', '..');
const ARTIFACTS = join(ROOT, 'test-artifacts', 'e2e');

let server: CodeServer | undefined;
let browser: Browser | undefined;
let stateDir = '';

after(async () => {
  await browser?.close().catch(() => undefined);
  await server?.stop(); // the process group: the extension host and the engines it spawned
  if (stateDir && !process.env.HL_E2E_KEEP) rmSync(stateDir, { recursive: true, force: true });
});

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(ARTIFACTS, `session-${name}.png`) });
}

/** Waits for a file the captured terminal's command writes, and returns its content. */
async function terminalResult(file: string, timeoutMs = 30_000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  while (!existsSync(file) || !readFileSync(file, 'utf8').trim()) {
    if (Date.now() > deadline) throw new Error(`the captured terminal did not write ${file}`);
    await new Promise((r) => setTimeout(r, 250));
  }
  return readFileSync(file, 'utf8').trim();
}

/** Types a command into the terminal in front (it has the focus after Open Captured Terminal). */
async function inTerminal(page: Page, command: string): Promise<void> {
  await page.locator('.terminal-wrapper.active .xterm').first().click();
  await page.keyboard.type(command, { delay: 5 });
  await page.keyboard.press('Enter');
}

test(
  'installed .vsix: reward 0 with its reason; a captured terminal across Restart Proxy and an engine swap; the engine back after a reload; a sampling batch with contrast',
  { timeout: 1_500_000 },
  async () => {
    const missing = missingPrerequisite();
    if (missing) assert.fail(`real-workbench e2e cannot run: ${missing}`);
    const docker = spawnSync('docker', ['image', 'inspect', 'harness-lab/base:bookworm'], { encoding: 'utf8' });
    if (docker.status !== 0)
      assert.fail(`Docker with the image harness-lab/base:bookworm is needed (run \`harness-lab images\`): ${docker.stderr.trim()}`);
    if (spawnSync('curl', ['--version']).status !== 0) assert.fail('curl is needed in the captured terminal');
    mkdirSync(ARTIFACTS, { recursive: true });
    for (const f of readdirSync(ARTIFACTS)) if (/^session-.*\.png$/.test(f)) rmSync(join(ARTIFACTS, f));
    stateDir = mkdtempSync(join(tmpdir(), 'hl-vsix-session-'));
    packageAndInstallVsix(stateDir);

    const workspace = join(stateDir, 'workspace');
    mkdirSync(join(workspace, 'tasks'), { recursive: true });
    // hello-wrong: hello-file whose policy writes the greeting without its comma (the verifier gives 0).
    const wrong = join(workspace, 'tasks', 'hello-wrong');
    cpSync(join(ROOT, 'examples', 'tasks', 'hello-file'), wrong, { recursive: true });
    writeFileSync(
      join(wrong, 'task.toml'),
      readFileSync(join(wrong, 'task.toml'), 'utf8').replace('name = "harness-lab/hello-file"', 'name = "harness-lab/hello-wrong"'),
    );
    writeFileSync(
      join(wrong, 'policy.json'),
      readFileSync(join(wrong, 'policy.json'), 'utf8').replace("printf 'Hello, world!' > hello.txt", "printf 'Hello world' > hello.txt"),
    );
    cpSync(join(ROOT, 'examples', 'tasks', 'sum-numbers'), join(workspace, 'tasks', 'sum-numbers'), { recursive: true });
    // One chat completion through the proxy this terminal's environment names; its HTTP status into $1.
    writeFileSync(
      join(workspace, 'call.sh'),
      `#!/bin/sh\ncurl -s -o /dev/null -w '%{http_code}' -H "authorization: Bearer $OPENAI_API_KEY" -H 'content-type: application/json' -d '{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}' "$OPENAI_BASE_URL/chat/completions" > "$1.tmp"; mv "$1.tmp" "$1"\n`,
    );
    const settingsFile = join(stateDir, 'user-data', 'User', 'settings.json');

    server = await launchCodeServer({
      stateDir,
      workspace,
      env: { KUBECONFIG: '' },
      userSettings: { ...QUIET_SETTINGS, 'extensions.autoUpdate': false },
    });
    browser = await chromium.launch({
      executablePath: chromiumPath(),
      headless: true,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    const page = await browser.newPage({ viewport: { width: 1500, height: 950 } });
    try {
      await page.goto(`${server.url}/?folder=${encodeURIComponent(workspace)}`);
      await page.locator('.monaco-workbench').waitFor({ timeout: 60_000 });
      await page.locator('.activitybar .action-item a[aria-label^="Harness Lab"]').click({ timeout: 60_000, force: true });
      await widenSidebar(page, 560);

      // 1. The embedded engine on hello-wrong's policy, then the proxy.
      await runCommand(page, 'Harness Lab: Start Embedded Engine');
      await typeAndAccept(page, 'hello-wrong/policy.json', 'hello-wrong/policy.json');
      const engineUp = toast(page, /embedded engine on http:\/\/127\.0\.0\.1:\d+/);
      await engineUp.waitFor({ timeout: 240_000 });
      await engineUp.locator('.monaco-button', { hasText: 'Start Proxy' }).click();
      const status = page.locator('.statusbar-item', { hasText: /Harness Lab :\d+/ });
      await status.waitFor({ timeout: 60_000 });
      const proxyPort = /Harness Lab :(\d+)/.exec(await status.innerText())![1]!;

      // 2. Run with Harness: reward 0 is a warning naming the verifier's reason.
      const task = pane(page, /^tasks/i).locator('.monaco-list-row', { hasText: 'hello-wrong' });
      await task.waitFor({ timeout: 30_000 });
      await task.hover();
      await task.locator('.action-label[aria-label^="Run with Harness"]').click({ timeout: 10_000 });
      await page.locator('.quick-input-list .monaco-list-row', { hasText: 'react' }).first().waitFor({ timeout: 15_000 });
      await typeAndAccept(page, 'react', 'react');
      const done = toast(page, /react on hello-wrong: not solved \(reward 0\.00, policy_failure\)/);
      await done.waitFor({ timeout: 600_000 });
      assert.match(
        await done.innerText(),
        /verifier: hello\.txt is missing or wrong: Hello world/,
        "the verifier's reason is in the message",
      );
      assert.equal((await done.locator('.codicon-warning, .codicon-notifications-warning').count()) > 0, true, 'a warning, not a success');
      const sessions = pane(page, /^sessions/i);
      await sessions.locator('.monaco-list-row', { hasText: 'reward 0.00 · not solved' }).first().waitFor({ timeout: 30_000 });
      await shot(page, '01-reward-0-warning');
      await done.locator('.monaco-button', { hasText: 'Open in Viewer' }).click();
      const viewer = viewerFrame(page);
      const outcome = viewer.locator('[data-testid="outcome"]');
      await outcome.waitFor({ timeout: 60_000 });
      const outcomeText = await outcome.innerText();
      for (const want of ['reward 0.00', 'not solved (policy_failure)', 'task hello-wrong', 'hello.txt is missing or wrong'])
        assert.ok(outcomeText.includes(want), `the viewer header shows "${want}": ${outcomeText}`);
      await shot(page, '02-viewer-outcome');
      await runCommand(page, 'View: Close All Editors');
      await runCommand(page, 'Notifications: Clear All Notifications');

      // 3. A captured terminal answers, before and after Restart Proxy (same port, same session).
      await runCommand(page, 'Harness Lab: Open Captured Terminal');
      await page.locator('.terminal-wrapper.active .xterm').first().waitFor({ timeout: 30_000 });
      await new Promise((r) => setTimeout(r, 2000)); // the shell's first prompt
      await inTerminal(page, 'sh call.sh before.txt');
      assert.equal(await terminalResult(join(workspace, 'before.txt')), '200');
      await runCommand(page, 'Harness Lab: Restart Proxy');
      await page.locator('.statusbar-item', { hasText: `Harness Lab :${proxyPort}` }).waitFor({ timeout: 60_000 });
      await inTerminal(page, 'sh call.sh after-restart.txt');
      assert.equal(
        await terminalResult(join(workspace, 'after-restart.txt')),
        '200',
        'the terminal opened before Restart Proxy still reaches it',
      );
      await sessions
        .locator('.monaco-list-row', { hasText: /captured terminal · 2 calls/ })
        .first()
        .waitFor({ timeout: 30_000 });
      await shot(page, '03-terminal-after-restart');

      // 4. A second Start Embedded Engine: the proxy switches to it on the same port; the terminal goes on.
      await runCommand(page, 'Harness Lab: Start Embedded Engine');
      await typeAndAccept(page, 'sum-numbers/policy.json', 'sum-numbers/policy.json');
      const swapped = toast(page, /embedded engine on http:\/\/127\.0\.0\.1:(\d+) following .*; the proxy switched to it/);
      await swapped.waitFor({ timeout: 240_000 });
      const enginePort = /127\.0\.0\.1:(\d+)/.exec(await swapped.innerText())![1]!;
      assert.match(
        await page.locator('.statusbar-item', { hasText: /Harness Lab :\d+/ }).innerText(),
        new RegExp(`:${proxyPort}`),
        'the proxy kept its port',
      );
      await inTerminal(page, 'sh call.sh after-swap.txt');
      assert.equal(
        await terminalResult(join(workspace, 'after-swap.txt')),
        '200',
        'the terminal reaches the new engine through the same proxy',
      );
      await pane(page, /^engines/i)
        .locator('.monaco-list-row', { hasText: `127.0.0.1:${enginePort}` })
        .waitFor({ timeout: 30_000 });
      await shot(page, '04-engine-swapped');
      assert.doesNotMatch(readFileSync(settingsFile, 'utf8'), /harnessLab\.engine/i, 'no ephemeral engine URL in the User settings');

      // 5. A window reload: the engine this window owned comes back on its port.
      await runCommand(page, 'Developer: Reload Window');
      await page.locator('.monaco-workbench').waitFor({ timeout: 60_000 });
      const restarted = toast(page, new RegExp(`restarted the embedded engine on http://127\\.0\\.0\\.1:${enginePort}`));
      await restarted.waitFor({ timeout: 240_000 });
      await shot(page, '05-engine-after-reload');
      assert.doesNotMatch(readFileSync(settingsFile, 'utf8'), /harnessLab\.engine/i, 'still no engine URL in the User settings');
      const health = await fetch(`http://127.0.0.1:${enginePort}/v1/models`);
      assert.equal(health.status, 200, 'the restarted engine answers on its former port');
      await runCommand(page, 'Notifications: Clear All Notifications');

      // 6. A batch of sum-numbers on the embedded engine: its sampling policy gives the group contrast.
      // showBatchesView clicks the Harness Lab icon, which would fold the side bar that shows it already.
      await runCommand(page, 'View: Show Explorer');
      const batchesView = await showBatchesView(page);
      await submitBatch(page, { task: 'tasks/sum-numbers', harness: 'react', groupSize: 8, backend: 'docker' });
      const group = batchesView.locator('.monaco-list-row', { hasText: 'sum-numbers.react' }).filter({ hasText: 'mean' }).first();
      await group.filter({ hasText: '8/8' }).waitFor({ timeout: 900_000 });
      const batchDir = findFiles(join(workspace, 'harness-lab-batches'), (p) => p.endsWith('batch.json')).map((p) => resolve(p, '..'))[0]!;
      const rewards = readRolloutStates(batchDir).map((s) => s.reward);
      assert.equal(new Set(rewards).size, 2, `the group has both rewards: ${JSON.stringify(rewards)}`);
      assert.deepEqual(rewards, [1, 1, 1, 1, 0, 0, 0, 1], "each member's reward follows from its own seed");
      assert.doesNotMatch(await group.innerText(), /NO CONTRAST/);
      await pickFromContextMenu(page, group, 'Open Group View');
      const groupView = viewerFrame(page);
      await groupView.locator('[data-testid="group-view"]').waitFor({ timeout: 60_000 });
      assert.equal(await groupView.locator('[data-testid="teaches-nothing"]').count(), 0, 'no "teaches nothing" badge');
      assert.match(await groupView.locator('[data-testid="group-stats"]').innerText(), /std 0\.[0-9]*[1-9]/);
      await shot(page, '06-group-contrast');

      // 7. Stop Embedded Engine: its port closes, and the next reload does not start it again.
      await runCommand(page, 'Harness Lab: Stop Embedded Engine');
      await toast(page, `stopped the embedded engine on http://127.0.0.1:${enginePort}`).waitFor({ timeout: 30_000 });
      const answers = () =>
        fetch(`http://127.0.0.1:${enginePort}/v1/models`).then(
          () => true,
          () => false,
        );
      for (let i = 0; i < 40 && (await answers()); i++) await new Promise((r) => setTimeout(r, 250));
      assert.equal(await answers(), false, 'the stopped engine no longer answers');
    } catch (err) {
      await shot(page, '99-failure').catch(() => undefined);
      const logs = findFiles(stateDir, (f) => f.endsWith('Harness Lab.log'));
      const notifications = await notificationTexts(page);
      throw new Error(
        `${err instanceof Error ? err.message : String(err)}\nNotifications:\n${notifications}\nHarness Lab log:\n${logs
          .map((f) => readFileSync(f, 'utf8'))
          .join('\n')
          .slice(-6000)}`,
      );
    }
  },
);
