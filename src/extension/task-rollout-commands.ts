// The handlers of "Harness Lab: Validate Harness Wiring" and the Tasks view's "Run with Harness...":
// thin VS Code glue over the sandbox library (openLab + runRollout, the validation contract rows);
// the tables and lines are the CLI's own (`harness-lab validate`, `harness-lab rollout`). commands.ts
// registers them. A rollout records into the extension's own proxy, so its session streams into the
// Sessions tree; its outputs go under the workspace (harnessLab.rolloutsDir). Progress ends when the
// work ends (the result message comes after), Cancel removes the rollout's sandbox.
import { mkdirSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import * as vscode from 'vscode';
import type { CaptureProxy } from '../capture/proxy.js';
import { assertInstalled, harnessEntry, harnessHint, harnessNames } from '../harness/registry.js';
import { openLab, type Lab, type LabOptions } from '../sandbox/lab.js';
import { ROLLOUT_DOCUMENT_FILE, rolloutLine, runRollout, type RolloutResult } from '../sandbox/rollout-runner.js';
import { contractRows, defaultValidationTask, formatValidationTable, type ValidationTable } from '../sandbox/validate.js';
import type { Logger } from './logger.js';
import type { ReadonlyDocuments } from './readonly-docs.js';
import { outcomeLine, outcomeOf, outcomeReason, outcomeSeverity, policyMismatch } from './rollout-outcome.js';
import { rolloutsDir, validationMarkdown } from './task-rollout-model.js';

export interface TaskRolloutContext {
  context: vscode.ExtensionContext;
  log: Logger;
  docs: ReadonlyDocuments;
  /** The extension's running proxy (started when needed) and the model it announces. */
  ensureProxy(): Promise<{ proxy: CaptureProxy; model: string }>;
  /** Opens a session of the running proxy in the rollout viewer. */
  openViewer(sessionId: string): void;
  /** harnessLab.rolloutsDir as set (relative to the first workspace folder; empty: the default). */
  rolloutsDirSetting(): string;
  /**
   * What the engine in use follows when it is this window's embedded engine: a policy file or shipped
   * name, null for none (free sampling); undefined for any other engine (it follows its own weights).
   */
  enginePolicy?(): string | null | undefined;
  /** Whether an engine is set up for the extension's proxy (running, or configured to start). */
  hasEngine?(): boolean;
  /** The Sessions tree again: a rollout's outcome (rollout.json) is written after its last call. */
  refreshSessions?(): void;
}

/** The harness named in the argument (`{ folder, harness }` from a script or test), else a quick pick. */
async function pickHarness(title: string, arg?: unknown): Promise<string | undefined> {
  const named = (arg as { harness?: unknown } | undefined)?.harness;
  if (typeof named === 'string' && harnessNames().includes(named)) return named;
  // Installed harnesses first, marked; the others say they are not installed (running one says how to install it).
  const rows = harnessNames().map((name) => ({ name, installed: isInstalled(name) }));
  rows.sort((a, b) => Number(b.installed) - Number(a.installed));
  const picked = await vscode.window.showQuickPick(
    rows.map(({ name, installed }) => ({
      label: `${installed ? '$(check)' : '$(circle-slash)'} ${name}`,
      description: [installed ? 'installed' : 'not installed', harnessHint(name)].filter(Boolean).join(' · '),
      name,
    })),
    { title, placeHolder: 'Harness to run in a Docker sandbox', matchOnDescription: true },
  );
  return picked?.name;
}

function isInstalled(name: string): boolean {
  try {
    assertInstalled(harnessEntry(name));
    return true;
  } catch {
    return false;
  }
}

function outDir(ctx: TaskRolloutContext): string {
  return rolloutsDir(ctx.rolloutsDirSetting(), vscode.workspace.workspaceFolders?.[0]?.uri.fsPath, ctx.context.globalStorageUri.fsPath);
}

/** A task folder from a Tasks view item (`{ folder }`), a URI, or undefined. */
function taskFolder(arg: unknown): string | undefined {
  if (arg instanceof vscode.Uri) return arg.fsPath;
  const folder = (arg as { folder?: unknown } | undefined)?.folder;
  return typeof folder === 'string' ? folder : undefined;
}

/** The task's display name: the Tasks view label when the command came from there, else the folder name. */
function taskLabel(arg: unknown, taskDir: string): string {
  const label = (arg as { label?: unknown } | undefined)?.label;
  return typeof label === 'string' && label ? label : basename(taskDir);
}

function withContext(what: string, err: unknown): Error {
  return new Error(`${what}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
}

interface RolloutInProgress {
  result: RolloutResult | undefined;
  cancelled: boolean;
}

/**
 * One rollout under a cancellable progress notification with stage messages. Cancel removes the
 * rollout's sandbox (the agent's exec ends with it) and the rollout ends as errored.
 */
async function rolloutWithProgress(
  ctx: TaskRolloutContext,
  title: string,
  labOptions: LabOptions,
  extra: { timeoutSec?: number } = {},
): Promise<RolloutInProgress> {
  return vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title, cancellable: true },
    async (progress, token) => {
      let cancelled = false;
      let lab: Lab | undefined;
      // The rollout runner stops and removes the sandbox when this aborts (and says cancelled).
      const abort = new AbortController();
      const sub = token.onCancellationRequested(() => {
        cancelled = true;
        ctx.log.info(`${title}: cancelled; removing the sandbox`);
        progress.report({ message: 'cancelling: removing the sandbox' });
        abort.abort();
      });
      try {
        progress.report({ message: 'opening the lab' });
        lab = await openLab(labOptions);
        if (cancelled) return { result: undefined, cancelled };
        const r = await runRollout({
          ...lab.rolloutOptions,
          ...(extra.timeoutSec ? { timeoutSec: extra.timeoutSec } : {}),
          signal: abort.signal,
          onStage: (stage) => {
            ctx.log.info(`${title}: ${stage}`);
            if (!cancelled) progress.report({ message: stage });
          },
        });
        cancelled ||= r.cancelled;
        return { result: r, cancelled };
      } finally {
        sub.dispose();
        await lab?.close();
      }
    },
  );
}

export async function validateHarnessWiring(ctx: TaskRolloutContext, arg: unknown): Promise<ValidationTable | undefined> {
  const harness = await pickHarness('Validate Harness Wiring', arg);
  if (!harness) return undefined;
  const taskDir = taskFolder(arg) ?? defaultValidationTask();
  const name = taskLabel(arg, taskDir);
  const out = outDir(ctx);
  mkdirSync(out, { recursive: true });
  // Through the extension's proxy when there is an engine for it, so the session shows in Sessions;
  // without one the lab starts the task's policy engine and its own proxy (the session is in the rollout folder).
  const shared = ctx.hasEngine?.() ? await ctx.ensureProxy() : undefined;
  const rollout = await rolloutWithProgress(ctx, `Harness Lab: validating ${harness} on ${name}`, {
    taskDir,
    harness,
    sandbox: 'docker',
    outDir: out,
    handleSignals: false,
    log: (l) => ctx.log.debug(l),
    ...(shared ? { proxy: shared.proxy, model: shared.model } : {}),
  }).catch((err: unknown) => {
    throw withContext(`could not validate ${harness} on ${name}`, err);
  });
  if (!rollout.result) return undefined;
  const r = rollout.result;
  ctx.refreshSessions?.();
  const rows = contractRows(r);
  const table: ValidationTable = {
    harness: r.harness,
    task: r.task,
    sandbox: r.sandbox,
    ok: rows.every((row) => row.ok),
    rows,
    rollout: r,
  };
  ctx.log.info(formatValidationTable(table));
  const report = join(r.out_dir, 'validation.md');
  writeFileSync(report, validationMarkdown(table, rollout.cancelled));
  // The result after the progress has ended: a readable table in the Markdown preview.
  await vscode.commands.executeCommand('markdown.showPreview', vscode.Uri.file(report));
  const failed = rows.filter((row) => !row.ok).length;
  const msg = rollout.cancelled
    ? `Harness Lab: validation of ${harness} was cancelled; the sandbox was removed.`
    : table.ok
      ? `Harness Lab: ${harness} passes the capture contract on ${name}.`
      : `Harness Lab: ${harness} fails ${failed} check(s) of the capture contract on ${name}.`;
  void resultMessage(ctx, table.ok && !rollout.cancelled ? 'info' : 'warning', msg, r);
  return table;
}

/** Returns the rollout's session id (a session of the extension's proxy). */
export async function runTaskWithHarness(ctx: TaskRolloutContext, arg: unknown): Promise<string | undefined> {
  const taskDir = taskFolder(arg);
  if (!taskDir) throw new Error('run this from a task in the Tasks view.');
  const harness = await pickHarness('Run with Harness', arg);
  if (!harness) return undefined;
  const { proxy, model } = await ctx.ensureProxy();
  const name = taskLabel(arg, taskDir);
  const out = outDir(ctx);
  mkdirSync(out, { recursive: true });
  const rollout = await rolloutWithProgress(ctx, `Harness Lab: ${harness} on ${name}`, {
    taskDir,
    harness,
    sandbox: 'docker',
    proxy,
    model,
    outDir: out,
    handleSignals: false,
    log: (l) => ctx.log.debug(l),
  }).catch((err: unknown) => {
    throw withContext(`could not run ${harness} on ${name}`, err);
  });
  const r = rollout.result;
  if (!r) return undefined;
  const line = rolloutLine(r);
  ctx.refreshSessions?.();
  const outcome = outcomeOf({ ...r, cancelled: rollout.cancelled }, r.out_dir);
  const reason = outcomeReason(outcome);
  const hint = policyMismatch(ctx.enginePolicy?.(), taskDir);
  ctx.log.info(
    `${line}\n  rollout: ${r.out_dir}\n  session: ${r.session_id}${r.error ? `\n  error: ${r.error}` : ''}` +
      `${outcome.verifier.length ? `\n  verifier: ${outcome.verifier.join('\n            ')}` : ''}${hint ? `\n  note: ${hint}` : ''}`,
  );
  // Only a reward above 0 is a success; a reward of 0 is a warning with the verifier's reason.
  const message = `Harness Lab: ${harness} on ${outcomeLine(outcome)}${reason ? ` — ${reason}` : ''}${hint ? `. Note: ${hint}.` : ''}`;
  void resultMessage(ctx, outcomeSeverity(outcome), message, r);
  return r.session_id;
}

/** A rollout's result: Open in Viewer, Reveal (the rollout's folder) and Show Log. */
async function resultMessage(
  ctx: TaskRolloutContext,
  severity: 'info' | 'warning' | 'error',
  message: string,
  r: RolloutResult,
): Promise<void> {
  const open = 'Open in Viewer';
  const reveal = 'Reveal';
  const showLog = 'Show Log';
  const show =
    severity === 'info'
      ? vscode.window.showInformationMessage
      : severity === 'warning'
        ? vscode.window.showWarningMessage
        : vscode.window.showErrorMessage;
  const choice = await show(message, ...(r.rollout ? [open] : []), reveal, showLog);
  if (choice === open) {
    try {
      ctx.openViewer(r.session_id);
    } catch {
      // The proxy that recorded it may be gone; the rollout document in the rollout's folder opens the same view.
      await vscode.commands.executeCommand(
        'vscode.openWith',
        vscode.Uri.file(join(r.out_dir, ROLLOUT_DOCUMENT_FILE)),
        'harnessLab.rolloutFile',
      );
    }
  } else if (choice === reveal) {
    const uri = vscode.Uri.file(join(r.out_dir, 'rollout.json'));
    if (vscode.workspace.getWorkspaceFolder(uri)) await vscode.commands.executeCommand('revealInExplorer', uri);
    else await vscode.commands.executeCommand('revealFileInOS', uri);
  } else if (choice === showLog) ctx.log.show();
}
