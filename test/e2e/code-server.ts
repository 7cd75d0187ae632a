// Launches code-server 4.100.3 (installed by scripts/code-server-install.sh) in its own process
// group, with HOME and every state directory in a throwaway folder, and stops the whole group.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, openSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export const CODE_SERVER_VERSION = '4.100.3';
export const INSTALL_SCRIPT = 'scripts/code-server-install.sh';

export function codeServerDir(): string {
  return (
    process.env.CODE_SERVER_DIR ??
    join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'harness-lab', `code-server-${CODE_SERVER_VERSION}`)
  );
}

export function codeServerBin(): string {
  return join(codeServerDir(), 'node_modules', '.bin', 'code-server');
}

export function chromiumPath(): string {
  return process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
}

/** Why the real-workbench test cannot run here, in terms of what to do about it; undefined when it can. */
export function missingPrerequisite(): string | undefined {
  if (!existsSync(codeServerBin()) || !existsSync(join(codeServerDir(), '.install-complete'))) {
    return `code-server ${CODE_SERVER_VERSION} is not installed in ${codeServerDir()}. Run \`bash ${INSTALL_SCRIPT}\` (as root; about 2 minutes), or set CODE_SERVER_DIR to an existing install.`;
  }
  if (!existsSync(chromiumPath()))
    return `Chromium not found at ${chromiumPath()}. Run \`bash ${INSTALL_SCRIPT}\` (it apt-installs Debian's chromium) or set CHROMIUM_PATH.`;
  return undefined;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export interface CodeServer {
  url: string;
  port: number;
  logFile: string;
  stop(): Promise<void>;
}

export interface LaunchOptions {
  /** Everything code-server writes (user data, extensions, HOME) goes under here. */
  stateDir: string;
  workspace: string;
  /** Extra user settings (User/settings.json). */
  userSettings?: Record<string, unknown>;
  env?: Record<string, string>;
}

export async function launchCodeServer(opts: LaunchOptions): Promise<CodeServer> {
  const port = await freePort();
  const home = join(opts.stateDir, 'home');
  const userData = join(opts.stateDir, 'user-data');
  const extensions = join(opts.stateDir, 'extensions');
  for (const dir of [home, join(userData, 'User'), extensions]) mkdirSync(dir, { recursive: true });
  writeFileSync(join(userData, 'User', 'settings.json'), JSON.stringify(opts.userSettings ?? {}, null, 2));
  const logFile = join(opts.stateDir, 'code-server.log');
  const out = openSync(logFile, 'a');
  const args = [
    '--auth',
    'none',
    '--bind-addr',
    `127.0.0.1:${port}`,
    '--disable-telemetry',
    '--disable-update-check',
    '--disable-workspace-trust',
    '--disable-getting-started-override',
    '--config',
    join(opts.stateDir, 'config.yaml'),
    '--user-data-dir',
    userData,
    '--extensions-dir',
    extensions,
    opts.workspace,
  ];
  const child: ChildProcess = spawn(codeServerBin(), args, {
    detached: true, // own process group: children die with it (reference 7.5)
    stdio: ['ignore', out, out],
    env: { ...process.env, HOME: home, XDG_CONFIG_HOME: join(home, '.config'), XDG_DATA_HOME: join(home, '.local', 'share'), ...opts.env },
  });
  let exited = false;
  child.once('exit', () => (exited = true));
  const url = `http://127.0.0.1:${port}`;
  const stop = async () => {
    if (exited || child.pid === undefined) return;
    try {
      process.kill(-child.pid, 'SIGTERM');
    } catch {
      return;
    }
    for (let i = 0; i < 50 && !exited; i++) await sleep(100);
    if (!exited) {
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  };
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (exited) throw new Error(`code-server exited during startup; see ${logFile}`);
    try {
      const res = await fetch(`${url}/healthz`);
      if (res.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`code-server did not answer /healthz within 60 s; see ${logFile}`);
    }
    await sleep(200);
  }
  return { url, port, logFile, stop };
}

/**
 * Types `value` into the open quick input until the row holding `rowText` has the focus, then
 * presses Enter. Enter accepts the focused row, and the unfiltered list may already hold the
 * wanted one: typing into a quick input that is about to be replaced by the next step's (the same
 * DOM input, reset when the new one shows) left the first row focused, and Enter took it.
 */
export async function typeAndAccept(page: import('playwright-core').Page, value: string, rowText: string): Promise<void> {
  const input = page.locator('.quick-input-widget input.input:visible');
  const focused = page.locator('.quick-input-list .monaco-list-row.focused', { hasText: rowText }).first();
  for (let attempt = 0; ; attempt++) {
    await input.waitFor({ timeout: 15_000 });
    await input.fill(value);
    try {
      await focused.waitFor({ timeout: 3_000 });
      break;
    } catch (err) {
      if (attempt >= 3) throw err;
    }
  }
  await page.keyboard.press('Enter');
}

/** Runs a command from the palette by its title (as a user would: F1, type, Enter). */
export async function runCommand(page: import('playwright-core').Page, title: string): Promise<void> {
  // A palette still closing from the previous command matched "visible", took the title and then
  // vanished; an F1 pressed while a webview takes the focus can be lost; and a webview that takes
  // the focus a moment later (one just restored or opened) closes a palette already showing. Wait
  // for the closing one, then open the palette and type until its row has the focus, from F1 again
  // each time the palette is gone.
  const shown = page.locator('.quick-input-widget input.input:visible');
  const focused = page.locator('.quick-input-list .monaco-list-row.focused', { hasText: title }).first();
  await shown.waitFor({ state: 'hidden', timeout: 10_000 }).catch(() => page.keyboard.press('Escape'));
  let lastError = '';
  for (let attempt = 1; attempt <= 4; attempt++) {
    if (!(await shown.isVisible())) {
      await page.keyboard.press('F1');
      const opened = await shown.waitFor({ timeout: 5_000 }).then(
        () => true,
        (err: unknown) => ((lastError = err instanceof Error ? err.message : String(err)), false),
      );
      if (!opened) continue;
    }
    try {
      await shown.fill(`>${title}`, { timeout: 3_000 });
      await focused.waitFor({ timeout: 3_000 });
    } catch (err) {
      lastError = err instanceof Error ? err.message : String(err);
      continue;
    }
    await page.keyboard.press('Enter');
    return;
  }
  throw new Error(`the command palette did not run "${title}" after 4 tries: ${lastError}`);
}

/**
 * Right-clicks `row` and picks `label` from its context menu. The workbench ignores a click that lands
 * right after its context menu opened, and a tree that re-renders can close the menu: so wait before
 * clicking, and open the menu again (up to three times) while it is still showing.
 */
export async function pickFromContextMenu(
  page: import('playwright-core').Page,
  row: import('playwright-core').Locator,
  label: string,
): Promise<void> {
  const item = page.locator('.monaco-menu .action-label', { hasText: label });
  for (let attempt = 1; ; attempt++) {
    await row.click({ button: 'right' });
    // A menu opened while a webview panel takes the focus (a row click that just opened one) is
    // closed again at once: a menu that never shows is another try, not a failure.
    const shown = await item
      .first()
      .waitFor({ timeout: 10_000 })
      .then(
        () => true,
        () => false,
      );
    if (!shown) {
      if (attempt >= 3) {
        const items = await page.locator('.monaco-menu .action-label').allInnerTexts();
        throw new Error(`the context menu item "${label}" did not show after ${attempt} tries (menu: ${JSON.stringify(items)})`);
      }
      await page.keyboard.press('Escape');
      continue;
    }
    await new Promise((r) => setTimeout(r, 400));
    await item
      .first()
      .click({ timeout: 10_000 })
      .catch(() => undefined);
    const closed = await page
      .locator('.monaco-menu')
      .first()
      .waitFor({ state: 'hidden', timeout: 3_000 })
      .then(
        () => true,
        () => false,
      );
    if (closed) return;
    if (attempt >= 3) throw new Error(`the context menu item "${label}" did not run after ${attempt} tries`);
    await page.keyboard.press('Escape');
  }
}
