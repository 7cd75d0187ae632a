// The handlers of the Batches view's review actions: "Audit Batch" (the GRPO audit of
// `harness-lab audit BATCH`, run here as a library call, shown as a Markdown preview, its problems as
// a warning with Show Audit) and "Open Group View" (one group's members side by side). Quick picks
// when run from the palette; the shaping of what is shown is in batch-review-model.ts. commands.ts
// registers them.
import { existsSync } from 'node:fs';
import { basename } from 'node:path';
import * as vscode from 'vscode';
import { batchStatus } from '../batch/status.js';
import { auditBatch, type AuditReport } from '../export/audit.js';
import {
  auditMarkdown,
  auditProblems,
  auditWarning,
  batchDirOf,
  batchReadError,
  groupPickItems,
  groupTargetOf,
  isErrorNode,
  deterministicPolicyNote,
} from './batch-review-model.js';
import { BatchesTreeModel, type BatchNode } from './batches-model.js';
import type { GroupViewPanels } from './group-view-panel.js';
import type { Logger } from './logger.js';
import { NotConfiguredError } from './not-configured.js';
import type { ReadonlyDocuments } from './readonly-docs.js';

export interface BatchReviewContext {
  log: Logger;
  docs: ReadonlyDocuments;
  groupViews: GroupViewPanels;
  /** The batches folders the Batches view reads (one per workspace folder). */
  batchFolders(): string[];
  /** Where the extension's shipped docs are (the audit links docs/behaviour-metrics.md). */
  context?: Pick<vscode.ExtensionContext, 'extensionUri'>;
}

const SUBMIT_BATCH = { title: 'Submit Rollout Batch...', command: 'harnessLab.submitBatch' };

/** The batch a command acts on: its argument (a Batches tree node, a path), else a quick pick of the view's batches. */
async function pickBatch(ctx: BatchReviewContext, arg: unknown, action: string, title: string): Promise<string | undefined> {
  if (isErrorNode(arg))
    throw new Error(
      `Cannot ${action} batch '${basename(arg.dir)}': ${arg.file === arg.dir ? 'the directory' : basename(arg.file)} cannot be read (${arg.description}). File: ${arg.file}`,
    );
  const fromArg = batchDirOf(arg);
  if (fromArg) return fromArg;
  const folders = ctx.batchFolders();
  if (!folders.length) throw new Error('Open a folder first: batches live in its batches folder (harnessLab.batchesFolder).');
  const batches = new BatchesTreeModel(() => folders).roots().filter((n): n is BatchNode => n.kind === 'batch');
  if (!batches.length) throw new NotConfiguredError(`No batches in ${folders.join(', ')} yet: submit one first.`, SUBMIT_BATCH);
  const picked = await vscode.window.showQuickPick(
    batches.map((b) => ({ label: b.label, description: b.description, detail: b.dir, dir: b.dir })),
    { title, placeHolder: 'Batch (newest first)', matchOnDescription: true, matchOnDetail: true },
  );
  return picked?.dir;
}

/** The audit as a rendered Markdown preview (the source document if the Markdown extension is absent). */
async function showAudit(uri: vscode.Uri, log: Logger): Promise<void> {
  try {
    await vscode.commands.executeCommand('markdown.showPreview', uri);
  } catch (err) {
    log.warn(`audit: no Markdown preview (${String(err)}); showing the source`);
    const doc = await vscode.workspace.openTextDocument(uri);
    await vscode.languages.setTextDocumentLanguage(doc, 'markdown');
    await vscode.window.showTextDocument(doc, { preview: true });
  }
}

/** Audit Batch: returns the report (for callers and tests), undefined when the user backed out. */
export async function auditBatchCommand(ctx: BatchReviewContext, arg: unknown): Promise<AuditReport | undefined> {
  const dir = await pickBatch(ctx, arg, 'audit', 'Harness Lab: Audit Batch');
  if (!dir) return undefined;
  const report = await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Window, title: `Auditing batch ${basename(dir)}` },
    async () => {
      // Let the progress show before the synchronous read of every capture.
      await new Promise((r) => setImmediate(r));
      try {
        return auditBatch(dir);
      } catch (err) {
        throw batchReadError('audit', dir, err);
      }
    },
  );
  const policyNotes: Record<string, string> = {};
  for (const g of report.groups) {
    const note = g.no_contrast ? deterministicPolicyNote(dir, g.task) : undefined;
    if (note) policyNotes[g.group_id] = note;
  }
  const docsFile = ctx.context ? vscode.Uri.joinPath(ctx.context.extensionUri, 'docs', 'behaviour-metrics.md') : undefined;
  const behaviourDocs = docsFile && existsSync(docsFile.fsPath) ? docsFile.toString() : undefined;
  const uri = ctx.docs.set(
    `audit ${report.batch_id}.md`,
    auditMarkdown(report, { policyNotes, ...(behaviourDocs ? { behaviourDocs } : {}) }),
  );
  await showAudit(uri, ctx.log);
  const problems = auditProblems(report);
  ctx.log.info(`audit of ${dir}: ${problems.length ? problems.map((p) => p.text).join(' | ') : 'no problems'}`);
  const show = 'Show Audit';
  if (problems.length) {
    void vscode.window
      .showWarningMessage(`Harness Lab: ${auditWarning(report, problems)}`, show)
      .then((c) => (c === show ? showAudit(uri, ctx.log) : undefined));
  } else {
    void vscode.window.showInformationMessage(
      `Harness Lab: audit of batch ${report.batch_id}: no problems (${report.summary.kept} kept rollouts in ${report.summary.groups} group(s), all with contrast).`,
    );
  }
  return report;
}

/** Open Group View: a group row opens its group; a batch row or the palette asks for the batch and group. */
export async function openGroupViewCommand(ctx: BatchReviewContext, arg: unknown): Promise<{ dir: string; groupId: string } | undefined> {
  const target = groupTargetOf(arg);
  const dir = target?.dir ?? (await pickBatch(ctx, arg, 'open a group of', 'Harness Lab: Open Group View (1/2): batch'));
  if (!dir) return undefined;
  let groupId = target?.groupId ?? null;
  if (!groupId) {
    let st;
    try {
      st = batchStatus(dir);
    } catch (err) {
      throw batchReadError('open a group of', dir, err);
    }
    const items = groupPickItems(st);
    if (!items.length) throw new Error(`Batch ${st.batch_id} has no groups.`);
    const picked =
      items.length === 1
        ? items[0]
        : await vscode.window.showQuickPick(items, {
            title: `Harness Lab: Open Group View (2/2): group of ${st.batch_id}`,
            placeHolder: 'Group to show side by side',
            matchOnDescription: true,
            matchOnDetail: true,
          });
    if (!picked) return undefined;
    groupId = picked.groupId;
  }
  const id = groupId;
  await vscode.window.withProgress({ location: vscode.ProgressLocation.Window, title: `Reading group ${id}` }, async () => {
    await new Promise((r) => setImmediate(r));
    ctx.groupViews.open(dir, id);
  });
  return { dir, groupId: id };
}
