// The extension in a real workbench: code-server 4.100.3 (VS Code 1.100.3 server + web workbench,
// real Node extension host) driven by Playwright with Debian's chromium. The payload mechanism loads
// this repository as the development extension and runs test/e2e/host/suite.ts in the extension
// host; its result comes back through codeAutomationExit.
//
// UI path checked here, as a user would do it: open the Harness Lab container (welcome content),
// "Harness Lab: Start Proxy" from the command palette (status bar shows the port), "Harness Lab:
// Open Captured Terminal", run model calls in that terminal with nothing but its environment
// (OpenAI SDK, Anthropic and Gemini over HTTP) against the in-repo fake vLLM engine, and see the
// calls in the Sessions tree. Screenshots land in test-artifacts/e2e/.
import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { build } from 'esbuild';
import { chromium, type Browser, type Page } from 'playwright-core';
import { TrainingTraceSchema } from '../../src/capture/trace.js';
import { startFakeEngine, type FakeEngine } from '../../src/engine/fake-engine.js';
import {
  chromiumPath,
  launchCodeServer,
  missingPrerequisite,
  pickFromContextMenu,
  runCommand,
  typeAndAccept,
  type CodeServer,
} from './code-server.js';
import { findFiles, pane as viewPane, widenSidebar } from './workbench.js';

const ROOT = resolve(__dirname, '..', '..');
const ARTIFACTS = join(ROOT, 'test-artifacts', 'e2e');
const HOST_BUNDLE = join(ROOT, 'out', 'e2e', 'host-suite.js');
const DIALECTS = ['openai_chat', 'anthropic_messages', 'google_gemini'];
const ADMIN_KEY = 'e2e-admin-Zq7xK2pW9v';

let engine: FakeEngine | undefined;
let server: CodeServer | undefined;
let browser: Browser | undefined;
let stateDir = '';

/** The "harness" run in the captured terminal: three model calls configured only by the environment. */
function harnessScript(): string {
  return `// Written by the e2e test; run inside the captured terminal.
import { createRequire } from 'node:module';
import { writeFileSync } from 'node:fs';
const require = createRequire(${JSON.stringify(join(ROOT, 'package.json'))});
const { default: OpenAI } = await import(require.resolve('openai'));
const out = {};
// OpenAI SDK: reads OPENAI_BASE_URL and OPENAI_API_KEY from the environment by itself.
const openai = new OpenAI();
const chat = await openai.chat.completions.create({ model: process.env.OPENAI_MODEL ?? 'm', messages: [{ role: 'user', content: 'Say hello' }] });
out.openai_chat = chat.choices[0].message.content;
const anthropic = await fetch(process.env.ANTHROPIC_BASE_URL + '/v1/messages', {
  method: 'POST',
  headers: { 'content-type': 'application/json', 'x-api-key': process.env.ANTHROPIC_API_KEY, 'anthropic-version': '2023-06-01' },
  body: JSON.stringify({ model: 'm', max_tokens: 64, messages: [{ role: 'user', content: 'Say hello' }] }),
});
out.anthropic_messages = (await anthropic.json()).content?.[0]?.text ?? null;
const gemini = await fetch(process.env.GOOGLE_GEMINI_BASE_URL + '/v1beta/models/m:generateContent', {
  method: 'POST',
  headers: { 'content-type': 'application/json', 'x-goog-api-key': process.env.GEMINI_API_KEY },
  body: JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'Say hello' }] }] }),
});
out.google_gemini = (await gemini.json()).candidates?.[0]?.content?.parts?.[0]?.text ?? null;
out.session = process.env.HARNESS_LAB_SESSION;
writeFileSync(new URL('./terminal-result.json', import.meta.url), JSON.stringify(out, null, 2));
console.log('HARNESS_DONE ' + JSON.stringify(out));
`;
}

/** One more chat call from the terminal, used after the engine went away. */
function oneCallScript(): string {
  return `import { writeFileSync } from 'node:fs';
const res = await fetch(process.env.OPENAI_BASE_URL + '/chat/completions', {
  method: 'POST',
  headers: { 'content-type': 'application/json', authorization: 'Bearer ' + process.env.OPENAI_API_KEY },
  body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'again' }] }),
});
writeFileSync(new URL('./one-call.json', import.meta.url), JSON.stringify({ status: res.status }));
console.log('ONE_CALL ' + res.status);
`;
}

/** Resolves once some value in the workbench's IndexedDB storage holds every needle. */
async function storedInBrowser(page: Page, needles: string[]): Promise<void> {
  await page.waitForFunction(
    async (wanted: string[]) => {
      for (const { name } of await indexedDB.databases()) {
        if (!name) continue;
        const db = await new Promise<IDBDatabase>((resolve, reject) => {
          const req = indexedDB.open(name);
          req.onsuccess = () => resolve(req.result);
          req.onerror = () => reject(req.error);
        });
        try {
          for (const store of Array.from(db.objectStoreNames)) {
            const values = await new Promise<unknown[]>((resolve, reject) => {
              const req = db.transaction(store, 'readonly').objectStore(store).getAll();
              req.onsuccess = () => resolve(req.result as unknown[]);
              req.onerror = () => reject(req.error);
            });
            if (values.some((v) => typeof v === 'string' && wanted.every((w) => v.includes(w)))) return true;
          }
        } finally {
          db.close();
        }
      }
      return false;
    },
    needles,
    { timeout: 15_000, polling: 250 },
  );
}

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`) });
}

before(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  // Screenshots of an earlier run (NN-name.png are this test's; other tests share the folder).
  for (const f of readdirSync(ARTIFACTS)) if (/^\d\d-.*\.png$/.test(f)) rmSync(join(ARTIFACTS, f));
});

after(async () => {
  await browser?.close().catch(() => undefined);
  await server?.stop();
  await engine?.close();
  if (stateDir && !process.env.HL_E2E_KEEP) rmSync(stateDir, { recursive: true, force: true });
});

test('extension in code-server: start proxy, captured terminal, calls in the Sessions tree', { timeout: 240_000 }, async () => {
  const missing = missingPrerequisite();
  if (missing) assert.fail(`real-workbench e2e cannot run: ${missing}`);
  const t0 = Date.now();
  const timings: Record<string, number> = {};
  const mark = (name: string) => (timings[name] = Date.now() - t0);

  // The extension bundle exactly as `npm run build` makes it (rebuilt only when a source is newer, so
  // a run inside `npm test`, which has just built, never rewrites dist/ under other tests' feet), plus
  // the extension-host half of this test.
  const bundle = join(ROOT, 'dist', 'extension.js');
  const sources = ['src', 'webview'].flatMap((d) => findFiles(join(ROOT, d), () => true));
  if (!existsSync(bundle) || sources.some((f) => statSync(f).mtimeMs > statSync(bundle).mtimeMs)) {
    const built = spawnSync(process.execPath, ['esbuild.mjs'], { cwd: ROOT, encoding: 'utf8' });
    assert.equal(built.status, 0, `node esbuild.mjs failed:\n${built.stderr}`);
  }
  await build({
    entryPoints: [join(ROOT, 'test/e2e/host/suite.ts')],
    outfile: HOST_BUNDLE,
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: 'node20',
    external: ['vscode', 'cpu-features', '*.node', 'node-llama-cpp', '@node-llama-cpp/*'],
    logLevel: 'warning',
  });
  mark('build');

  engine = await startFakeEngine({ model: 'fake/e2e-model' });
  stateDir = mkdtempSync(join(tmpdir(), 'hl-e2e-'));
  const workspace = join(stateDir, 'workspace');
  const control = join(workspace, '.e2e');
  const dataDir = join(stateDir, 'captures');
  mkdirSync(join(workspace, '.vscode'), { recursive: true });
  mkdirSync(control, { recursive: true });
  mkdirSync(join(workspace, 'tasks', 'hello-world'), { recursive: true });
  writeFileSync(
    join(workspace, 'tasks', 'hello-world', 'task.toml'),
    'version = "1.0"\n\n[metadata]\nname = "hello-world"\ndifficulty = "easy"\ncategory = "smoke"\n',
  );
  writeFileSync(
    join(workspace, '.vscode', 'settings.json'),
    JSON.stringify({ 'harnessLab.engineUrl': engine.url, 'harnessLab.model': engine.model, 'harnessLab.dataDir': dataDir }, null, 2),
  );
  writeFileSync(join(control, 'call.mjs'), harnessScript());
  writeFileSync(join(control, 'one-call.mjs'), oneCallScript());
  writeFileSync(
    join(control, 'expected.json'),
    JSON.stringify({ dialects: DIALECTS, failedEngineCalls: 1, copiedSnippet: 'anthropic_messages', adminKey: ADMIN_KEY }),
  );

  server = await launchCodeServer({
    stateDir,
    workspace,
    userSettings: {
      'workbench.startupEditor': 'none',
      'workbench.tips.enabled': false,
      'security.workspace.trust.enabled': false,
      'extensions.autoCheckUpdates': false,
      'extensions.autoUpdate': false,
      'telemetry.telemetryLevel': 'off',
      'terminal.integrated.defaultProfile.linux': 'bash',
      'window.commandCenter': false,
      'terminal.integrated.gpuAcceleration': 'off', // DOM renderer: the terminal text is then in the DOM
    },
  });
  mark('code-server up');

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
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  let finish!: (code: number) => void;
  const exit = new Promise<number>((res) => (finish = res));
  const hostLog: string[] = [];
  await page.exposeFunction('codeAutomationExit', (code: number) => finish(code));
  await page.exposeFunction('codeAutomationLog', (type: string, args: unknown[]) => {
    const line = `[host ${type}] ${args.map((a) => (typeof a === 'string' ? a : JSON.stringify(a))).join(' ')}`;
    hostLog.push(line);
    if (process.env.HL_E2E_VERBOSE) console.log(line);
  });
  const remote = (p: string) => `vscode-remote://127.0.0.1:${server!.port}${p}`;
  const payload = [
    ['extensionDevelopmentPath', remote(ROOT)],
    ['extensionTestsPath', remote(HOST_BUNDLE)],
    ['skipWelcome', 'true'],
  ];
  let result: Record<string, string | null> = {};
  // Written whole, then renamed: the host suite polls for the file and must never read it half-written.
  const signalUi = (ok: boolean, error?: string) => {
    writeFileSync(join(control, 'ui-done.tmp'), JSON.stringify({ ok, error }));
    renameSync(join(control, 'ui-done.tmp'), join(control, 'ui-done'));
  };

  try {
    await page.goto(`${server.url}/?folder=${encodeURIComponent(workspace)}&payload=${encodeURIComponent(JSON.stringify(payload))}`);
    await page.locator('.monaco-workbench').waitFor({ timeout: 60_000 });
    await page.waitForFunction(() => document.title.includes('[Extension Development Host]'), undefined, { timeout: 30_000 });
    mark('workbench');

    // The activity-bar container and its welcome content (proxy not running yet).
    await page.locator('.activitybar .action-item a[aria-label^="Harness Lab"]').click({ timeout: 60_000, force: true });
    await widenSidebar(page, 560);
    const startButton = viewPane(page, /^sessions/i).locator('.welcome-view-content a.monaco-button', { hasText: 'Start Proxy' });
    await startButton.waitFor({ timeout: 20_000 });
    const tasksPane = page.locator('.pane', { has: page.locator('.pane-header', { hasText: /^tasks/i }) });
    await tasksPane.locator('.monaco-list-row', { hasText: 'hello-world' }).waitFor({ timeout: 20_000 });
    // (onStartupFinished usually activated the extension already; under load it can come later
    // than the view, so only the result is asserted.)
    await page.locator('.statusbar-item', { hasText: 'Harness Lab: off' }).waitFor({ timeout: 20_000 });
    await shot(page, '01-welcome');
    assert.equal(engine.requests.length, 0, 'activation and the views must not contact the engine');

    await runCommand(page, 'Harness Lab: Start Proxy');
    const status = page.locator('.statusbar-item', { hasText: /Harness Lab :\d+/ });
    await status.waitFor({ timeout: 30_000 });
    const statusText = (await status.innerText()).trim();
    const port = Number(/:(\d+)/.exec(statusText)?.[1]);
    assert.ok(port > 0 && port < 65536, `status bar shows the proxy port: "${statusText}"`);
    await viewPane(page, /^sessions/i)
      .locator('.welcome-view-content a.monaco-button', { hasText: 'Open Captured Terminal' })
      .waitFor({ timeout: 10_000 });
    await shot(page, '02-proxy-started');
    mark('proxy started');
    const health = (await (await fetch(`http://127.0.0.1:${port}/health`)).json()) as { status: string };
    assert.equal(health.status, 'ok', 'the port in the status bar is the proxy');
    // Clicking the status bar item offers the running-state actions.
    await status.click();
    await page.locator('.quick-input-list .monaco-list-row', { hasText: 'Copy Proxy URL' }).waitFor({ timeout: 10_000 });
    assert.ok(await page.locator('.quick-input-list .monaco-list-row', { hasText: 'Stop Proxy' }).count(), 'quick pick offers Stop Proxy');
    await page.keyboard.press('Escape');

    await runCommand(page, 'Harness Lab: Open Captured Terminal');
    const xterm = page.locator('.terminal-wrapper.active .xterm, .terminal .xterm').first();
    await xterm.waitFor({ state: 'visible', timeout: 30_000 });
    // The terminal's banner (TerminalOptions.message) names the session; then wait for the prompt.
    await page.locator('.xterm-rows', { hasText: 'are captured into session' }).first().waitFor({ timeout: 20_000 });
    await page
      .locator('.xterm-rows', { hasText: /[#$] *$/m })
      .first()
      .waitFor({ timeout: 20_000 })
      .catch(() => undefined);
    await xterm.click();
    await page.keyboard.type(`node .e2e/call.mjs\n`, { delay: 10 });
    const resultFile = join(control, 'terminal-result.json');
    const deadline = Date.now() + 60_000;
    while (!existsSync(resultFile) && Date.now() < deadline) await sleep(250);
    await shot(page, '03-terminal');
    assert.ok(existsSync(resultFile), 'the harness script in the captured terminal did not finish (see 03-terminal.png)');
    result = JSON.parse(readFileSync(resultFile, 'utf8')) as Record<string, string | null>;
    for (const d of DIALECTS) assert.ok(result[d], `${d} call answered in the terminal: ${JSON.stringify(result)}`);
    mark('calls made');

    // Live update: the session and its three calls appear in the Sessions tree without a refresh.
    const pane = viewPane(page, /^sessions/i);
    await pane
      .locator('.monaco-list-row', { hasText: result.session ?? '' })
      .first()
      .waitFor({ timeout: 20_000 });
    for (const d of DIALECTS) await pane.locator('.monaco-list-row', { hasText: d }).first().waitFor({ timeout: 20_000 });
    const rows = await pane.locator('.monaco-list-row').allInnerTexts();
    const callRows = rows.filter((r) => DIALECTS.some((d) => r.includes(d)));
    assert.equal(callRows.length, 3, `three call rows in the Sessions tree: ${JSON.stringify(rows)}`);
    for (const row of callRows)
      assert.match(row, /stop · \d+→\d+ tok · [\d.]+ m?s · tokens/, `call row shows status, tokens, latency, capture level: ${row}`);
    await page.locator('.statusbar-item', { hasText: `Harness Lab :${port}` }).waitFor({ timeout: 5_000 });
    await shot(page, '04-sessions-tree');
    mark('tree checked');

    // Clicking a call opens the rollout viewer at that call (#28); Open Call in its context menu opens
    // its record as a read-only JSON document.
    const callRow = pane.locator('.monaco-list-row', { hasText: '#0 openai_chat' });
    await callRow.click();
    await page.locator('.tab', { hasText: /^Rollout / }).waitFor({ timeout: 15_000 });
    await pickFromContextMenu(page, callRow, 'Open Call');
    await page.locator('.tab', { hasText: /^call 0 [0-9a-f]+\.json/ }).waitFor({ timeout: 15_000 });
    await page.locator('.editor-instance .view-lines', { hasText: '"dialect": "openai_chat"' }).waitFor({ timeout: 10_000 });

    // Engines view: probe from the palette, then the row shows the graded capture level.
    await runCommand(page, 'Harness Lab: Probe Engine');
    const enginesPane = page.locator('.pane', { has: page.locator('.pane-header', { hasText: /^engines/i }) });
    await enginesPane.locator('.monaco-list-row', { hasText: 'reachable · capture: tokens' }).waitFor({ timeout: 30_000 });
    await shot(page, '05-engine-probed');
    mark('engine probed');

    // Engine gone: the next call fails in the terminal, shows as an error row, and the status bar
    // item turns to its warning colour while still showing the port.
    await engine.close();
    await xterm.click();
    await page.keyboard.type(`node .e2e/one-call.mjs\n`, { delay: 10 });
    const oneCall = join(control, 'one-call.json');
    const deadline2 = Date.now() + 30_000;
    // The script's writeFileSync is not atomic: wait until the file holds its whole JSON.
    const whole = () => existsSync(oneCall) && /\}\s*$/.test(readFileSync(oneCall, 'utf8'));
    while (!whole() && Date.now() < deadline2) await sleep(250);
    assert.ok(whole(), 'the second call in the captured terminal did not finish');
    const failedStatus = (JSON.parse(readFileSync(oneCall, 'utf8')) as { status: number }).status;
    assert.ok(failedStatus >= 500, `a call with the engine down answers 5xx, got ${failedStatus}`);
    await pane.locator('.monaco-list-row', { hasText: /#3 openai_chat\s*50\d engine/ }).waitFor({ timeout: 20_000 });
    const warning = page.locator('.statusbar-item.warning-kind', { hasText: `Harness Lab :${port}` });
    await warning.waitFor({ timeout: 10_000 }).catch(async (err: unknown) => {
      const classes = await page.locator('.statusbar-item', { hasText: 'Harness Lab' }).first().getAttribute('class');
      throw new Error(`status bar item not in warning colours (classes: ${classes}): ${String(err)}`);
    });
    await shot(page, '06-engine-unreachable');
    mark('engine unreachable');

    // New Capture Session: a dialect quick pick; every snippet is shown, the choice is copied (the
    // workbench keeps the clipboard in memory while extension tests run, so the host suite reads it).
    await runCommand(page, 'Harness Lab: New Capture Session');
    await page.locator('.quick-input-list .monaco-list-row', { hasText: 'anthropic_messages' }).waitFor({ timeout: 10_000 });
    await typeAndAccept(page, 'anthropic_messages', 'anthropic_messages');
    await page.locator('.editor-instance .view-lines', { hasText: 'GOOGLE_GEMINI_BASE_URL' }).waitFor({ timeout: 15_000 });
    await pane
      .locator('.monaco-list-row', { hasText: /0 calls/ })
      .first()
      .waitFor({ timeout: 10_000 });
    await shot(page, '07-new-session');
    mark('new session');

    // Set Admin Key: a password input; the key goes to SecretStorage and applies at the next start
    // (the host suite restarts the proxy and checks the control routes need it).
    await runCommand(page, 'Harness Lab: Set Admin Key');
    const keyInput = page.locator('.quick-input-widget input[type="password"]');
    await keyInput.waitFor({ state: 'visible', timeout: 10_000 });
    await keyInput.fill(ADMIN_KEY);
    await page.keyboard.press('Enter');
    await page.locator('.notification-toast', { hasText: 'admin key saved in SecretStorage' }).waitFor({ timeout: 10_000 });

    // Context menu -> Export Session: the browser save dialog proposes <workspace>/<session>.jsonl.
    const exported = join(workspace, `${result.session}.jsonl`);
    await pickFromContextMenu(
      page,
      pane.locator('.monaco-list-row', { hasText: result.session ?? '' }).first(),
      'Export Session (TrainingTrace JSONL)',
    );
    await page.locator('.quick-input-widget input.input:visible').waitFor({ timeout: 15_000 });
    await page.keyboard.press('Enter');
    const deadline3 = Date.now() + 20_000;
    while (!existsSync(exported) && Date.now() < deadline3) await sleep(250);
    await shot(page, '08-exported');
    assert.ok(existsSync(exported), `Export Session wrote nothing at ${exported}`);
    const traces = readFileSync(exported, 'utf8')
      .trim()
      .split('\n')
      .map((line) => TrainingTraceSchema.parse(JSON.parse(line)));
    assert.ok(
      traces.length >= 1 && traces.every((t) => t.session_id === result.session),
      'exported TrainingTrace JSONL of the terminal session',
    );
    mark('exported');

    // (Delete Session confirms in a modal dialog, which the workbench refuses to show while extension
    // tests run; deletion is covered by the controller unit tests.)
    signalUi(true);
  } catch (err) {
    signalUi(false, err instanceof Error ? err.message : String(err));
    await shot(page, '99-failure').catch(() => undefined);
    throw err;
  }

  let timer: ReturnType<typeof setTimeout> | undefined;
  const code = await Promise.race([exit, new Promise<number>((res) => (timer = setTimeout(() => res(-1), 90_000)))]);
  clearTimeout(timer);
  mark('host suite');
  const hostDone = join(control, 'host-done');
  assert.equal(code, 0, `extension-host suite exit code ${code}; host log:\n${hostLog.join('\n')}`);
  assert.ok(existsSync(hostDone), 'host suite reported success without writing host-done');
  // No secret in any file code-server or the extension wrote (logs, settings, state): the admin key
  // lives in SecretStorage only, and the log channel redacts.
  const logs = findFiles(stateDir, (f) => f.endsWith('Harness Lab.log'));
  assert.ok(
    logs.length > 0 && logs.some((f) => readFileSync(f, 'utf8').includes('proxy listening on')),
    `Harness Lab log channel file not found under ${stateDir}`,
  );
  const leaks = findFiles(stateDir, (f) => !f.startsWith(control)).filter((f) => readFileSync(f).includes(ADMIN_KEY)); // .e2e/ is this test's own input
  assert.deepEqual(leaks, [], 'the admin key must not be written to disk in clear');

  // A new window on the same workspace (what a reload does: fresh extension host, fresh activation,
  // proxy off since auto-start is off) still lists the captured session, read from the durable store.
  // The engine probe the extension remembers (globalState) reaches the browser's storage after a
  // flush delay, and a navigation before that loses it (a real reload flushes first): wait for it.
  try {
    await storedInBrowser(page, ['harnessLab.probedEngines', '"captureLevel":"tokens"']);
    await page.goto(
      `${server.url}/?folder=${encodeURIComponent(workspace)}&payload=${encodeURIComponent(JSON.stringify(payload.filter(([k]) => k !== 'extensionTestsPath')))}`,
    );
    await page.locator('.activitybar .action-item a[aria-label^="Harness Lab"]').click({ timeout: 60_000, force: true });
    await viewPane(page, /^sessions/i)
      .locator('.monaco-list-row', { hasText: `${result.session}` })
      .waitFor({ timeout: 30_000 });
    await viewPane(page, /^sessions/i)
      .locator('.monaco-list-row', { hasText: /4 calls · 1 failed/ })
      .waitFor({ timeout: 10_000 });
    await viewPane(page, /^sessions/i)
      .locator('.monaco-list-row', { hasText: '#2 google_gemini' })
      .waitFor({ timeout: 10_000 });
    await page.locator('.statusbar-item', { hasText: 'Harness Lab: off' }).waitFor({ timeout: 10_000 });
    const enginesAfter = page.locator('.pane', { has: page.locator('.pane-header', { hasText: /^engines/i }) });
    await enginesAfter.locator('.monaco-list-row', { hasText: 'unknown · capture: tokens' }).waitFor({ timeout: 10_000 });
  } catch (err) {
    await shot(page, '99-failure-after-reload').catch(() => undefined);
    throw err;
  }
  await shot(page, '09-after-reload');
  mark('reloaded');
  console.log(`e2e timings (ms since start): ${JSON.stringify(timings)}`);
});
