// The handlers of "Harness Lab: Validate Harness Wiring" and the Tasks view's "Run with Harness...":
// thin VS Code glue over the sandbox library (validateHarness, openLab + runRollout); the tables and
// lines are the CLI's own (`harness-lab validate`, `harness-lab run`). commands.ts registers them.
// A run records into the extension's own proxy, so its session shows in the Sessions tree.
import { join } from 'node:path';
import * as vscode from 'vscode';
import type { CaptureProxy } from '../capture/proxy.js';
import { harnessNames } from '../harness/registry.js';
import { openLab } from '../sandbox/lab.js';
import { rolloutLine, runRollout } from '../sandbox/rollout-runner.js';
import { defaultValidationTask, formatValidationTable, validateHarness } from '../sandbox/validate.js';
import type { Logger } from './logger.js';
import type { ReadonlyDocuments } from './readonly-docs.js';

export interface HarnessRunContext {
  context: vscode.ExtensionContext;
  log: Logger;
  docs: ReadonlyDocuments;
  /** The extension's running proxy (started when needed) and the model it announces. */
  ensureProxy(): Promise<{ proxy: CaptureProxy; model: string }>;
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

/** The harness named in the argument (`{ folder, harness }` from a script or test), else a quick pick. */
async function pickHarness(title: string, arg?: unknown): Promise<string | undefined> {
  const named = (arg as { harness?: unknown } | undefined)?.harness;
  if (typeof named === 'string' && harnessNames().includes(named)) return named;
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

function withContext(what: string, err: unknown): Error {
  return new Error(`${what}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
}

export async function validateHarnessWiring(ctx: HarnessRunContext, arg: unknown): Promise<void> {
  const harness = await pickHarness('Validate Harness Wiring');
  if (!harness) return;
  const taskDir = taskFolder(arg) ?? defaultValidationTask();
  await vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title: `Harness Lab: validating ${harness} in a Docker sandbox` }, async () => {
    const table = await validateHarness({ harness, taskDir, sandbox: 'docker', outDir: outDir(ctx.context), handleSignals: false, log: (l) => ctx.log.debug(l) }).catch((err: unknown) => {
      throw withContext(`could not validate ${harness}`, err);
    });
    const text = formatValidationTable(table);
    ctx.log.info(text);
    await ctx.docs.show(`validate ${harness}.txt`, `${text}\n`, 'plaintext');
    if (table.ok) void vscode.window.showInformationMessage(`Harness Lab: ${harness} passes the capture contract.`);
    else void vscode.window.showWarningMessage(`Harness Lab: ${harness} fails ${table.rows.filter((r) => !r.ok).length} check(s) of the capture contract.`);
  });
}

/** Returns the rollout's session id (a session of the extension's proxy). */
export async function runTaskWithHarness(ctx: HarnessRunContext, arg: unknown): Promise<string | undefined> {
  const taskDir = taskFolder(arg);
  if (!taskDir) throw new Error('run this from a task in the Tasks view.');
  const harness = await pickHarness('Run with Harness', arg);
  if (!harness) return undefined;
  const { proxy, model } = await ctx.ensureProxy();
  return vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title: `Harness Lab: ${harness} on ${taskDir}` }, async () => {
    const lab = await openLab({ taskDir, harness, sandbox: 'docker', proxy, model, outDir: outDir(ctx.context), handleSignals: false, log: (l) => ctx.log.debug(l) });
    try {
      const r = await runRollout(lab.rolloutOptions);
      const line = rolloutLine(r);
      ctx.log.info(`${line}\n  rollout: ${r.out_dir}\n  session: ${r.session_id}`);
      const open = 'Open Rollout';
      const show = r.status === 'ok' ? vscode.window.showInformationMessage : vscode.window.showWarningMessage;
      void show(`Harness Lab: ${line}`, open).then(async (c) => {
        if (c === open) await vscode.window.showTextDocument(vscode.Uri.file(join(r.out_dir, 'rollout.json')));
      });
      return r.session_id;
    } finally {
      await lab.close();
    }
  });
}
