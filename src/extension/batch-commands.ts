// The handlers of "Harness Lab: Submit Rollout Batch...", the Batches view's Cancel Batch and a
// rollout's "Open in Rollout Viewer": quick picks and progress here, the work in batch-submit.ts and
// src/batch/ (plan, runner via the bundled CLI, cancel). commands.ts registers them.
import { dirname, join } from 'node:path';
import * as vscode from 'vscode';
import { batchStatus } from '../batch/status.js';
import { harnessHint, harnessNames } from '../harness/registry.js';
import type { BatchesTreeNode, BatchRolloutNode } from './batches-model.js';
import { planAndWriteBatch, startBatchLab } from './batch-submit.js';
import { readKubeContexts } from './kube-contexts.js';
import type { Logger } from './logger.js';
import { sortTasks, taskNode } from './tasks-model.js';

export interface BatchCommandContext {
  context: vscode.ExtensionContext;
  log: Logger;
  /** The folder new batches go to (the Batches view reads it); undefined without a workspace. */
  batchesFolder(): string | undefined;
  engineUrl(): string;
  model(): string;
  refreshBatches(): void;
}

async function workspaceTasks(): Promise<{ label: string; description: string; folder: string }[]> {
  const uris = await vscode.workspace.findFiles('**/task.toml', '{**/node_modules/**,**/.git/**}', 1000);
  const nodes = [];
  for (const uri of uris) {
    const root = vscode.workspace.getWorkspaceFolder(uri)?.uri.fsPath ?? '';
    nodes.push(taskNode(uri.fsPath, root, new TextDecoder().decode(await vscode.workspace.fs.readFile(uri))));
  }
  return sortTasks(nodes);
}

function taskFolderOf(arg: unknown): string | undefined {
  if (arg instanceof vscode.Uri) return arg.fsPath;
  const folder = (arg as { folder?: unknown } | undefined)?.folder;
  return typeof folder === 'string' ? folder : undefined;
}

/** The quick picks: tasks, harnesses, group size, backend (and kube context), engine. Undefined: the user backed out. */
async function askBatch(ctx: BatchCommandContext, arg: unknown) {
  const title = 'Submit Rollout Batch';
  let tasks: string[];
  const fromArg = taskFolderOf(arg);
  if (fromArg) tasks = [fromArg];
  else {
    const all = await workspaceTasks();
    if (!all.length) throw new Error('No Harbor tasks in this workspace (a task is a folder holding a task.toml).');
    const picked = await vscode.window.showQuickPick(all.map((t) => ({ ...t, picked: all.length === 1 })), { title: `${title} (1/4): tasks`, placeHolder: 'Tasks to run; each gets a group of rollouts per harness', canPickMany: true, matchOnDescription: true });
    if (!picked?.length) return undefined;
    tasks = picked.map((p) => p.folder);
  }
  const harnessPick = await vscode.window.showQuickPick(harnessNames().map((name) => ({ label: name, description: harnessHint(name) })), { title: `${title} (2/4): harnesses`, placeHolder: 'Harnesses; every group keeps all its members on one harness', canPickMany: true });
  if (!harnessPick?.length) return undefined;
  const size = await vscode.window.showInputBox({
    title: `${title} (3/4): group size`,
    prompt: 'Rollouts per group (G): the same task under the same harness and sampling; at least 2 for a GRPO advantage',
    value: '4',
    validateInput: (v) => (/^\d+$/.test(v.trim()) && Number(v) >= 2 ? undefined : 'A whole number, 2 or more'),
  });
  if (size === undefined) return undefined;
  const backendPick = await vscode.window.showQuickPick(
    [
      { label: 'docker', description: 'local Docker sandboxes, many at once' },
      { label: 'k8s', description: 'one Kubernetes Job per rollout, in a context of your kubeconfig' },
    ],
    { title: `${title} (4/4): backend` },
  );
  if (!backendPick) return undefined;
  const backend = backendPick.label as 'docker' | 'k8s';
  let kubeContext: string | undefined;
  if (backend === 'k8s') {
    const kube = await readKubeContexts();
    const picked = await vscode.window.showQuickPick(
      kube.contexts.map((c) => ({ label: c.name, description: [c.cluster, c.namespace ? `namespace ${c.namespace}` : '', c.name === kube.current ? 'current' : ''].filter(Boolean).join(' · ') })),
      { title: `${title}: kube context`, placeHolder: `Contexts in ${kube.files.join(', ')}` },
    );
    if (!picked) return undefined;
    kubeContext = picked.label;
  }
  let engineUrl: string | null = null;
  const configured = ctx.engineUrl();
  if (configured) {
    const picked = await vscode.window.showQuickPick(
      [
        { label: configured, description: 'harnessLab.engineUrl', url: configured },
        { label: 'Embedded engine', description: "answers with each task's policy.json", url: null },
      ],
      { title: `${title}: engine` },
    );
    if (!picked) return undefined;
    engineUrl = picked.url;
  }
  return { tasks, harnesses: harnessPick.map((h) => h.label), groupSize: Number(size), backend, kubeContext, engineUrl };
}

const cliPath = (ctx: BatchCommandContext) => join(ctx.context.extensionUri.fsPath, 'dist', 'cli.js');

/** Returns the batch directory once its lab has ended (finished, cancelled or failed). */
export async function submitRolloutBatch(ctx: BatchCommandContext, arg: unknown): Promise<string | undefined> {
  const folder = ctx.batchesFolder();
  if (!folder) throw new Error('Open a folder first: batches are written to its batches folder (harnessLab.batchesFolder).');
  const ask = await askBatch(ctx, arg);
  if (!ask) return undefined;
  const plan = await planAndWriteBatch({ ...ask, folder, model: ctx.engineUrl() && ask.engineUrl ? ctx.model() || undefined : undefined });
  const m = plan.manifest;
  const dir = plan.dir;
  ctx.log.info(`batch ${m.batch_id}: ${m.tasks.length} task(s) x ${m.harnesses.length} harness(es) x ${m.group_size} = ${plan.states.length} rollouts on ${m.backend}, ${m.parallel} at a time; ${dir}`);
  ctx.refreshBatches();
  const cliJs = cliPath(ctx);
  return vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title: `Harness Lab: batch ${m.batch_id}`, cancellable: true }, async (progress, token) => {
    const lab = startBatchLab({ cliJs, dir, cwd: vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? folder, onLine: (l) => ctx.log.info(`[batch ${m.batch_id}] ${l}`) });
    let cancelling: Promise<unknown> | undefined;
    const sub = token.onCancellationRequested(() => {
      progress.report({ message: 'cancelling: stopping its sandboxes' });
      // The runner's cancel path (`batch cancel`): cancel.json, then it waits for the lab to stop its rollouts and exit.
      cancelling = startBatchLab({ cliJs, dir, cwd: folder, sub: 'cancel', onLine: (l) => ctx.log.info(`[batch ${m.batch_id}] ${l}`) }).exited;
    });
    let last = 0;
    let exitCode: number | null | undefined;
    void lab.exited.then((c) => (exitCode = c));
    try {
      while (exitCode === undefined) {
        await new Promise((r) => setTimeout(r, 1000));
        try {
          const st = batchStatus(dir);
          const finished = st.counts.done + st.counts.discarded;
          if (!token.isCancellationRequested) progress.report({ message: `${finished}/${st.counts.total} finished, ${st.counts.running} running${Object.keys(st.classes).length ? ` · ${Object.entries(st.classes).map(([k, v]) => `${k} ${v}`).join(', ')}` : ''}`, increment: ((finished - last) / st.counts.total) * 100 });
          last = finished;
        } catch (err) {
          ctx.log.warn(`batch ${dir}: ${String(err)}`);
        }
        ctx.refreshBatches();
      }
      await cancelling;
    } finally {
      sub.dispose();
      ctx.refreshBatches();
    }
    const st = batchStatus(dir);
    const summary = `${st.counts.done} done, ${st.counts.discarded} discarded of ${st.counts.total}`;
    if (exitCode === 0) void vscode.window.showInformationMessage(`Harness Lab: batch ${m.batch_id} finished: ${summary}.`);
    else if (token.isCancellationRequested || exitCode === 1) void vscode.window.showWarningMessage(`Harness Lab: batch ${m.batch_id} cancelled (${summary}); \`harness-lab batch resume ${dir}\` continues it.`);
    else throw new Error(`the lab of batch ${m.batch_id} exited with ${exitCode ?? 'an error'}: ${lab.output().trim().split('\n').slice(-3).join(' ')}`);
    return dir;
  });
}

/** Cancel Batch on a running batch of the view (started here or from the CLI). */
export async function cancelBatchCommand(ctx: BatchCommandContext, arg: unknown): Promise<void> {
  const dir = (arg as BatchesTreeNode | undefined)?.dir;
  if (!dir) throw new Error('Cancel Batch needs a batch from the Batches view.');
  await vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title: `Harness Lab: cancelling ${dir}` }, async () => {
    const lines: string[] = [];
    const lab = startBatchLab({ cliJs: cliPath(ctx), dir, cwd: dirname(dir), sub: 'cancel', onLine: (l) => (lines.push(l), ctx.log.info(`[cancel] ${l}`)) });
    const code = await lab.exited;
    ctx.refreshBatches();
    if (code !== 0) throw new Error(`batch cancel ${dir} failed: ${lab.output().trim().split('\n').slice(-2).join(' ')}`);
    void vscode.window.showInformationMessage(`Harness Lab: ${lines[lines.length - 1] ?? 'batch cancelled'}`);
  });
}

/** A batch rollout's captured session (`<batch>/capture/sessions/<id>.jsonl`) in the rollout viewer. */
export async function openBatchRollout(arg: unknown): Promise<string | undefined> {
  const node = arg as BatchRolloutNode | undefined;
  if (!node || node.kind !== 'rollout') throw new Error('Open in Rollout Viewer needs a rollout from the Batches view.');
  if (!node.sessionFile) throw new Error(`Rollout ${node.rollout.id} has not started yet: it has no captured session.`);
  await vscode.commands.executeCommand('vscode.openWith', vscode.Uri.file(node.sessionFile), 'harnessLab.rolloutLines');
  return node.sessionFile;
}
