// The extension as a user meets it: the platform .vsix built by `npm run package` (not the
// development folder) is installed into code-server with --install-extension, and a first session
// is driven through the UI only: Start Embedded Engine (welcome button, task policy picked), Start
// Proxy, the Engines view shows the proxy's grade, the Tasks view's inline Run button runs the
// reference harness on a task in a Docker sandbox, its calls stream into the Sessions tree, the
// result opens in the viewer with prompt tokens as text, and the settings show on the User tab. New
// Capture Session dismissed with Escape leaves no session behind; a Validate run's session (through the
// extension's proxy) shows in the Sessions tree.
// Screenshots: test-artifacts/e2e/vsix-*.png.
import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, test } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { chromiumPath, launchCodeServer, missingPrerequisite, runCommand, typeAndAccept, type CodeServer } from './code-server.js';
import { findFiles, notificationTexts, pane, toast } from './workbench.js';
import { packageAndInstallVsix } from './vsix-install.js';

const ROOT = resolve(__dirname, '..', '..');
const ARTIFACTS = join(ROOT, 'test-artifacts', 'e2e');

let server: CodeServer | undefined;
let browser: Browser | undefined;
let stateDir = '';

after(async () => {
  await browser?.close().catch(() => undefined);
  // Stopping code-server's process group ends the extension host and the engine it spawned.
  await server?.stop();
  if (stateDir && !process.env.HL_E2E_KEEP) rmSync(stateDir, { recursive: true, force: true });
});

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(ARTIFACTS, `vsix-${name}.png`) });
}

test('installed .vsix: embedded engine, proxy, Run with Harness (react) in Docker, viewer, settings', { timeout: 900_000 }, async () => {
  const missing = missingPrerequisite();
  if (missing) assert.fail(`real-workbench e2e cannot run: ${missing}`);
  const docker = spawnSync('docker', ['image', 'inspect', 'harness-lab/base:bookworm'], { encoding: 'utf8' });
  if (docker.status !== 0)
    assert.fail(`Docker with the image harness-lab/base:bookworm is needed (run \`harness-lab images\`): ${docker.stderr.trim()}`);
  mkdirSync(ARTIFACTS, { recursive: true });
  for (const f of readdirSync(ARTIFACTS)) if (/^vsix-.*\.png$/.test(f)) rmSync(join(ARTIFACTS, f)); // an earlier run's
  stateDir = mkdtempSync(join(tmpdir(), 'hl-vsix-'));

  // 1-2. The package, exactly as `npm run package` makes it, installed as a user installs a .vsix.
  packageAndInstallVsix(stateDir);

  const workspace = join(stateDir, 'workspace');
  mkdirSync(join(workspace, 'tasks'), { recursive: true });
  cpSync(join(ROOT, 'examples', 'tasks', 'hello-file'), join(workspace, 'tasks', 'hello-file'), { recursive: true });
  // A task whose agent phase lasts long enough to cancel: its policy's shell call sleeps.
  const slow = join(workspace, 'tasks', 'slow-file');
  cpSync(join(ROOT, 'examples', 'tasks', 'hello-file'), slow, { recursive: true });
  writeFileSync(
    join(slow, 'task.toml'),
    readFileSync(join(slow, 'task.toml'), 'utf8')
      .replace('name = "harness-lab/hello-file"', 'name = "harness-lab/slow-file"')
      .replace('timeout_sec = 300.0', 'timeout_sec = 900.0'),
  );
  writeFileSync(
    join(slow, 'policy.json'),
    readFileSync(join(slow, 'policy.json'), 'utf8').replace(
      "printf 'Hello, world!' > hello.txt",
      "sleep 600; printf 'Hello, world!' > hello.txt",
    ),
  );
  server = await launchCodeServer({
    stateDir,
    workspace,
    env: { KUBECONFIG: '' },
    userSettings: {
      'workbench.startupEditor': 'none',
      'workbench.tips.enabled': false,
      'security.workspace.trust.enabled': false,
      'extensions.autoCheckUpdates': false,
      'extensions.autoUpdate': false,
      'telemetry.telemetryLevel': 'off',
      'window.commandCenter': false,
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

    // 3. First session: the welcome content leads to the bundled CPU engine.
    await page.locator('.activitybar .action-item a[aria-label^="Harness Lab"]').click({ timeout: 60_000, force: true });
    const sessions = pane(page, /^sessions/i);
    const startEngine = sessions.locator('.welcome-view-content a.monaco-button', { hasText: 'Start Embedded Engine' });
    await startEngine.waitFor({ timeout: 30_000 });
    // No kubeconfig on this machine: the Training Runs view shows its welcome, not an error row. The
    // view starts folded (#28: five views in one container), so it is unfolded first.
    const runsHeader = pane(page, /^training runs/i).locator('.pane-header');
    await runsHeader.waitFor({ timeout: 30_000 });
    if ((await runsHeader.getAttribute('aria-expanded')) !== 'true') await runsHeader.click();
    await pane(page, /^training runs/i)
      .locator('.welcome-view-content', { hasText: 'kubeconfig' })
      .waitFor({ timeout: 30_000 });
    await shot(page, '01-welcome');
    await startEngine.click();
    const input = page.locator('.quick-input-widget input.input');
    await input.waitFor({ state: 'visible', timeout: 15_000 });
    await page.locator('.quick-input-list .monaco-list-row', { hasText: 'hello-file/policy.json' }).waitFor({ timeout: 15_000 });
    await typeAndAccept(page, 'hello-file/policy.json', 'hello-file/policy.json');
    const engineUp = toast(page, /embedded engine on http:\/\/127\.0\.0\.1:\d+/);
    await engineUp.waitFor({ timeout: 240_000 });
    await shot(page, '02-embedded-engine');

    // 4. Start Proxy from the message; the Engines view shows the proxy's own grade.
    await engineUp.locator('.monaco-button', { hasText: 'Start Proxy' }).click();
    await page.locator('.statusbar-item', { hasText: /Harness Lab :\d+/ }).waitFor({ timeout: 60_000 });
    await pane(page, /^engines/i)
      .locator('.monaco-list-row', { hasText: 'reachable · capture: tokens' })
      .waitFor({ timeout: 60_000 });
    await shot(page, '03-proxy-graded');

    // 4b. New Capture Session, then Escape at its env snippet pick: the session is dropped (its key was never shown).
    await runCommand(page, 'Harness Lab: New Capture Session');
    const snippetTitle = page.locator('.quick-input-widget .quick-input-title', { hasText: /copy the environment for a harness/ });
    await snippetTitle.waitFor({ timeout: 30_000 });
    const dropped = /^Session (\S+):/.exec(await snippetTitle.innerText())?.[1];
    assert.ok(dropped, 'the pick names the new session');
    await page.keyboard.press('Escape');
    await snippetTitle.waitFor({ state: 'hidden', timeout: 15_000 });

    // 5. Tasks view: the inline Run button, the reference harness, a Docker sandbox.
    const task = pane(page, /^tasks/i).locator('.monaco-list-row', { hasText: 'hello-file' });
    await task.waitFor({ timeout: 30_000 });
    await task.hover();
    await task.locator('.action-label[aria-label^="Run with Harness"]').click({ timeout: 10_000 });
    await page.locator('.quick-input-list .monaco-list-row', { hasText: 'react' }).first().waitFor({ timeout: 15_000 });
    await typeAndAccept(page, 'react', 'react');
    // The run's progress notification; its outcome toast starts with the same words and says the reward.
    const progress = toast(page, 'Harness Lab: react on hello-file').filter({ hasNotText: /\((no reward|reward [\d.]+)/ });
    await progress.waitFor({ timeout: 60_000 });
    await shot(page, '04-run-progress');
    const done = toast(page, /Harness Lab: react on hello-file: .*\((no reward|reward [\d.]+), \w+\)/);
    await done.waitFor({ timeout: 600_000 });
    const doneText = await done.innerText();
    // The run's session streamed into the Sessions tree, saying where it came from.
    await sessions.locator('.monaco-list-row', { hasText: 'react on hello-file' }).first().waitFor({ timeout: 30_000 });
    await shot(page, '05-run-done');
    // The tree has been rebuilt since the Escape (it shows the run): the dismissed session is not in it.
    const sessionRows = await sessions.locator('.monaco-list-row').allInnerTexts();
    assert.ok(
      !sessionRows.some((r) => r.includes(dropped!) || r.includes('VS Code session')),
      `no dismissed session: ${sessionRows.join(' | ')}`,
    );
    assert.match(
      doneText,
      /hello-file: solved \(reward 1\.00, completed\)/,
      `the reference harness solves hello-file with its policy: ${doneText}`,
    );
    assert.equal(await progress.count(), 0, 'the progress notification ended with the work');
    const rollouts = findFiles(join(workspace, '.harness-lab', 'rollouts'), (p) => p.endsWith('session.rollout.json'));
    assert.equal(
      rollouts.length,
      1,
      'the rollout is written under the workspace (harnessLab.rolloutsDir), with a *.rollout.json the viewer opens',
    );

    // 6. Open in Viewer: prompt tokens read as text (the embedded engine's /detokenize).
    await done.locator('.monaco-button', { hasText: 'Open in Viewer' }).click();
    const viewer = page.frameLocator('iframe.webview.ready').frameLocator('#active-frame');
    await viewer.locator('body').waitFor({ timeout: 60_000 });
    await viewer.locator('text=/im_start/').first().waitFor({ timeout: 60_000 });
    await shot(page, '06-viewer');

    // 6b. Rescore the rollout in front against the same engine (palette, URL prefilled from the
    // settings): the same weights give ratio 1 within 1e-4, so every sampled token is coloured calm.
    // The run's notifications go first: toasts past the third wait in a queue, hidden.
    await runCommand(page, 'Notifications: Clear All Notifications');
    await runCommand(page, 'Harness Lab: Rescore Rollout Against Engine (Drift)');
    const urlBox = page.locator('.quick-input-widget input.input');
    await urlBox.waitFor({ state: 'visible', timeout: 10_000 });
    assert.match(await urlBox.inputValue(), /^http:\/\/127\.0\.0\.1:\d+/, 'the engine URL comes prefilled from harnessLab.engineUrl');
    await page.keyboard.press('Enter');
    const drift = toast(page, /Drift: mean ratio \d\.\d{4}; [\d.]+% of \d+ sampled tokens/);
    await drift.waitFor({ timeout: 180_000 });
    const [, mean, past, tokens] = /mean ratio (\d\.\d{4}); ([\d.]+)% of (\d+)/.exec(await drift.innerText())!;
    assert.ok(Math.abs(Number(mean) - 1) <= 1e-4, `same weights: mean ratio ${mean}`);
    assert.equal(past, '0.0');
    assert.ok(Number(tokens) > 0);
    await viewer.locator('.strip .t.s.dr0').first().waitFor({ timeout: 30_000 });
    assert.equal(
      await viewer.locator('.strip .t.s.dr0').count(),
      await viewer.locator('.strip .t.s').count(),
      'every sampled token of the shown call is calm',
    );
    await shot(page, '06b-rescored');

    // 7. Validate on the slow task, cancelled while its agent runs: the sandbox container is removed.
    const slowRow = pane(page, /^tasks/i).locator('.monaco-list-row', { hasText: 'slow-file' });
    await slowRow.hover();
    await slowRow.locator('.action-label[aria-label^="Validate Harness Wiring"]').click({ timeout: 10_000 });
    await page.locator('.quick-input-list .monaco-list-row', { hasText: 'react' }).first().waitFor({ timeout: 15_000 });
    await typeAndAccept(page, 'react', 'react');
    const validating = toast(page, 'Harness Lab: validating react on slow-file');
    await validating.locator('text=agent running').waitFor({ timeout: 300_000 });
    const sandboxes = () =>
      spawnSync('docker', ['ps', '-aq', '--filter', 'label=harness-lab.task=slow-file', '--filter', 'label=harness-lab.kind=sandbox'], {
        encoding: 'utf8',
      })
        .stdout.trim()
        .split('\n')
        .filter(Boolean);
    const running = sandboxes();
    assert.ok(running.length >= 1, 'the validation sandbox runs while the agent works');
    await shot(page, '07-validate-running');
    await validating.locator('.monaco-button', { hasText: 'Cancel' }).click();
    const cancelledMsg = toast(page, /validation of react was cancelled/);
    await cancelledMsg.waitFor({ timeout: 120_000 });
    await page.locator('.tab', { hasText: /Preview validation\.md/ }).waitFor({ timeout: 30_000 });
    await shot(page, '08-validate-cancelled');
    const left = sandboxes().filter((id) => running.includes(id));
    assert.deepEqual(left, [], 'Cancel removed the validation sandbox');
    // The validation ran through the extension's proxy (an engine is up): its session is in the Sessions tree.
    await sessions.locator('.monaco-list-row', { hasText: 'react on slow-file' }).first().waitFor({ timeout: 60_000 });
    await shot(page, '08b-validate-session');

    // 8. Settings: every Harness Lab setting on the User tab.
    await runCommand(page, 'Preferences: Open User Settings');
    const search = page.locator('.settings-editor .suggest-input-container textarea, .settings-editor .search-container input').first();
    await search.waitFor({ timeout: 20_000 });
    // The settings editor renders only the rows in view, so each setting is searched by its id.
    const wanted: [string, string][] = [
      ['harnessLab.engineUrl', 'Engine URL'],
      ['harnessLab.model', 'Model'],
      ['harnessLab.proxyHost', 'Proxy Host'],
      ['harnessLab.proxyPort', 'Proxy Port'],
      ['harnessLab.dataDir', 'Data Dir'],
      ['harnessLab.rolloutsDir', 'Rollouts Dir'],
      ['harnessLab.batchesFolder', 'Batches Folder'],
      ['harnessLab.maxModelCalls', 'Max Model Calls'],
      ['harnessLab.autoStart', 'Auto Start'],
    ];
    for (const [id, title] of wanted) {
      await search.fill(id);
      const row = page.locator('.settings-editor .setting-item-contents .setting-item-label', { hasText: title }).first();
      await row.waitFor({ timeout: 20_000 }).catch((err: unknown) => {
        throw new Error(`setting ${id} ("${title}") is not on the User tab: ${err instanceof Error ? err.message : String(err)}`);
      });
      if (id === 'harnessLab.rolloutsDir') await shot(page, '09-user-settings');
    }
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
  const log = findFiles(stateDir, (f) => f.endsWith('Harness Lab.log'))
    .map((f) => readFileSync(f, 'utf8'))
    .join('\n');
  assert.match(log, /embedded engine \(pid \d+\) listening on/);
  writeFileSync(join(ARTIFACTS, 'vsix-harness-lab.log'), log);
});
