// What the real-workbench batch e2e tests share: code-server with this repository as the
// development extension (or, with `vsix`, the packaged .vsix installed as a user installs it) and
// Chromium on it, the Harness Lab sidebar with the Batches view open, Submit Rollout Batch... through
// its quick picks, and a rollout row opened in the rollout viewer.
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { chromium, type Browser, type Locator, type Page } from 'playwright-core';
import { chromiumPath, launchCodeServer, runCommand, typeAndAccept, type CodeServer } from './code-server.js';
import { packageAndInstallVsix } from './vsix-install.js';

export const ROOT = resolve(__dirname, '..', '..');
export const ARTIFACTS = join(ROOT, 'test-artifacts', 'e2e');

export const QUIET_SETTINGS = {
  'workbench.startupEditor': 'none',
  'workbench.tips.enabled': false,
  'security.workspace.trust.enabled': false,
  'extensions.autoCheckUpdates': false,
  'extensions.autoUpdate': false,
  'telemetry.telemetryLevel': 'off',
  'window.commandCenter': false,
};

export interface Workbench {
  server: CodeServer;
  browser: Browser;
  page: Page;
  /** The installed extension's folder (with `vsix`); undefined for the development extension. */
  extensionDir?: string;
  close(): Promise<void>;
}

/**
 * code-server on `workspace` with the extension under development, or with `vsix` the platform .vsix
 * packaged from this repository's dist/ (build it first) and installed with --install-extension; and a
 * headless Chromium page on it.
 */
export async function openWorkbench(opts: {
  stateDir: string;
  workspace: string;
  env?: Record<string, string>;
  userSettings?: Record<string, unknown>;
  vsix?: boolean;
}): Promise<Workbench> {
  const extensionDir = opts.vsix ? packageAndInstallVsix(opts.stateDir) : undefined;
  const server = await launchCodeServer({
    stateDir: opts.stateDir,
    workspace: opts.workspace,
    userSettings: { ...QUIET_SETTINGS, ...opts.userSettings },
    ...(opts.env ? { env: opts.env } : {}),
  });
  let browser: Browser | undefined;
  try {
    browser = await chromium.launch({
      executablePath: chromiumPath(),
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update'],
    });
    const page = await browser.newPage({ viewport: { width: 1500, height: 1000 } });
    const remote = (p: string) => `vscode-remote://127.0.0.1:${server.port}${p}`;
    const payload = [...(extensionDir ? [] : [['extensionDevelopmentPath', remote(ROOT)]]), ['skipWelcome', 'true']];
    await page.goto(`${server.url}/?folder=${encodeURIComponent(opts.workspace)}&payload=${encodeURIComponent(JSON.stringify(payload))}`);
    await page.locator('.monaco-workbench').waitFor({ timeout: 60_000 });
    const b = browser;
    return {
      server,
      browser: b,
      page,
      ...(extensionDir ? { extensionDir } : {}),
      close: async () => (await b.close().catch(() => undefined), await server.stop()),
    };
  } catch (err) {
    await browser?.close().catch(() => undefined);
    await server.stop();
    throw err;
  }
}

export function pane(page: Page, name: RegExp): Locator {
  return page.locator('.pane', { has: page.locator('.pane-header', { hasText: name }) });
}

/** A notification toast holding `text`. */
export function toast(page: Page, text: string | RegExp): Locator {
  return page.locator('.notification-toast', { hasText: text });
}

/** The notifications on screen and in the notification centre, for a failure's message: what the extension last said. */
export async function notificationTexts(page: Page): Promise<string> {
  const texts = await page
    .locator('.notification-list-item-message')
    .allInnerTexts()
    .catch((err: unknown) => [`(could not read the notifications: ${err instanceof Error ? err.message : String(err)})`]);
  return texts.length ? texts.map((t) => `- ${t.replace(/\s+/g, ' ').trim()}`).join('\n') : '(none)';
}

/** Files under `dir` (not inside node_modules) that `keep` accepts: logs and runs a test looks for. */
export function findFiles(dir: string, keep: (path: string) => boolean): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (entry.name !== 'node_modules') out.push(...findFiles(path, keep));
    } else if (entry.isFile() && keep(path)) out.push(path);
  }
  return out;
}

/**
 * The lines of code-server's window, extension host and Harness Lab logs (under the state dir's
 * user-data/logs) that match `pattern`, the last `max` of them: what a failing step adds to its error
 * so a failure seen once in CI says what the workbench did.
 */
export function workbenchLogLines(stateDir: string, pattern: RegExp, max = 60): string {
  const logs = join(stateDir, 'user-data', 'logs');
  if (!existsSync(logs)) return `(no logs under ${logs})`;
  const files = findFiles(logs, (p) => /(exthost|renderer|window|Harness Lab)[^/]*\.log$/.test(p)).sort();
  const lines: string[] = [];
  for (const f of files)
    for (const line of readFileSync(f, 'utf8').split('\n'))
      if (pattern.test(line)) lines.push(`${f.slice(logs.length + 1)}: ${line.slice(0, 400)}`);
  return lines.slice(-max).join('\n') || `(no line matches ${pattern} in ${files.length} log files)`;
}

/** Drags the sidebar's sash so tree descriptions are readable in the screenshots. */
export async function widenSidebar(page: Page, width: number): Promise<void> {
  const box = await page.locator('.part.sidebar').boundingBox();
  if (!box) return;
  const y = box.y + box.height / 2;
  await page.mouse.move(box.x + box.width + 1, y);
  await page.mouse.down();
  await page.mouse.move(box.x + width, y, { steps: 5 });
  await page.mouse.up();
}

/** The Harness Lab sidebar, widened, with the Batches view expanded and the views above it folded. */
export async function showBatchesView(page: Page): Promise<Locator> {
  await page.locator('.activitybar .action-item a[aria-label^="Harness Lab"]').click({ timeout: 60_000, force: true }); // a view's progress badge may cover it
  await widenSidebar(page, 620);
  const view = pane(page, /^batches/i);
  await view.locator('.pane-header').waitFor({ timeout: 30_000 });
  for (const other of [/^sessions/i, /^engines/i]) {
    const header = pane(page, other).locator('.pane-header');
    if ((await header.getAttribute('aria-expanded')) === 'true') await header.click();
  }
  if ((await view.locator('.pane-header').getAttribute('aria-expanded')) !== 'true') await view.locator('.pane-header').click();
  return view;
}

/** Picks in the open quick input: filter by text, then Enter (for a multi-select, the row is checked first). */
export async function pick(page: Page, text: string, opts: { check?: boolean } = {}): Promise<void> {
  if (!opts.check) return typeAndAccept(page, text, text);
  const input = page.locator('.quick-input-widget input.input:visible');
  await input.waitFor({ timeout: 15_000 });
  await input.fill(text);
  const row = page.locator('.quick-input-list .monaco-list-row', { hasText: text }).first();
  await row.waitFor({ timeout: 10_000 });
  // A multi-select: one item checked ("1 Selected"); clicking a row toggles it.
  const count = page.locator('.quick-input-widget .quick-input-count:visible');
  if (!/^1 Selected/.test((await count.innerText().catch(() => '')).trim())) await row.locator('.label-name').first().click();
  await count.filter({ hasText: /^1 Selected/ }).waitFor({ timeout: 10_000 });
  await page.keyboard.press('Enter');
}

/** Waits for the quick input of the step whose title holds `step` (the previous step's may still be on screen). */
export async function atStep(page: Page, step: string): Promise<void> {
  await page.locator('.quick-input-widget .quick-input-title', { hasText: step }).waitFor({ timeout: 20_000 });
}

/** "Harness Lab: Submit Rollout Batch..." from the palette, through its quick picks as a user answers them. */
export async function submitBatch(
  page: Page,
  o: {
    task: string;
    harness: string;
    groupSize: number;
    backend: 'docker' | 'k8s';
    kubeContext?: string;
    engine?: string;
    shotBeforeEngine?: (page: Page) => Promise<unknown>;
  },
): Promise<void> {
  await runCommand(page, 'Harness Lab: Submit Rollout Batch...');
  await atStep(page, '(1/4)');
  await pick(page, o.task, { check: true }); // tasks (multi-select), by folder
  await atStep(page, '(2/4)');
  await pick(page, o.harness, { check: true }); // harnesses (multi-select)
  await atStep(page, '(3/4)');
  const size = page.locator('.quick-input-widget input.input:visible');
  await size.fill(String(o.groupSize));
  await page.keyboard.press('Enter');
  await atStep(page, '(4/4)');
  await pick(page, o.backend);
  if (o.kubeContext) {
    await atStep(page, 'kube context');
    await pick(page, o.kubeContext);
  }
  if (o.engine) {
    await atStep(page, 'engine');
    await o.shotBeforeEngine?.(page);
    await pick(page, o.engine);
  }
}

/** Clicks a rollout row until its session file's editor tab opens (a tree refreshed by the file watcher under the pointer can swallow a click). */
export async function openRolloutRow(page: Page, row: Locator, sessionId: string): Promise<void> {
  const tab = page.locator('.tab', { hasText: `${sessionId}.jsonl` });
  for (let i = 0; i < 4 && !(await tab.count()); i++) {
    await row.click();
    await tab.waitFor({ timeout: 8_000 }).catch(() => undefined);
  }
  await tab.waitFor({ timeout: 30_000 });
}

/** The rollout viewer's document inside the active webview. */
export function viewerFrame(page: Page) {
  return page.frameLocator('iframe.webview.ready').frameLocator('#active-frame');
}
