// "Open Harness Lab Terminal" (a terminal with the bundled `harness-lab` and the installed harness
// CLIs on PATH) and "Install Harness…" (the pinned npm install of a harness the .vsix can do itself,
// src/harness/install.ts, run in the bundled CLI so npm's output goes to the log).
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import * as vscode from 'vscode';
import { harnessInstallPlan } from '../harness/install.js';
import { HARNESS_NAMES } from '../harness/wiring.js';
import { runBundledCli } from './bundled-cli.js';
import { failureReason } from './batch-wizard.js';
import { labTerminalPath, writeShims } from './lab-terminal.js';
import type { Logger } from './logger.js';

export interface LabToolsContext {
  context: vscode.ExtensionContext;
  log: Logger;
}

const cliJs = (ctx: LabToolsContext) => join(ctx.context.extensionUri.fsPath, 'dist', 'cli.js');

/** Opens a terminal whose PATH starts with the shims; returns the terminal and the commands it has. */
export async function openLabTerminal(ctx: LabToolsContext): Promise<{ terminal: vscode.Terminal; commands: string[]; shimDir: string }> {
  const shimDir = join(ctx.context.globalStorageUri.fsPath, 'bin');
  const commands = writeShims(shimDir, { nodePath: process.execPath, cliJs: cliJs(ctx) });
  const terminal = vscode.window.createTerminal({
    name: 'Harness Lab',
    env: { PATH: labTerminalPath(shimDir, process.env.PATH) },
    message: `Harness Lab terminal: ${commands.join(', ')} on PATH. \`harness-lab --help\` lists the lab's commands.`,
    iconPath: new vscode.ThemeIcon('beaker'),
  });
  terminal.show();
  ctx.log.info(`Harness Lab terminal: ${commands.join(', ')} from ${shimDir}`);
  return { terminal, commands, shimDir };
}

/** Install Harness…: picks a harness (installed ones marked), installs it with the bundled CLI. */
export async function installHarnessCommand(ctx: LabToolsContext, arg?: unknown): Promise<string | undefined> {
  const given = typeof arg === 'string' ? arg : (arg as { harness?: unknown } | undefined)?.harness;
  let name = typeof given === 'string' ? given : undefined;
  if (!name) {
    const items = HARNESS_NAMES.map((n) => {
      const plan = harnessInstallPlan(n);
      return {
        label: n,
        description: plan.steps.length ? `not installed: ${plan.steps.map((s) => s.spec).join(' + ')}` : '$(check) installed',
        picked: false,
      };
    });
    name = (
      await vscode.window.showQuickPick(items, {
        title: 'Install Harness',
        placeHolder: 'A pinned harness CLI from npm, into the harness cache (needs npm on PATH)',
      })
    )?.label;
  }
  if (!name) return undefined;
  const harness = name;
  mkdirSync(ctx.context.globalStorageUri.fsPath, { recursive: true });
  const run = await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: `Harness Lab: installing ${harness}`, cancellable: true },
    (progress, token) => {
      const abort = new AbortController();
      token.onCancellationRequested(() => abort.abort());
      return runBundledCli(cliJs(ctx), ['harness', 'install', harness], {
        cwd: ctx.context.globalStorageUri.fsPath,
        signal: abort.signal,
        onLine: (l) => (ctx.log.info(`[install ${harness}] ${l}`), progress.report({ message: l.slice(0, 120) })),
      });
    },
  );
  if (run.code !== 0) throw new Error(`installing ${harness} failed: ${failureReason(run.output, run.code)}`);
  void vscode.window
    .showInformationMessage(`Harness Lab: ${harness} is installed (${harnessInstallPlan(harness).bin}).`, 'Open Harness Lab Terminal')
    .then((c) => (c ? vscode.commands.executeCommand('harnessLab.openLabTerminal') : undefined));
  return harnessInstallPlan(harness).bin;
}
