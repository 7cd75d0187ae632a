// Training runs in the editor: the Training Runs tree (listRuns from src/cluster, the same code the
// CLI runs), Start Training Run... (trainer, config file, kube context), each started run followed by
// one RunWatch (status bar item while any is active), its log streamed into an output channel.
import { Writable } from 'node:stream';
import * as vscode from 'vscode';
import { loadCluster, type Cluster } from '../cluster/kube.js';
import { missingKubeconfig } from '../cluster/kubeconfig-files.js';
import { cancelRun, listRuns, loadTrainConfig, RunWatch, streamRunLogs, submitRun, TERMINAL, TRAINERS, type RunKind, type RunPhase, type Trainer } from '../training/trainer-jobs.js';
import { readKubeContexts } from './kube-contexts.js';
import { Disposable, toDisposable } from './lifecycle.js';
import type { Logger } from './logger.js';
import { errorNode, runNodes, statusText, type TrainingRunNode, type TrainingRunsNode } from './training-runs-model.js';

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

  constructor(private readonly log: Logger) {
    super();
    this.treeView = this._register(vscode.window.createTreeView('harnessLab.trainingRuns', { treeDataProvider: this }));
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
  }

  refresh(): void {
    this.changeEmitter.fire(undefined);
  }

  private cluster(context = this.context): Cluster {
    return loadCluster({ context: context ?? null });
  }

  async getChildren(node?: TrainingRunsNode): Promise<TrainingRunsNode[]> {
    if (node) return [];
    let cluster: Cluster;
    try {
      // No kubeconfig (or one without contexts) is a machine without a cluster yet, not an error: the
      // empty view shows its welcome text, which says where the kubeconfig is read and how to start.
      if (missingKubeconfig()) return [];
      cluster = this.cluster();
      return runNodes(await listRuns(cluster), Date.now(), { context: cluster.context, namespace: cluster.namespace });
    } catch (err) {
      return [errorNode((err as Error).message)];
    }
  }

  getTreeItem(node: TrainingRunsNode): vscode.TreeItem {
    const item = new vscode.TreeItem(node.label, vscode.TreeItemCollapsibleState.None);
    item.id = node.id;
    item.tooltip = node.tooltip;
    item.iconPath = new vscode.ThemeIcon(node.icon);
    if (node.kind === 'run') {
      item.description = node.description;
      item.contextValue = node.contextValue;
      item.command = { command: 'harnessLab.showTrainingRunLogs', title: 'Show Logs', arguments: [node] };
    }
    return item;
  }

  async start(): Promise<string | undefined> {
    const trainer = await vscode.window.showQuickPick(
      TRAINERS.map((t) => ({ label: t, description: t === 'verl' ? 'veRL as a KubeRay RayJob' : 'TRL as a Kubeflow Trainer TrainJob' })),
      { title: 'Start Training Run (1/3): trainer', placeHolder: 'Which trainer runs on the cluster' },
    );
    if (!trainer) return undefined;
    const files = await vscode.workspace.findFiles('**/*.{yaml,yml,json}', '{**/node_modules/**,**/.git/**,**/dist/**}', 500);
    if (!files.length) throw new Error('No trainer config (.yaml, .yml or .json) in the workspace; see docs/training-runs.md for the fields.');
    const rel = (u: vscode.Uri) => vscode.workspace.asRelativePath(u);
    const sorted = files.sort((a, b) => Number(!/train/i.test(rel(a))) - Number(!/train/i.test(rel(b))) || rel(a).localeCompare(rel(b)));
    const config = await vscode.window.showQuickPick(
      sorted.map((u) => ({ label: rel(u), uri: u })),
      { title: 'Start Training Run (2/3): trainer config', placeHolder: 'The config: image, command, GPUs, data source' },
    );
    if (!config) return undefined;
    const { contexts, current } = await readKubeContexts();
    const names = [...contexts.filter((c) => c.name === current), ...contexts.filter((c) => c.name !== current)].map((c) => c.name);
    const context = await vscode.window.showQuickPick(
      names.map((n) => ({ label: n, ...(n === current ? { description: 'current' } : {}) })),
      { title: 'Start Training Run (3/3): kube context', placeHolder: 'Where the run goes' },
    );
    if (!context) return undefined;
    const parsed = loadTrainConfig(config.uri.fsPath);
    const cluster = this.cluster(context.label);
    const { record, why } = await vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title: `Harness Lab: submitting ${trainer.label} run` }, () =>
      submitRun(cluster, { trainer: trainer.label as Trainer, config: parsed, configFile: config.uri.fsPath, operator: 'auto' }),
    );
    this.context = context.label;
    this.log.info(`created ${record.kind} ${record.namespace}/${record.name} in ${record.context} (${why})`);
    void vscode.window.showInformationMessage(`Training run ${record.name} created as ${record.kind} in ${record.namespace} (${record.context}).`);
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
    const text = statusText([...this.followed.values()]);
    if (!text) return this.status.hide();
    this.status.text = text;
    this.status.tooltip = 'Harness Lab training runs being followed; click for the log';
    this.status.show();
  }

  async showLogs(name?: string, kind?: RunKind): Promise<void> {
    const target = name && kind ? { name, kind } : (() => {
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
    try {
      const { pod } = await streamRunLogs(this.cluster(), target.kind, target.name, sink, { follow: true, signal: abort.signal });
      this.output.appendLine(`[harness-lab] end of the log of pod ${pod}`);
    } catch (err) {
      this.output.appendLine(`[harness-lab] ${(err as Error).message}`);
    } finally {
      this.logStreams.delete(target.name);
    }
  }

  async cancel(node: TrainingRunNode | undefined): Promise<boolean> {
    if (!node) throw new Error('Cancel Training Run needs a run from the Training Runs view.');
    const ok = await vscode.window.showWarningMessage(`Delete ${node.runKind} ${node.namespace}/${node.name} and its pods?`, { modal: true }, 'Delete');
    if (ok !== 'Delete') return false;
    const r = await cancelRun(this.cluster(), node.runKind, node.name);
    this.log.info(`training run ${node.name}: ${r}`);
    this.logStreams.get(node.name)?.abort();
    this.refresh();
    return true;
  }
}
