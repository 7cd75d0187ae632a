// Training runs in the editor: the Training Runs tree (listRuns from src/cluster, the same code the
// CLI runs, plus the pods' waiting reasons), ages that tick while the view is visible, Start Training
// Run... (trainer, a config the schema accepts, kube context; the object kind and GPUs said at
// submit), each started run followed by one RunWatch (status bar item while any is active), its log
// streamed into an output channel (or why there is none yet), and its curves in a webview. Start and
// Cancel go through training-runs-actions.ts (src/training/run-lifecycle.ts, as `train submit` and
// `train cancel`): a config with `data.serve` deploys the run's rollout server first, shown under the
// run with its health and progress, and Cancel removes both.
import { Writable } from 'node:stream';
import * as vscode from 'vscode';
import { loadCluster, type Cluster } from '../cluster/kube.js';
import { missingKubeconfig } from '../cluster/kubeconfig-files.js';
import { streamServerLog } from '../training/rollout-server.js';
import type { ServerStatus } from '../training/run-lifecycle.js';
import {
  listRunRecords,
  listRuns,
  loadTrainConfig,
  RunWatch,
  streamRunLogs,
  TERMINAL,
  TRAINERS,
  type RunKind,
  type RunPhase,
  type RunSummary,
  type TrainConfig,
  type Trainer,
} from '../training/trainer-jobs.js';
import { cancelFromEditor, serverStatuses, startFromEditor } from './training-runs-actions.js';
import { listRunPods, podWaiting, readRunLog, shownPhase, type PodWaiting } from '../training/trainer-pods.js';
import { parseMetrics } from '../training/metrics.js';
import { findLocalExports } from './export-batch-model.js';
import { readKubeContexts } from './kube-contexts.js';
import { Disposable, toDisposable } from './lifecycle.js';
import type { Logger } from './logger.js';
import { TrainingCurvesPanel } from './training-curves-panel.js';
import type { ShownRun } from './training-curves-page.js';
import {
  configSummary,
  describeData,
  errorNode,
  noLogsYet,
  runNodes,
  statusText,
  trainingConfigs,
  type TrainingRunNode,
  type TrainingRunsNode,
} from './training-runs-model.js';

/** How often ages re-render while the view is visible, and how old the cluster's list may get before it is read again. */
const TICK_MS = 5_000;
const LIST_MAX_AGE_MS = 15_000;

interface Listed {
  at: number;
  runs: RunSummary[];
  where: { context: string; namespace: string };
  waiting: Map<string, PodWaiting | null>;
  data: Map<string, string>;
  /** The rollout server of each run that deployed one. */
  servers: Map<string, ServerStatus>;
}

interface Followed {
  name: string;
  kind: RunKind;
  phase: RunPhase;
  watch: RunWatch;
}

export class TrainingRuns extends Disposable implements vscode.TreeDataProvider<TrainingRunsNode> {
  private readonly changeEmitter = this._register(new vscode.EventEmitter<TrainingRunsNode | undefined>());
  readonly onDidChangeTreeData = this.changeEmitter.event;
  readonly treeView: vscode.TreeView<TrainingRunsNode>;
  private readonly status: vscode.StatusBarItem;
  private readonly output: vscode.OutputChannel;
  private readonly followed = new Map<string, Followed>();
  private readonly logStreams = new Map<string, AbortController>();
  /** The kube context the view lists (the last one a run was started in; else the kubeconfig's current). */
  private context: string | undefined;
  private listed: Listed | undefined;
  /** The one Training Curves panel: runs from the cluster, and metrics files (curves-file-command.ts). */
  readonly curves = this._register(new TrainingCurvesPanel());

  constructor(
    private readonly log: Logger,
    private readonly batchFolders: () => string[] = () => [],
  ) {
    super();
    this.treeView = this._register(
      vscode.window.createTreeView('harnessLab.trainingRuns', { treeDataProvider: this, canSelectMany: true }),
    );
    this.status = this._register(vscode.window.createStatusBarItem('harnessLab.trainingRun', vscode.StatusBarAlignment.Left, 49));
    this.status.name = 'Harness Lab Training Run';
    this.status.command = 'harnessLab.showTrainingRunLogs';
    this.output = this._register(vscode.window.createOutputChannel('Harness Lab Training Runs'));
    this._register(
      toDisposable(() => {
        for (const f of this.followed.values()) f.watch.stop();
        for (const a of this.logStreams.values()) a.abort();
      }),
    );
    // Ages tick (and the list is read again now and then) while the view shows an unfinished run.
    // The list is read in the background and swapped in whole: the tree re-renders only from data in
    // hand, so a row's handle is never without its run while the cluster answers (an inline Cancel
    // clicked then got no run).
    const tick = setInterval(() => {
      if (!this.treeView.visible || !this.listed?.runs.some((r) => !TERMINAL.has(r.phase))) return;
      if (Date.now() - this.listed.at > LIST_MAX_AGE_MS) void this.relist();
      else this.changeEmitter.fire(undefined);
    }, TICK_MS);
    this._register(toDisposable(() => clearInterval(tick)));
  }

  /** Reads the cluster again. */
  refresh(): void {
    if (this.listed) void this.relist();
    else this.changeEmitter.fire(undefined);
  }

  /** One listing at a time, in the background; the view re-renders once it is in hand. */
  private relisting: Promise<void> | undefined;
  private relist(): Promise<void> {
    this.relisting ??= this.list()
      .then(
        (l) => void (this.listed = l),
        // Listed again by the view, which then shows the error as its row.
        () => void (this.listed = undefined),
      )
      .finally(() => {
        this.relisting = undefined;
        this.changeEmitter.fire(undefined);
      });
    return this.relisting;
  }

  /** The runs, why each waits, what each trains on and its rollout server, as the cluster says now. */
  private async list(): Promise<Listed> {
    const cluster = this.cluster();
    const runs = await listRuns(cluster);
    // The pods say why a run waits; a cluster that will not list them leaves the phases as they are.
    const pods = await listRunPods(cluster).catch((err: unknown) => (this.log.warn(`training runs: ${(err as Error).message}`), new Map()));
    const waiting = new Map(runs.map((r) => [r.name, podWaiting(pods.get(r.name) ?? [])] as const));
    const servers = await serverStatuses(cluster, runs, listRunRecords(), (line) => this.log.warn(`training runs: ${line}`));
    return {
      at: Date.now(),
      runs,
      where: { context: cluster.context, namespace: cluster.namespace },
      waiting,
      data: this.dataSources(),
      servers,
    };
  }

  private cluster(context = this.context): Cluster {
    return loadCluster({ context: context ?? null });
  }

  async getChildren(node?: TrainingRunsNode): Promise<TrainingRunsNode[]> {
    if (node) return node.kind === 'run' && node.server ? [node.server] : [];
    try {
      // No kubeconfig (or one without contexts) is a machine without a cluster yet, not an error: the
      // empty view shows its welcome text, which says where the kubeconfig is read and how to start.
      if (missingKubeconfig()) return [];
      // The first look (and a view that could not list before) reads the cluster now.
      this.listed ??= await this.list();
      const l = this.listed;
      this.updateStatus();
      return runNodes(l.runs, Date.now(), l.where, l.waiting, l.data, l.servers);
    } catch (err) {
      return [errorNode((err as Error).message)];
    }
  }

  getTreeItem(node: TrainingRunsNode): vscode.TreeItem {
    const item = new vscode.TreeItem(
      node.label,
      node.kind === 'run' && node.server ? vscode.TreeItemCollapsibleState.Expanded : vscode.TreeItemCollapsibleState.None,
    );
    item.id = node.id;
    item.tooltip = node.tooltip;
    item.iconPath = new vscode.ThemeIcon(node.icon);
    if (node.kind === 'run') {
      item.description = node.description;
      item.contextValue = node.contextValue;
      item.command = { command: 'harnessLab.showTrainingRunLogs', title: 'Show Logs', arguments: [node] };
    }
    if (node.kind === 'server') {
      item.description = node.description;
      // Not harnessLab.trainingRun*: the run's actions (Cancel, Curves) are the run's, not its server's.
      item.contextValue = 'harnessLab.rolloutServer';
      item.command = { command: 'harnessLab.showTrainingRunLogs', title: 'Show Rollout Server Log', arguments: [node] };
    }
    return item;
  }

  async start(): Promise<string | undefined> {
    const trainer = await vscode.window.showQuickPick(
      TRAINERS.map((t) => ({ label: t, description: t === 'verl' ? 'veRL as a KubeRay RayJob' : 'TRL as a Kubeflow Trainer TrainJob' })),
      { title: 'Start Training Run (1/3): trainer', placeHolder: 'Which trainer runs on the cluster' },
    );
    if (!trainer) return undefined;
    const files = await vscode.workspace.findFiles(
      '**/*.{yaml,yml,json}',
      '{**/node_modules/**,**/.git/**,**/dist/**,**/harness-lab-batches/**}',
      500,
    );
    const rel = (u: vscode.Uri) => vscode.workspace.asRelativePath(u);
    const configs = trainingConfigs(files.map((u) => ({ uri: u, path: u.fsPath, rel: rel(u) })));
    if (!configs.length)
      throw new Error(
        `No trainer config in the workspace (${files.length} YAML/JSON file(s) checked; a config has image, command and data: docs/training-runs.md, shipped with the extension).`,
      );
    const config = await vscode.window.showQuickPick(
      configs.map((c) => ({ label: c.rel, description: configSummary(c.config), uri: c.uri })),
      {
        title: 'Start Training Run (2/3): trainer config',
        placeHolder: `Trainer configs (${configs.length} of ${files.length} YAML/JSON files match the config schema)`,
      },
    );
    if (!config) return undefined;
    const { contexts, current } = await readKubeContexts();
    const names = [...contexts.filter((c) => c.name === current), ...contexts.filter((c) => c.name !== current)].map((c) => c.name);
    const context = await vscode.window.showQuickPick(
      names.map((n) => ({ label: n, ...(n === current ? { description: 'current' } : {}) })),
      { title: 'Start Training Run (3/3): kube context', placeHolder: 'Where the run goes' },
    );
    if (!context) return undefined;
    const cluster = this.cluster(context.label);
    const done = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `Harness Lab: starting ${trainer.label} run` },
      (progress) =>
        startFromEditor(cluster, { trainer: trainer.label as Trainer, configFile: config.uri.fsPath }, (line) => {
          // A rollout server's images are built and pushed, then it is waited for: each step is said.
          this.log.info(`start training run: ${line}`);
          progress.report({ message: line });
        }),
    );
    const { record, why } = done.started;
    this.context = context.label;
    this.log.info(`created ${record.kind} ${record.namespace}/${record.name} in ${record.context} (${why}); ${configSummary(done.config)}`);
    void vscode.window.showInformationMessage(done.message);
    this.refresh();
    await this.follow(cluster, record.kind, record.name);
    void this.showLogs(record.name, record.kind);
    return record.name;
  }

  /** One RunWatch per started run: the tree and the status bar follow its phase until it ends. */
  private async follow(cluster: Cluster, kind: RunKind, name: string): Promise<void> {
    if (this.followed.has(name)) return;
    const f: Followed = { name, kind, phase: 'Pending', watch: new RunWatch(cluster, kind, name) };
    this.followed.set(name, f);
    f.watch.watch.onError((err) => this.log.warn(`watching training run ${name}: ${err.message}`));
    this.updateStatus();
    await f.watch.start((p) => {
      f.phase = p.phase;
      this.output.appendLine(`[harness-lab] ${kind} ${name}: ${p.phase}${p.detail ? ` (${p.detail})` : ''}`);
      this.refresh();
      if (p.deleted || TERMINAL.has(p.phase)) {
        f.watch.stop();
        this.followed.delete(name);
        void vscode.window.showInformationMessage(`Training run ${name}: ${p.deleted ? 'deleted' : p.phase}.`);
      }
      this.updateStatus();
    });
  }

  private updateStatus(): void {
    // A followed run whose pods wait is Pending (with its reason in the tree), whatever its object says.
    const text = statusText(
      [...this.followed.values()].map((f) => ({
        name: f.name,
        phase: shownPhase(f.phase, '', this.listed?.waiting.get(f.name) ?? null).phase,
      })),
    );
    if (!text) return this.status.hide();
    this.status.text = text;
    this.status.tooltip = 'Harness Lab training runs being followed; click for the log';
    this.status.show();
  }

  async showLogs(name?: string, kind?: RunKind): Promise<void> {
    const target =
      name && kind
        ? { name, kind }
        : (() => {
            const f = [...this.followed.values()][0];
            return f ? { name: f.name, kind: f.kind } : undefined;
          })();
    this.output.show(true);
    if (!target || this.logStreams.has(target.name)) return;
    const abort = new AbortController();
    this.logStreams.set(target.name, abort);
    const sink = new Writable({
      write: (chunk: Buffer, _enc, done) => {
        this.output.append(chunk.toString());
        done();
      },
    });
    this.output.appendLine(`[harness-lab] logs of ${target.kind} ${target.name}:`);
    const cluster = this.cluster();
    // Why there is no log yet (an image that cannot be pulled, a pod that cannot be scheduled), said
    // while the stream waits for a started pod, each time the reason changes.
    let said = '';
    const sayWhy = async () => {
      const waiting = await this.waitingOf(cluster, target.name);
      const line = waiting ? `${noLogsYet(target.name, waiting)}; the log follows once its container starts` : '';
      if (line && line !== said && !abort.signal.aborted) this.output.appendLine(`[harness-lab] ${line}`);
      if (line) said = line;
    };
    await sayWhy();
    const poll = setInterval(() => void sayWhy(), 3000);
    const gotPod = new Writable({
      write: (chunk: Buffer, enc, done) => {
        clearInterval(poll);
        sink.write(chunk, enc as BufferEncoding, done);
      },
    });
    try {
      const { pod } = await streamRunLogs(cluster, target.kind, target.name, gotPod, { follow: true, signal: abort.signal });
      this.output.appendLine(`[harness-lab] end of the log of pod ${pod}`);
    } catch (err) {
      const again = /has no started pod/.test((err as Error).message) ? await this.waitingOf(cluster, target.name) : null;
      this.output.appendLine(
        `[harness-lab] ${again !== null || /has no started pod/.test((err as Error).message) ? noLogsYet(target.name, again) : (err as Error).message}`,
      );
    } finally {
      clearInterval(poll);
      this.logStreams.delete(target.name);
    }
  }

  /** The log of a run's rollout server (its row in the view), streamed into the output channel. */
  async showServerLog(run: string): Promise<void> {
    this.output.show(true);
    const id = `${run}/server`;
    if (this.logStreams.has(id)) return;
    const abort = new AbortController();
    this.logStreams.set(id, abort);
    const sink = new Writable({
      write: (chunk: Buffer, _enc, done) => {
        this.output.append(chunk.toString());
        done();
      },
    });
    this.output.appendLine(`[harness-lab] logs of the rollout server of ${run}:`);
    try {
      const { pod } = await streamServerLog(this.cluster(), run, sink, true, abort.signal);
      this.output.appendLine(`[harness-lab] end of the log of pod ${pod}`);
    } catch (err) {
      this.output.appendLine(`[harness-lab] ${(err as Error).message}`);
    } finally {
      this.logStreams.delete(id);
    }
  }

  private async waitingOf(cluster: Cluster, name: string): Promise<PodWaiting | null> {
    return listRunPods(cluster).then(
      (pods) => podWaiting(pods.get(name) ?? []),
      () => null,
    );
  }

  /** What each run with a local record trains on (its config's data source), matched to local exports. */
  private dataSources(): Map<string, string> {
    const exports = findLocalExports(this.batchFolders());
    const out = new Map<string, string>();
    for (const r of listRunRecords()) {
      const config = safeConfig(r.config);
      if (config) out.set(r.name, describeData(config.data, exports).text);
    }
    return out;
  }

  /**
   * Show Training Curves: the chosen runs' scalars from their logs, overlaid in one webview. Without a
   * run from the view, the runs to show are picked (several at once).
   */
  async showCurves(node?: TrainingRunNode, selected?: readonly TrainingRunNode[]): Promise<ShownRun[]> {
    const cluster = this.cluster();
    // A selection may hold a run's rollout server row too: only the runs have curves.
    const chosen = (selected?.length ? selected : node ? [node] : []).filter((n) => n.kind === 'run');
    let runs: { name: string; kind: RunKind }[] = chosen.map((n) => ({
      name: n.name,
      kind: n.runKind,
    }));
    if (!runs.length) {
      const all = await listRuns(cluster);
      if (!all.length) throw new Error(`No training runs in ${cluster.namespace} (${cluster.context}) to draw.`);
      const picked = await vscode.window.showQuickPick(
        all.map((r) => ({ label: r.name, description: `${r.trainer} · ${r.phase}`, run: r })),
        { title: 'Show Training Curves', placeHolder: 'Runs to overlay', canPickMany: true },
      );
      if (!picked?.length) return [];
      runs = picked.map((p) => ({ name: p.run.name, kind: p.run.kind }));
    }
    const exports = findLocalExports(this.batchFolders());
    const records = new Map(listRunRecords().map((r) => [r.name, r] as const));
    const shown = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Window, title: 'Harness Lab: reading training logs' },
      () =>
        Promise.all(
          runs.map(async (r): Promise<ShownRun> => {
            const log = await readRunLog(cluster, r.kind, r.name).catch((err: unknown) => ({
              pod: null,
              text: '',
              error: (err as Error).message,
            }));
            const metrics = parseMetrics(log.text);
            const config = records.get(r.name) ? safeConfig(records.get(r.name)!.config) : undefined;
            const data = config ? describeData(config.data, exports) : null;
            let note: string | null = null;
            if ('error' in log) note = `its log could not be read: ${log.error}`;
            else if (!log.pod) note = noLogsYet(r.name, await this.waitingOf(cluster, r.name));
            else if (!metrics.lines) note = `no metric lines in the log of pod ${log.pod} yet (formats: docs/training-runs.md)`;
            return { name: r.name, metrics, data: data?.text ?? null, dataFile: data?.match?.manifest ?? null, note };
          }),
        ),
    );
    this.curves.show(shown);
    return shown;
  }

  async cancel(given: TrainingRunNode | undefined): Promise<boolean> {
    // From the palette (or a row VS Code could not hand over): the run selected in the view.
    const node = given ?? this.treeView.selection.find((n): n is TrainingRunNode => n.kind === 'run');
    if (!node) throw new Error('Cancel Training Run needs a run from the Training Runs view.');
    const server = node.server ? ` and its rollout server ${node.server.label.replace(/^rollout server /, '')}` : '';
    const ok = await vscode.window.showWarningMessage(
      `Delete ${node.runKind} ${node.namespace}/${node.name} and its pods${server}?`,
      { modal: true },
      'Delete',
    );
    if (ok !== 'Delete') return false;
    // The rollout server is given its grace period to stop its rollouts first: this can take a while.
    const { message } = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `Harness Lab: cancelling training run ${node.name}` },
      (progress) =>
        cancelFromEditor(this.cluster(), { kind: node.runKind, name: node.name }, (line) => {
          this.log.info(`cancel training run ${node.name}: ${line}`);
          progress.report({ message: line });
        }),
    );
    this.log.info(message);
    void vscode.window.showInformationMessage(message);
    this.logStreams.get(node.name)?.abort();
    this.logStreams.get(`${node.name}/server`)?.abort();
    this.refresh();
    return true;
  }
}

function safeConfig(file: string): TrainConfig | undefined {
  try {
    return loadTrainConfig(file);
  } catch {
    return undefined;
  }
}
