// "Harness Lab: Validate Harness Wiring" and the Tasks view's "Run with Harness...": thin VS Code
// glue over the sandbox library (validateHarness, openLab + runRollout); the tables and lines are the
// CLI's own (`harness-lab validate`, `harness-lab run`).
import { join } from 'node:path';
import * as vscode from 'vscode';
import { harnessNames } from '../harness/registry.js';
import { openLab } from '../sandbox/lab.js';
import { rolloutLine, runRollout } from '../sandbox/rollout-runner.js';
import { defaultValidationTask, formatValidationTable, validateHarness } from '../sandbox/validate.js';
import type { Logger } from './logger.js';
import type { ReadonlyDocuments } from './readonly-docs.js';

export interface HarnessCommandHost {
  context: vscode.ExtensionContext;
  log: Logger;
  docs: ReadonlyDocuments;
}

const HARNESS_HINTS: Record<string, string> = {
  react: 'reference ReAct harness (Chat Completions + bash), the known-good baseline',
  codex: 'OpenAI Responses',
  'claude-code': 'Anthropic Messages',
  opencode: 'Chat Completions',
  'gemini-cli': 'Gemini',
  'qwen-code': 'Chat Completions',
  pi: 'Chat Completions',
};

async function pickHarness(title: string): Promise<string | undefined> {
  const picked = await vscode.window.showQuickPick(
    harnessNames().map((name) => ({ label: name, description: HARNESS_HINTS[name] ?? '' })),
    { title, placeHolder: 'Harness to run in a Docker sandbox' },
  );
  return picked?.label;
}

function outDir(context: vscode.ExtensionContext): string {
  return join(context.globalStorageUri.fsPath, 'runs');
}

/** A task folder from a Tasks view item (`{ folder }`), a URI, or undefined. */
function taskFolder(arg: unknown): string | undefined {
  if (arg instanceof vscode.Uri) return arg.fsPath;
  const folder = (arg as { folder?: unknown } | undefined)?.folder;
  return typeof folder === 'string' ? folder : undefined;
}

export function registerHarnessCommands(host: HarnessCommandHost): vscode.Disposable[] {
  const validate = vscode.commands.registerCommand('harnessLab.validateHarness', async (arg?: unknown) => {
    const harness = await pickHarness('Validate Harness Wiring');
    if (!harness) return;
    const taskDir = taskFolder(arg) ?? defaultValidationTask();
    await vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title: `Harness Lab: validating ${harness} in a Docker sandbox` }, async () => {
      try {
        const table = await validateHarness({ harness, taskDir, sandbox: 'docker', outDir: outDir(host.context), handleSignals: false, log: (l) => host.log.debug(l) });
        const text = formatValidationTable(table);
        host.log.info(text);
        await host.docs.show(`validate ${harness}.txt`, `${text}\n`, 'plaintext');
        if (table.ok) void vscode.window.showInformationMessage(`Harness Lab: ${harness} passes the capture contract.`);
        else void vscode.window.showWarningMessage(`Harness Lab: ${harness} fails ${table.rows.filter((r) => !r.ok).length} check(s) of the capture contract.`);
      } catch (err) {
        void vscode.window.showErrorMessage(`Harness Lab: could not validate ${harness}: ${err instanceof Error ? err.message : String(err)}`);
      }
    });
  });

  const runTask = vscode.commands.registerCommand('harnessLab.runTaskWithHarness', async (arg?: unknown) => {
    const taskDir = taskFolder(arg);
    if (!taskDir) {
      void vscode.window.showErrorMessage('Harness Lab: run this from a task in the Tasks view.');
      return;
    }
    const harness = await pickHarness('Run with Harness');
    if (!harness) return;
    await vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title: `Harness Lab: ${harness} on ${taskDir}` }, async () => {
      try {
        const lab = await openLab({ taskDir, harness, sandbox: 'docker', outDir: outDir(host.context), handleSignals: false, log: (l) => host.log.debug(l) });
        try {
          const r = await runRollout(lab.rolloutOptions);
          const line = rolloutLine(r);
          host.log.info(`${line}\n  rollout: ${r.out_dir}`);
          const open = 'Open Rollout';
          const show = r.status === 'ok' ? vscode.window.showInformationMessage : vscode.window.showWarningMessage;
          if ((await show(`Harness Lab: ${line}`, open)) === open) await vscode.window.showTextDocument(vscode.Uri.file(join(r.out_dir, 'rollout.json')));
        } finally {
          await lab.close();
        }
      } catch (err) {
        void vscode.window.showErrorMessage(`Harness Lab: ${err instanceof Error ? err.message : String(err)}`);
      }
    });
  });
  return [validate, runTask];
}
