// #29 from the installed .vsix, through the UI: Replay and Fork from the rollout viewer on a rollout
// the editor captured itself (the embedded engine on hello-file's policy, the reference harness in
// Docker; the editor's proxy renders token in, so this replays a token-in capture).
//  - Replay: the harness runs again in Docker answered from the record; the message says every call
//    matched exactly and the reward is the same; the replay opens beside the original with an
//    `exact` badge on each call.
//  - Fork from the last call, with another seed, on the embedded engine: the message counts the
//    recorded calls as exact and the last one live; the fork view opens with the original and the
//    fork side by side.
// Needs `npm run build` (the .vsix is packaged from dist/), code-server, chromium and Docker with
// harness-lab/base:bookworm. Screenshots: test-artifacts/e2e/replay-*.png.
import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, test } from 'node:test';
import { chromium, type Browser, type FrameLocator, type Page } from 'playwright-core';
import { chromiumPath, launchCodeServer, missingPrerequisite, runCommand, typeAndAccept, type CodeServer } from './code-server.js';
import { packageAndInstallVsix } from './vsix-install.js';
import { findFiles, notificationTexts, pane, QUIET_SETTINGS, toast, viewerFrame, widenSidebar } from './workbench.js';

const ROOT = resolve(__dirname, '..', '..');
const ARTIFACTS = join(ROOT, 'test-artifacts', 'e2e');

let server: CodeServer | undefined;
let browser: Browser | undefined;
let stateDir = '';

after(async () => {
  await browser?.close().catch(() => undefined);
  await server?.stop(); // the process group: the extension host and the engine it spawned
  if (stateDir && !process.env.HL_E2E_KEEP) rmSync(stateDir, { recursive: true, force: true });
});

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(ARTIFACTS, `replay-${name}.png`) });
}

/** The webview (of several open) whose document holds `selector`. */
async function webviewWith(page: Page, selector: string, timeoutMs: number): Promise<FrameLocator> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const frames = page.locator('iframe.webview.ready');
    const n = await frames.count();
    for (let i = 0; i < n; i++) {
      const frame = frames.nth(i).contentFrame().frameLocator('#active-frame');
      if (
        (await frame
          .locator(selector)
          .count()
          .catch(() => 0)) > 0
      )
        return frame;
    }
    if (Date.now() > deadline) throw new Error(`no webview shows ${selector}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** Fills the input box in front (not a list pick) and accepts it. */
async function answerInputBox(page: Page, value: string, title: RegExp): Promise<void> {
  await page.locator('.quick-input-widget .quick-input-title', { hasText: title }).waitFor({ timeout: 30_000 });
  const input = page.locator('.quick-input-widget input.input:visible');
  await input.fill(value);
  await page.keyboard.press('Enter');
}

test(
  'installed .vsix: Replay Rollout and Fork from This Turn from the rollout viewer on a captured rollout',
  { timeout: 1_800_000 },
  async () => {
    const missing = missingPrerequisite();
    if (missing) assert.fail(`real-workbench e2e cannot run: ${missing}`);
    const docker = spawnSync('docker', ['image', 'inspect', 'harness-lab/base:bookworm'], { encoding: 'utf8' });
    if (docker.status !== 0)
      assert.fail(`Docker with the image harness-lab/base:bookworm is needed (run \`harness-lab images\`): ${docker.stderr.trim()}`);
    if (!existsSync(join(ROOT, 'dist', 'extension.js'))) assert.fail('dist/ is missing: run `npm run build` first');
    mkdirSync(ARTIFACTS, { recursive: true });
    for (const f of readdirSync(ARTIFACTS)) if (/^replay-.*\.png$/.test(f)) rmSync(join(ARTIFACTS, f));
    stateDir = mkdtempSync(join(tmpdir(), 'hl-vsix-replay-'));
    packageAndInstallVsix(stateDir);

    const workspace = join(stateDir, 'workspace');
    mkdirSync(join(workspace, 'tasks'), { recursive: true });
    cpSync(join(ROOT, 'examples', 'tasks', 'hello-file'), join(workspace, 'tasks', 'hello-file'), { recursive: true });

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
      ],
    });
    const page = await browser.newPage({ viewport: { width: 1500, height: 950 } });
    try {
      await page.goto(`${server.url}/?folder=${encodeURIComponent(workspace)}`);
      await page.locator('.monaco-workbench').waitFor({ timeout: 60_000 });
      await page.locator('.activitybar .action-item a[aria-label^="Harness Lab"]').click({ timeout: 60_000, force: true });
      await widenSidebar(page, 560);

      // 1. The embedded engine on hello-file's policy, the proxy, and one captured run.
      await runCommand(page, 'Harness Lab: Start Embedded Engine');
      await typeAndAccept(page, 'hello-file/policy.json', 'hello-file/policy.json');
      const engineUp = toast(page, /embedded engine on http:\/\/127\.0\.0\.1:\d+/);
      await engineUp.waitFor({ timeout: 240_000 });
      const engineUrl = /http:\/\/127\.0\.0\.1:\d+/.exec(await engineUp.innerText())![0];
      await engineUp.locator('.monaco-button', { hasText: 'Start Proxy' }).click();
      await page.locator('.statusbar-item', { hasText: /Harness Lab :\d+/ }).waitFor({ timeout: 60_000 });
      const task = pane(page, /^tasks/i).locator('.monaco-list-row', { hasText: 'hello-file' });
      await task.waitFor({ timeout: 30_000 });
      await task.hover();
      await task.locator('.action-label[aria-label^="Run with Harness"]').click({ timeout: 10_000 });
      await page.locator('.quick-input-list .monaco-list-row', { hasText: 'react' }).first().waitFor({ timeout: 15_000 });
      await typeAndAccept(page, 'react', 'react');
      const done = toast(page, /react on hello-file: solved \(reward 1\.00, completed\)/);
      await done.waitFor({ timeout: 600_000 });
      await done.locator('.monaco-button', { hasText: 'Open in Viewer' }).click();
      const original = viewerFrame(page);
      await original.locator('.graph-row').first().waitFor({ timeout: 60_000 });
      const nCalls = await original.locator('.graph-row').count();
      assert.ok(nCalls >= 2, `the captured rollout has its calls (${nCalls})`);
      await shot(page, '01-original');
      await runCommand(page, 'Notifications: Clear All Notifications');

      // 2. Replay from the viewer: every call exact, the same reward; the replay opens beside with its badges.
      await original.locator('[data-testid="replay-rollout"]').click();
      const progress = toast(page, /Harness Lab: replaying s[0-9a-f]+/);
      await progress.waitFor({ timeout: 60_000 });
      assert.equal(await progress.locator('.monaco-button', { hasText: 'Cancel' }).count(), 1, 'the replay can be cancelled');
      const replayed = toast(page, /Replay of s[0-9a-f]+: /);
      await replayed.waitFor({ timeout: 900_000 });
      const replayText = await replayed.innerText();
      assert.match(
        replayText,
        new RegExp(`Replay of s[0-9a-f]+: ${nCalls} exact, 0 tolerated, 0 no match; reward 1 \\(original 1\\)\\.`),
        replayText,
      );
      assert.equal(
        (await replayed.locator('.codicon-info, .codicon-notifications-info').count()) > 0,
        true,
        'an information, not a warning',
      );
      const replayView = await webviewWith(page, '.graph-row .badge:text-is("exact")', 60_000);
      const badges = await replayView.locator('.graph-row .badge').allInnerTexts();
      assert.deepEqual(
        badges.filter((b) => ['exact', 'tolerated', 'no-match'].includes(b.trim())).map((b) => b.trim()),
        Array.from({ length: nCalls }, () => 'exact'),
        `one exact badge per replayed call: ${JSON.stringify(badges)}`,
      );
      const reports = findFiles(workspace, (f) => f.endsWith('replay.json'));
      assert.equal(reports.length, 1, `the replay's run folder is beside the original run in the workspace: ${JSON.stringify(reports)}`);
      const report = JSON.parse(readFileSync(reports[0]!, 'utf8')) as { ok: boolean; calls: { level: string }[] };
      assert.equal(report.ok, true);
      await shot(page, '02-replay-beside');
      await runCommand(page, 'Notifications: Clear All Notifications');

      // 3. Fork from the last call of the original, another seed, the embedded engine live. The replay's
      // tab is closed first, so the one viewer left is the original's; the narrow
      // column folds the graph, so the last turn is reached with Turn ›, as a user would.
      const replayTab = page.locator('.tab', { hasText: 'session.rollout.json' });
      await replayTab.hover();
      await replayTab.locator('.tab-actions .action-label').first().click();
      await replayTab.waitFor({ state: 'detached', timeout: 30_000 });
      const originalAgain = await webviewWith(page, '[data-testid="fork-from-turn"]', 30_000);
      const last = nCalls - 1;
      for (let i = 0; i < last; i++) await originalAgain.locator('[data-testid="next-turn"]').click();
      await originalAgain.getByText(`position ${nCalls} of ${nCalls}`).first().waitFor({ timeout: 30_000 });
      await originalAgain.locator('[data-testid="fork-from-turn"]').click();
      await answerInputBox(page, engineUrl, new RegExp(`Fork from call ${last}: the live engine`));
      await answerInputBox(page, '7', new RegExp(`Fork from call ${last}: sampling seed`));
      const forked = toast(page, new RegExp(`Fork of s[0-9a-f]+ at call ${last}: `));
      await forked.waitFor({ timeout: 900_000 });
      const forkText = await forked.innerText();
      assert.match(
        forkText,
        new RegExp(`at call ${last}: ${last} exact, 0 tolerated, 0 no match, 1 live; reward 1 \\(original 1\\)\\.`),
        forkText,
      );
      const forkView = await webviewWith(page, '[data-testid="member-card"]', 120_000);
      const members = await forkView
        .locator('[data-testid="member-card"]')
        .evaluateAll((els) => els.map((e) => e.getAttribute('data-rollout')));
      assert.equal(members.length, 2, `the original and its fork side by side: ${JSON.stringify(members)}`);
      assert.equal(members[0], 'original');
      assert.match(members[1] ?? '', new RegExp(`^fork@${last}`));
      assert.deepEqual(
        (await forkView.locator('[data-testid="member-class"]').allInnerTexts()).map((t) => t.trim()),
        ['completed', 'completed'],
        'both runs solved the task, and the view says so',
      );
      await shot(page, '03-fork-view');
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
