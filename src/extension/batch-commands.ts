// The handlers of "Harness Lab: Submit Rollout Batch...", the Batches view's Cancel Batch and a
// rollout's "Open in Rollout Viewer": quick picks and progress here, the work in batch-submit.ts and
// src/batch/ (plan, runner via the bundled CLI, cancel). commands.ts registers them.
import { dirname, join } from 'node:path';
import * as vscode from 'vscode';
import { batchStatus } from '../batch/status.js';
import { harnessHint, harnessNames } from '../harness/registry.js';
import { batchDirs, readBatchNode, type BatchesTreeNode, type BatchNode, type BatchRolloutNode } from './batches-model.js';
import { planAndWriteBatch, planOnly, startBatchLab, type SubmitRequest } from './batch-submit.js';
import {
  clusterEngineUrlProblem,
  contextNamespace,
  engineChoices,
  enginePick,
  type EnginePickRow,
  enteredClusterEngine,
  enteredEnginePrompt,
  failureReason,
  labOutcome,
  listEngineModels,
  noEngineMessage,
  probeEnteredEngine,
  resolveBatchModel,
  type EngineChoice,
} from './batch-wizard.js';
import { runBundledCli } from './bundled-cli.js';
import {
  BATCH_EXPORT_FORMATS,
  defaultExportFile,
  exportArgs,
  exportSummary,
  readExportManifest,
  type BatchExportFormat,
} from './export-batch-model.js';
import { readKubeContexts } from './kube-contexts.js';
import type { Logger } from './logger.js';
import { NotConfiguredError } from './not-configured.js';
import { SETTINGS_SECTION, type HarnessLabSettings } from './settings.js';
import { sortTasks, taskNode } from './tasks-model.js';

export interface BatchCommandContext {
  context: vscode.ExtensionContext;
  log: Logger;
  /** The folder new batches go to (the Batches view reads it); undefined without a workspace. */
  batchesFolder(): string | undefined;
  /** Every batches folder the Batches view reads (one per workspace folder). */
  batchFolders(): string[];
  settings(): Pick<HarnessLabSettings, 'engineUrl' | 'model' | 'clusterEngineUrl' | 'clusterRegistry' | 'keepClusterObjects'>;
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
    const picked = await vscode.window.showQuickPick(
      all.map((t) => ({ ...t, picked: all.length === 1 })),
      {
        title: `${title} (1/4): tasks`,
        placeHolder: 'Tasks to run; each gets a group of rollouts per harness',
        canPickMany: true,
        matchOnDescription: true,
      },
    );
    if (!picked?.length) return undefined;
    tasks = picked.map((p) => p.folder);
  }
  const harnessPick = await vscode.window.showQuickPick(
    harnessNames().map((name) => ({ label: name, description: harnessHint(name) })),
    { title: `${title} (2/4): harnesses`, placeHolder: 'Harnesses; every group keeps all its members on one harness', canPickMany: true },
  );
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
  let kube: { context: string; namespace: string } | undefined;
  if (backend === 'k8s') {
    const found = await readKubeContexts();
    const ordered = [...found.contexts.filter((c) => c.name === found.current), ...found.contexts.filter((c) => c.name !== found.current)];
    const picked = await vscode.window.showQuickPick(
      ordered.map((c) => ({
        label: c.name,
        description: [c.cluster, `namespace ${c.namespace ?? 'default'}`, c.name === found.current ? 'current' : '']
          .filter(Boolean)
          .join(' · '),
      })),
      { title: `${title}: kube context`, placeHolder: `Contexts in ${found.files.join(', ')}; the batch goes to the context's namespace` },
    );
    if (!picked) return undefined;
    kube = { context: picked.label, namespace: contextNamespace(found.contexts, picked.label) };
  }
  const settings = ctx.settings();
  const { choices, refused } = engineChoices(backend, settings);
  for (const r of refused) ctx.log.info(`Submit Rollout Batch: not offering ${r.label} for a ${backend} batch: ${r.why}`);
  // A k8s batch can always be given the engine's URL as the cluster reaches it: no dead end when no setting names one.
  const pick = enginePick(backend, choices, refused);
  if (!pick.rows.some((r) => r.kind === 'choice' || r.kind === 'enter'))
    throw new NotConfiguredError(noEngineMessage(backend, refused), {
      title: 'Open Settings',
      command: 'workbench.action.openSettings',
      args: ['harnessLab.engineURL'],
    });
  let engine = choices[0];
  let entered = false;
  if (pick.show) {
    const items: (vscode.QuickPickItem & { row?: EnginePickRow })[] = pick.rows.map((r) =>
      r.kind === 'separator'
        ? { label: r.label, kind: vscode.QuickPickItemKind.Separator }
        : { label: r.label, description: r.description, ...(r.kind === 'enter' ? { detail: r.detail } : {}), row: r },
    );
    const picked = await vscode.window.showQuickPick(items, { title: `${title}: engine`, placeHolder: pick.placeHolder });
    if (!picked) return undefined;
    if (picked.row?.kind === 'enter') {
      engine = await askClusterEngineUrl(settings);
      if (!engine) return undefined;
      entered = true;
    } else if (picked.row?.kind === 'choice') engine = picked.row.choice;
    else throw new Error(`${picked.label.replace('$(circle-slash) ', '')} cannot serve a ${backend} batch: ${picked.description ?? ''}`);
  }
  if (!engine) return undefined;
  return { tasks, harnesses: harnessPick.map((h) => h.label), groupSize: Number(size), backend, kube, engine, entered };
}

/**
 * The entry's input box: the URL is judged as typed (a URL, not loopback) and probed on Enter (GET
 * /v1/models where this machine reaches the engine); an engine that does not answer keeps the box open
 * with the reason. Undefined: the user backed out.
 */
async function askClusterEngineUrl(settings: { engineUrl: string; clusterEngineUrl: string }): Promise<EngineChoice | undefined> {
  const box = vscode.window.createInputBox();
  box.title = 'Submit Rollout Batch: engine URL as the cluster reaches it';
  box.placeholder = 'http://vllm.ml.svc:8000/v1';
  box.value = settings.clusterEngineUrl;
  box.prompt = enteredEnginePrompt(box.value, settings);
  box.validationMessage = box.value ? clusterEngineUrlProblem(box.value) : undefined;
  box.ignoreFocusOut = true;
  return new Promise<EngineChoice | undefined>((resolve) => {
    let probing: AbortController | undefined;
    let done = false;
    const finish = (v: EngineChoice | undefined) => {
      if (done) return;
      done = true;
      probing?.abort();
      resolve(v);
      box.dispose();
    };
    box.onDidChangeValue((v) => {
      probing?.abort();
      box.busy = false;
      box.prompt = enteredEnginePrompt(v, settings);
      box.validationMessage = v.trim() ? clusterEngineUrlProblem(v) : undefined;
    });
    box.onDidAccept(async () => {
      const problem = clusterEngineUrlProblem(box.value);
      if (problem) {
        box.validationMessage = problem;
        return;
      }
      const choice = enteredClusterEngine(box.value, settings);
      const ac = new AbortController();
      probing?.abort();
      probing = ac;
      box.busy = true;
      box.validationMessage = undefined;
      try {
        await probeEnteredEngine(choice, { signal: ac.signal });
        if (!ac.signal.aborted) finish(choice);
      } catch (err) {
        if (!ac.signal.aborted) box.validationMessage = (err as Error).message;
      } finally {
        if (probing === ac) box.busy = false;
      }
    });
    box.onDidHide(() => finish(undefined));
    box.show();
  });
}

/** After an entered URL passed the checks: offers to keep it as harnessLab.clusterEngineUrl (User settings) for later batches. */
async function offerRememberClusterEngine(ctx: BatchCommandContext, url: string): Promise<void> {
  const remember = 'Remember';
  const choice = await vscode.window.showInformationMessage(
    `Harness Lab: remember ${url} as the engine the cluster's pods reach (harnessLab.clusterEngineUrl), for later k8s batches?`,
    remember,
  );
  if (choice !== remember) return;
  await vscode.workspace.getConfiguration(SETTINGS_SECTION).update('clusterEngineUrl', url, vscode.ConfigurationTarget.Global);
  ctx.log.info(`Submit Rollout Batch: harnessLab.clusterEngineUrl is now ${url} (User settings)`);
}

type Asked = NonNullable<Awaited<ReturnType<typeof askBatch>>>;

/**
 * Everything checked before anything is written or created: the plan (tasks, harnesses), the
 * engine (reachable, its model), and for k8s the cluster (reachable, permissions in the namespace)
 * and Docker (the task images are built here). Returns the model, or undefined when the user backed out.
 */
async function checkBatch(
  ctx: BatchCommandContext,
  ask: Asked,
  folder: string,
  token: vscode.CancellationToken,
  progress: (m: string) => void,
): Promise<{ model: string | undefined; request: SubmitRequest } | undefined> {
  const settings = ctx.settings();
  const abort = new AbortController();
  const sub = token.onCancellationRequested(() => abort.abort());
  try {
    const request: SubmitRequest = {
      tasks: ask.tasks,
      harnesses: ask.harnesses,
      groupSize: ask.groupSize,
      backend: ask.backend,
      folder,
      engineUrl: ask.engine.url,
      ...(ask.kube ? { kubeContext: ask.kube.context, namespace: ask.kube.namespace } : {}),
      ...(settings.clusterRegistry && ask.backend === 'k8s' ? { registry: settings.clusterRegistry } : {}),
    };
    progress('tasks and harnesses');
    planOnly(request);
    let model: string | undefined;
    if (ask.engine.url) {
      const url = ask.engine.url;
      if (ask.engine.checkUrl) {
        progress(`engine ${ask.engine.checkUrl}`);
        const served = await listEngineModels(ask.engine.checkUrl, { signal: abort.signal });
        model = await resolveBatchModel(
          settings.model,
          served,
          ask.engine.checkUrl,
          async (models) =>
            (await vscode.window.showQuickPick(models, {
              title: 'Submit Rollout Batch: model',
              placeHolder: `The engine serves ${models.length} models; the batch asks for one`,
            })) ?? undefined,
        );
        if (!model) return undefined;
      } else {
        // Cluster-internal only (a Service name): nothing on this machine reaches it to list its models.
        model =
          settings.model ||
          (
            await vscode.window.showInputBox({
              title: 'Submit Rollout Batch: model',
              prompt: `${url} resolves only inside the cluster, so its models cannot be listed from here: the model name it serves`,
              validateInput: (v) => (v.trim() ? undefined : 'The model name the engine serves'),
            })
          )?.trim();
        if (!model) return undefined;
      }
      ctx.log.info(`Submit Rollout Batch: engine ${url}, model ${model}`);
    }
    if (ask.backend === 'k8s' && ask.kube) {
      progress(`cluster ${ask.kube.context}, namespace ${ask.kube.namespace}`);
      const { k8sBackendModule } = await import('../batch/backends/k8s/index.js');
      await k8sBackendModule.preflight!({
        context: ask.kube.context,
        namespace: ask.kube.namespace,
        registry: settings.clusterRegistry || null,
        queue_name: null,
      });
      progress('Docker (task images are built here)');
      const { connectDocker } = await import('../sandbox/docker-client.js');
      await (await connectDocker()).ping().catch((err: unknown) => {
        throw new Error(
          `Docker is not reachable on this machine (${(err as Error).message}); a k8s batch builds its task images ` +
            `here${settings.clusterRegistry ? ` and pushes them to ${settings.clusterRegistry}` : ''}`,
        );
      });
      if (!settings.clusterRegistry)
        ctx.log.info(
          'Submit Rollout Batch: no harnessLab.clusterRegistry: the cluster must already have the task images and the proxy image (kind load, the test double)',
        );
    }
    return { model, request: { ...request, ...(model ? { model } : {}) } };
  } finally {
    sub.dispose();
  }
}

const cliPath = (ctx: BatchCommandContext) => join(ctx.context.extensionUri.fsPath, 'dist', 'cli.js');

/** Returns the batch directory once its lab has ended (finished, cancelled or failed). */
export async function submitRolloutBatch(ctx: BatchCommandContext, arg: unknown): Promise<string | undefined> {
  const folder = ctx.batchesFolder();
  if (!folder) throw new Error('Open a folder first: batches are written to its batches folder (harnessLab.batchesFolder).');
  const ask = await askBatch(ctx, arg);
  if (!ask) return undefined;
  const checked = await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: 'Harness Lab: checking the batch', cancellable: true },
    (progress, token) => checkBatch(ctx, ask, folder, token, (m) => progress.report({ message: m })),
  );
  if (!checked) return undefined;
  if (ask.entered && ask.engine.url && ask.engine.url !== ctx.settings().clusterEngineUrl)
    void offerRememberClusterEngine(ctx, ask.engine.url).catch((err: unknown) =>
      ctx.log.warn(`remembering the engine URL: ${String(err)}`),
    );
  const plan = await planAndWriteBatch(checked.request);
  const m = plan.manifest;
  const dir = plan.dir;
  ctx.log.info(
    `batch ${m.batch_id}: ${m.tasks.length} task(s) x ${m.harnesses.length} harness(es) x ${m.group_size} = ${plan.states.length} rollouts on ${m.backend}, ${m.parallel} at a time; ${dir}`,
  );
  ctx.refreshBatches();
  return runLab(ctx, dir, m.batch_id);
}

/**
 * Runs the batch's lab (`batch resume DIR`, the same runner `batch submit` uses) with progress and
 * Cancel, then says how it ended: finished, cancelled (only when someone asked), or failed with its
 * reason and Show Log. Returns the batch directory.
 */
async function runLab(ctx: BatchCommandContext, dir: string, batchId: string): Promise<string> {
  const cliJs = cliPath(ctx);
  const cwd = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? dirname(dir);
  return vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: `Harness Lab: batch ${batchId}`, cancellable: true },
    async (progress, token) => {
      const keep = ctx.settings().keepClusterObjects;
      const lab = startBatchLab({ cliJs, dir, cwd, keep, onLine: (l) => ctx.log.info(`[batch ${batchId}] ${l}`) });
      let cancelling: Promise<unknown> | undefined;
      const sub = token.onCancellationRequested(() => {
        progress.report({ message: 'cancelling: stopping its sandboxes' });
        // The runner's cancel path (`batch cancel`): cancel.json, then it waits for the lab to stop its rollouts and exit.
        cancelling = startBatchLab({ cliJs, dir, cwd, sub: 'cancel', onLine: (l) => ctx.log.info(`[batch ${batchId}] ${l}`) }).exited;
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
            if (!token.isCancellationRequested)
              progress.report({
                message: `${finished}/${st.counts.total} finished, ${st.counts.running} running${
                  Object.keys(st.classes).length
                    ? ` · ${Object.entries(st.classes)
                        .map(([k, v]) => `${k} ${v}`)
                        .join(', ')}`
                    : ''
                }`,
                increment: ((finished - last) / st.counts.total) * 100,
              });
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
      const cancelAsked = token.isCancellationRequested || safeLab(dir) === 'cancelled';
      void reportLabEnd(ctx, batchId, dir, exitCode ?? null, cancelAsked, lab.output());
      return dir;
    },
  );
}

function safeLab(dir: string): string | undefined {
  try {
    return batchStatus(dir).lab;
  } catch {
    return undefined;
  }
}

/** The toast at a lab's end. A failure names its reason and offers Show Log; never "cancelled" unless asked. */
async function reportLabEnd(
  ctx: BatchCommandContext,
  batchId: string,
  dir: string,
  exitCode: number | null,
  cancelAsked: boolean,
  output: string,
): Promise<void> {
  const outcome = labOutcome(exitCode, cancelAsked, output);
  let summary = '';
  try {
    const st = batchStatus(dir);
    summary = `${st.counts.done} done, ${st.counts.discarded} discarded of ${st.counts.total}`;
  } catch (err) {
    summary = `its state cannot be read: ${(err as Error).message}`;
  }
  if (outcome.kind === 'finished') {
    void vscode.window.showInformationMessage(`Harness Lab: batch ${batchId} finished: ${summary}.`);
    return;
  }
  const showLog = 'Show Log';
  const resume = 'Resume Batch';
  let choice: string | undefined;
  if (outcome.kind === 'cancelled')
    choice = await vscode.window.showWarningMessage(
      `Harness Lab: batch ${batchId} cancelled (${summary}); Resume Batch (in the Batches view's menu) continues it.`,
      resume,
      showLog,
    );
  else {
    ctx.log.error(
      `batch ${batchId} failed (lab exit ${exitCode ?? 'none'}): ${outcome.reason}\n${output.trim().split('\n').slice(-20).join('\n')}`,
    );
    choice = await vscode.window.showErrorMessage(`Harness Lab: batch ${batchId} failed: ${outcome.reason} (${summary}).`, showLog, resume);
  }
  if (choice === showLog) ctx.log.show();
  else if (choice === resume) await vscode.commands.executeCommand('harnessLab.resumeBatch', { dir });
}

/** Resume Batch: runs an idle, interrupted, cancelled or failed batch's queued rollouts to the end. */
export async function resumeBatchCommand(ctx: BatchCommandContext, arg: unknown): Promise<string | undefined> {
  const dir = (arg as { dir?: unknown } | undefined)?.dir;
  const target = typeof dir === 'string' ? dir : await pickBatch(ctx, 'Batch to resume', (lab) => lab !== 'running' && lab !== 'finished');
  if (!target) return undefined;
  const st = batchStatus(target);
  if (st.lab === 'running') throw new Error(`batch ${st.batch_id} is already running (lab pid ${st.lab_pid}).`);
  if (st.lab === 'finished') throw new Error(`batch ${st.batch_id} has finished: every rollout is done or discarded; nothing to resume.`);
  ctx.log.info(`resuming batch ${st.batch_id}: ${st.counts.queued + st.counts.running} rollout(s) to run; ${target}`);
  return runLab(ctx, target, st.batch_id);
}

/** A batch of the workspace's batches folders, picked (newest first); `keep` filters by lab state. */
export async function pickBatch(
  ctx: Pick<BatchCommandContext, 'batchFolders'>,
  title: string,
  keep: (lab: string) => boolean = () => true,
): Promise<string | undefined> {
  const nodes = ctx
    .batchFolders()
    .flatMap((f) => batchDirs(f))
    .map(readBatchNode)
    .filter((n): n is BatchNode => n.kind === 'batch' && keep(n.status.lab));
  if (!nodes.length) throw new Error(`No batch to choose from in ${ctx.batchFolders().join(', ') || 'this workspace (open a folder)'}.`);
  nodes.sort((a, b) => b.status.created_at.localeCompare(a.status.created_at));
  const picked = await vscode.window.showQuickPick(
    nodes.map((n) => ({ label: n.label, description: n.description, dir: n.dir })),
    { title },
  );
  return picked?.dir;
}

/** Tear Down Batch: removes what a batch left on its backend (a k8s batch's proxy, Secret, ConfigMaps, Jobs). */
export async function teardownBatchCommand(ctx: BatchCommandContext, arg: unknown): Promise<string | undefined> {
  const dir = (arg as { dir?: unknown } | undefined)?.dir;
  const target = typeof dir === 'string' ? dir : await pickBatch(ctx, 'Batch to tear down', (lab) => lab !== 'running');
  if (!target) return undefined;
  const lines: string[] = [];
  const lab = startBatchLab({
    cliJs: cliPath(ctx),
    dir: target,
    cwd: dirname(target),
    sub: 'teardown',
    onLine: (l) => (lines.push(l), ctx.log.info(`[teardown] ${l}`)),
  });
  const code = await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: `Harness Lab: tearing down ${target}` },
    () => lab.exited,
  );
  ctx.refreshBatches();
  if (code !== 0) throw new Error(`tearing down ${target} failed: ${failureReason(lab.output(), code)}`);
  const said = lines.filter((l) => l.startsWith('tore down')).pop() ?? `tore down ${target}`;
  void vscode.window.showInformationMessage(`Harness Lab: ${said}.`);
  return said;
}

/** Delete Batch: tears it down, then removes its directory (asked first). */
export async function deleteBatchCommand(ctx: BatchCommandContext, arg: unknown, confirm = true): Promise<boolean> {
  const dir = (arg as { dir?: unknown } | undefined)?.dir;
  const target = typeof dir === 'string' ? dir : await pickBatch(ctx, 'Batch to delete', (lab) => lab !== 'running');
  if (!target) return false;
  if (confirm) {
    const ok = await vscode.window.showWarningMessage(
      `Delete batch ${target}? Its cluster objects or containers are removed, then the directory with every captured session.`,
      { modal: true },
      'Delete',
    );
    if (ok !== 'Delete') return false;
  }
  const lab = startBatchLab({
    cliJs: cliPath(ctx),
    dir: target,
    cwd: dirname(target),
    sub: 'delete',
    onLine: (l) => ctx.log.info(`[delete] ${l}`),
  });
  const code = await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: `Harness Lab: deleting ${target}` },
    () => lab.exited,
  );
  ctx.refreshBatches();
  if (code !== 0) throw new Error(`deleting ${target} failed: ${failureReason(lab.output(), code)}`);
  void vscode.window.showInformationMessage(`Harness Lab: deleted batch ${target}.`);
  return true;
}

/** Cancel Batch on a running batch of the view (started here or from the CLI). */
export async function cancelBatchCommand(ctx: BatchCommandContext, arg: unknown): Promise<void> {
  const dir = (arg as BatchesTreeNode | undefined)?.dir;
  if (!dir) throw new Error('Cancel Batch needs a batch from the Batches view.');
  await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: `Harness Lab: cancelling ${dir}` },
    async () => {
      const lines: string[] = [];
      const lab = startBatchLab({
        cliJs: cliPath(ctx),
        dir,
        cwd: dirname(dir),
        sub: 'cancel',
        onLine: (l) => (lines.push(l), ctx.log.info(`[cancel] ${l}`)),
      });
      const code = await lab.exited;
      ctx.refreshBatches();
      if (code !== 0) throw new Error(`batch cancel ${dir} failed: ${lab.output().trim().split('\n').slice(-2).join(' ')}`);
      void vscode.window.showInformationMessage(`Harness Lab: ${lines[lines.length - 1] ?? 'batch cancelled'}`);
    },
  );
}

/** A batch rollout's captured session (`<batch>/capture/sessions/<id>.jsonl`) in the rollout viewer. */
export async function openBatchRollout(arg: unknown): Promise<string | undefined> {
  const node = arg as BatchRolloutNode | undefined;
  // No node from a row's menu: VS Code had dropped the row while its parent row was re-read (see batchNode).
  if (!node || node.kind !== 'rollout')
    throw new Error(
      'Open in Rollout Viewer needs a rollout from the Batches view (its menu was used while the view re-read the row: use it again).',
    );
  if (!node.sessionFile) throw new Error(`Rollout ${node.rollout.id} has not started yet: it has no captured session.`);
  await vscode.commands.executeCommand('vscode.openWith', vscode.Uri.file(node.sessionFile), 'harnessLab.rolloutLines');
  return node.sessionFile;
}

/** Export Batch…: format, a save dialog, the bundled CLI's `export --batch`, then the kept and dropped counts. */
export async function exportBatchCommand(
  ctx: BatchCommandContext,
  arg: unknown,
  preset?: { format?: BatchExportFormat; out?: string },
): Promise<string | undefined> {
  const dir = (arg as { dir?: unknown } | undefined)?.dir;
  const target = typeof dir === 'string' ? dir : await pickBatch(ctx, 'Batch to export');
  if (!target) return undefined;
  const st = batchStatus(target);
  const fmt =
    preset?.format ??
    (
      await vscode.window.showQuickPick(
        BATCH_EXPORT_FORMATS.map((f) => ({ label: f.label, detail: f.detail, format: f.format })),
        {
          title: `Export Batch ${st.batch_id}: format`,
          placeHolder: 'Trainer input; discarded rollouts never enter an export (docs/exports.md)',
        },
      )
    )?.format;
  if (!fmt) return undefined;
  const label = BATCH_EXPORT_FORMATS.find((f) => f.format === fmt)!.label;
  const out =
    preset?.out ??
    (
      await vscode.window.showSaveDialog({
        title: `Export Batch ${st.batch_id} as ${label}`,
        defaultUri: vscode.Uri.file(defaultExportFile(target, st.batch_id, fmt)),
        filters: { 'JSON Lines': ['jsonl'] },
        saveLabel: 'Export',
      })
    )?.fsPath;
  if (!out) return undefined;
  const run = await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: `Harness Lab: exporting batch ${st.batch_id} as ${label}`, cancellable: true },
    (_p, token) => {
      const abort = new AbortController();
      token.onCancellationRequested(() => abort.abort());
      return runBundledCli(cliPath(ctx), exportArgs(target, fmt, out), {
        cwd: dirname(target),
        signal: abort.signal,
        onLine: (l) => ctx.log.info(`[export] ${l}`),
      });
    },
  );
  if (run.code !== 0) throw new Error(`exporting batch ${st.batch_id} as ${label} failed: ${failureReason(run.output, run.code)}`);
  const summary = exportSummary(readExportManifest(`${out}.manifest.json`), label);
  ctx.log.info(`exported batch ${st.batch_id} to ${out}: ${summary}`);
  void vscode.window
    .showInformationMessage(`Harness Lab: exported ${out}: ${summary}.`, 'Open File', 'Open Manifest')
    .then(async (choice) => {
      if (choice === 'Open File') await vscode.window.showTextDocument(vscode.Uri.file(out));
      else if (choice === 'Open Manifest') await vscode.window.showTextDocument(vscode.Uri.file(`${out}.manifest.json`));
    });
  return out;
}
