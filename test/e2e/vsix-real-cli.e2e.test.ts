// Real harness CLIs from the INSTALLED .vsix (same install step as vsix-install.e2e.test.ts): with
// the embedded engine (hello-file's scripted policy) and the proxy started from the UI, a real
// claude-code runs headless in "Open Captured Terminal", its calls appear in the Sessions tree, the
// viewer shows their prompt tokens as text; then Run with Harness runs the real codex CLI on
// hello-file in a Docker sandbox and gets reward 1. Screenshots: test-artifacts/e2e/vsix-cli-*.png.
import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { chromium, type Browser, type Page } from 'playwright-core';
import { harnessCacheRoot } from '../../src/harness/run-local.js';
import { chromiumPath, launchCodeServer, missingPrerequisite, runCommand, typeAndAccept, type CodeServer } from './code-server.js';
import { findFiles, notificationTexts, pane, toast } from './workbench.js';
import { packageAndInstallVsix } from './vsix-install.js';

const ROOT = resolve(__dirname, '..', '..');
const ARTIFACTS = join(ROOT, 'test-artifacts', 'e2e');
const HARNESSES = harnessCacheRoot();
const CLAUDE = join(HARNESSES, '@anthropic-ai', 'claude-code@2.1.197', 'node_modules', '.bin', 'claude');
const CODEX = join(HARNESSES, '@openai', 'codex@0.171.0');

let server: CodeServer | undefined;
let browser: Browser | undefined;
let stateDir = '';

after(async () => {
  await browser?.close().catch(() => undefined);
  await server?.stop();
  if (stateDir && !process.env.HL_E2E_KEEP) rmSync(stateDir, { recursive: true, force: true });
});

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(ARTIFACTS, `vsix-cli-${name}.png`) });
}

test(
  'installed .vsix: claude-code in a captured terminal, its calls in the tree and the viewer; Run with Harness (codex)',
  { timeout: 1_200_000 },
  async () => {
    const missing = missingPrerequisite();
    if (missing) assert.fail(`real-workbench e2e cannot run: ${missing}`);
    for (const need of [CLAUDE, CODEX])
      if (!existsSync(need)) assert.fail(`the harness CLI ${need} is not installed (run \`harness-lab harnesses install\`)`);
    const docker = spawnSync('docker', ['image', 'inspect', 'harness-lab/base:bookworm'], { encoding: 'utf8' });
    if (docker.status !== 0)
      assert.fail(`Docker with the image harness-lab/base:bookworm is needed (run \`harness-lab images\`): ${docker.stderr.trim()}`);
    mkdirSync(ARTIFACTS, { recursive: true });
    for (const f of readdirSync(ARTIFACTS)) if (/^vsix-cli-.*\.png$/.test(f)) rmSync(join(ARTIFACTS, f));
    stateDir = mkdtempSync(join(tmpdir(), 'hl-vsix-cli-'));
    packageAndInstallVsix(stateDir);

    const workspace = join(stateDir, 'workspace');
    mkdirSync(join(workspace, 'tasks'), { recursive: true });
    cpSync(join(ROOT, 'examples', 'tasks', 'hello-file'), join(workspace, 'tasks', 'hello-file'), { recursive: true });
    const cliDir = join(stateDir, 'claude-work');
    mkdirSync(cliDir, { recursive: true });
    server = await launchCodeServer({
      stateDir,
      workspace,
      // The CLIs stay where the lab installed them; code-server's HOME is a throwaway folder.
      env: { HARNESS_LAB_HARNESS_DIR: HARNESSES },
      userSettings: {
        'workbench.startupEditor': 'none',
        'workbench.tips.enabled': false,
        'security.workspace.trust.enabled': false,
        'extensions.autoCheckUpdates': false,
        'extensions.autoUpdate': false,
        'telemetry.telemetryLevel': 'off',
        'window.commandCenter': false,
        'terminal.integrated.defaultProfile.linux': 'bash',
        'terminal.integrated.gpuAcceleration': 'off',
      },
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

      // 1. Embedded engine with hello-file's policy, then the proxy, from the UI.
      await page.locator('.activitybar .action-item a[aria-label^="Harness Lab"]').click({ timeout: 60_000, force: true });
      const sessions = pane(page, /^sessions/i);
      const startEngine = sessions.locator('.welcome-view-content a.monaco-button', { hasText: 'Start Embedded Engine' });
      await startEngine.waitFor({ timeout: 30_000 });
      await startEngine.click();
      const input = page.locator('.quick-input-widget input.input');
      await input.waitFor({ state: 'visible', timeout: 15_000 });
      await page.locator('.quick-input-list .monaco-list-row', { hasText: 'hello-file/policy.json' }).waitFor({ timeout: 15_000 });
      await typeAndAccept(page, 'hello-file/policy.json', 'hello-file/policy.json');
      const engineUp = toast(page, /embedded engine on http:\/\/127\.0\.0\.1:\d+/);
      await engineUp.waitFor({ timeout: 240_000 });
      await engineUp.locator('.monaco-button', { hasText: 'Start Proxy' }).click();
      await page.locator('.statusbar-item', { hasText: /Harness Lab :\d+/ }).waitFor({ timeout: 60_000 });
      await shot(page, '01-proxy');

      // 2. A real claude-code, headless, in the captured terminal: nothing but the terminal's environment points it at the proxy.
      await runCommand(page, 'Harness Lab: Open Captured Terminal');
      const xterm = page.locator('.terminal-wrapper.active .xterm, .terminal .xterm').first();
      await xterm.waitFor({ state: 'visible', timeout: 30_000 });
      await page.locator('.xterm-rows', { hasText: 'are captured into session' }).first().waitFor({ timeout: 20_000 });
      await page
        .locator('.xterm-rows', { hasText: /[#$] *$/m })
        .first()
        .waitFor({ timeout: 20_000 })
        .catch(() => undefined);
      await xterm.click();
      const instruction = readFileSync(join(ROOT, 'examples', 'tasks', 'hello-file', 'instruction.md'), 'utf8').trim();
      const exitFile = join(stateDir, 'claude.exit');
      const outFile = join(stateDir, 'claude.out');
      // IS_SANDBOX=1 lets claude-code bypass permissions as root; its other flags keep it offline.
      const line = `cd ${cliDir} && IS_SANDBOX=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 CLAUDE_CODE_MAX_RETRIES=0 ${CLAUDE} --print --permission-mode bypassPermissions -- '${instruction.replace(/'/g, "'\\''")}' > ${outFile} 2>&1; echo $? > ${exitFile}\n`;
      await page.keyboard.type(line, { delay: 5 });
      // A call in flight shows in the tree while the engine thinks (not "0 calls").
      // (The embedded CPU engine takes seconds per claude-code call, far longer than the tree's 150 ms repaint.)
      await sessions.locator('.monaco-list-row[aria-level="2"]', { hasText: 'calling engine…' }).first().waitFor({ timeout: 120_000 });
      await sessions
        .locator('.monaco-list-row[aria-level="1"]', { hasText: /captured terminal · \d+ calls? · 1 in flight/ })
        .first()
        .waitFor({ timeout: 30_000 });
      await shot(page, '02-call-in-flight');
      const deadline = Date.now() + 420_000;
      // The shell creates the file before `echo` writes it: wait for the whole status line.
      const exited = () => existsSync(exitFile) && /^\d+\n$/.test(readFileSync(exitFile, 'utf8'));
      while (!exited() && Date.now() < deadline) await sleep(500);
      await shot(page, '03-claude-done');
      assert.ok(
        exited(),
        `claude-code in the captured terminal did not finish: ${existsSync(outFile) ? readFileSync(outFile, 'utf8').slice(-2000) : 'no output'}`,
      );
      assert.equal(readFileSync(exitFile, 'utf8').trim(), '0', `claude-code failed: ${readFileSync(outFile, 'utf8').slice(-2000)}`);
      assert.equal(
        readFileSync(join(cliDir, 'hello.txt'), 'utf8'),
        'Hello, world!',
        'claude-code wrote hello.txt through the captured proxy',
      );

      // 3. Its calls are in the Sessions tree, under a session that says it came from a captured terminal.
      const termRow = sessions.locator('.monaco-list-row[aria-level="1"]', { hasText: /captured terminal · [1-9]\d* calls?/ }).first();
      await termRow.waitFor({ timeout: 30_000 });
      await sessions.locator('.monaco-list-row[aria-level="2"]', { hasText: 'anthropic_messages' }).first().waitFor({ timeout: 30_000 });
      await shot(page, '04-claude-calls');

      // 4. The viewer shows the prompt tokens as text.
      // The row's inline button (a context-menu click can land while the live tree repaints under load).
      await termRow.hover();
      await termRow.locator('.action-label[aria-label^="Open Rollout Viewer"]').click({ timeout: 10_000 });
      const viewer = page.frameLocator('iframe.webview.ready').frameLocator('#active-frame');
      await viewer.locator('body').waitFor({ timeout: 60_000 });
      await viewer.locator('text=/im_start/').first().waitFor({ timeout: 150_000 });
      await shot(page, '05-viewer-prompt-text');

      // 5. Run with Harness: the real codex CLI on hello-file in a Docker sandbox, reward 1.
      const task = pane(page, /^tasks/i).locator('.monaco-list-row', { hasText: 'hello-file' });
      await task.waitFor({ timeout: 30_000 });
      await task.hover();
      await task.locator('.action-label[aria-label^="Run with Harness"]').click({ timeout: 10_000 });
      await page.locator('.quick-input-list .monaco-list-row', { hasText: 'codex' }).first().waitFor({ timeout: 15_000 });
      await typeAndAccept(page, 'codex', 'codex');
      const done = toast(page, /Harness Lab: codex on hello-file: .*\((no reward|reward [\d.]+), \w+\)/);
      await done.waitFor({ timeout: 600_000 });
      const doneText = await done.innerText();
      await sessions.locator('.monaco-list-row', { hasText: 'codex on hello-file' }).first().waitFor({ timeout: 30_000 });
      await shot(page, '06-codex-done');
      assert.match(doneText, /hello-file: solved \(reward 1\.00, completed\)/, `codex solves hello-file with its policy: ${doneText}`);
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
    writeFileSync(
      join(ARTIFACTS, 'vsix-cli-harness-lab.log'),
      findFiles(stateDir, (f) => f.endsWith('Harness Lab.log'))
        .map((f) => readFileSync(f, 'utf8'))
        .join('\n'),
    );
  },
);
