// Batches tree: batch -> group -> rollout, read from the batch directories under the workspace's
// batches folder (harnessLab.batchesFolder). A file watcher on that folder refreshes it as labs
// rewrite their state files (the CLI's or the editor's alike) and as calls land in the batches'
// captured sessions (a running rollout shows its calls so far, local or cluster batch alike);
// refreshes are coalesced, since a running batch writes on every change of every rollout, and only
// the rows that changed are re-rendered (ShownBatchesTree) unless batches or rollouts came or went.
// While a lab runs the view also re-reads every few seconds: a watcher may drop events under load.
import { isAbsolute, relative, sep } from 'node:path';
import * as vscode from 'vscode';
import { BatchesTreeModel, ShownBatchesTree, resolveBatchesFolder, type BatchesTreeNode } from './batches-model.js';
import { Disposable, toDisposable } from './lifecycle.js';

/** How often the view re-reads while a batch's lab runs, besides the file watcher's events. */
const RUNNING_POLL_MS = 3000;

export class BatchesView extends Disposable implements vscode.TreeDataProvider<BatchesTreeNode> {
  private readonly changeEmitter = this._register(new vscode.EventEmitter<BatchesTreeNode | BatchesTreeNode[] | undefined>());
  readonly onDidChangeTreeData = this.changeEmitter.event;
  readonly treeView: vscode.TreeView<BatchesTreeNode>;
  private readonly shown = new ShownBatchesTree(new BatchesTreeModel(() => this.folders()));
  private watchers: vscode.Disposable[] = [];
  private pending: ReturnType<typeof setTimeout> | undefined;
  private poll: ReturnType<typeof setTimeout> | undefined;

  constructor(private readonly batchesFolder: () => string) {
    super();
    this.treeView = this._register(vscode.window.createTreeView('harnessLab.batches', { treeDataProvider: this }));
    this._register(vscode.workspace.onDidChangeWorkspaceFolders(() => this.rewatch()));
    this._register(toDisposable(() => this.disposeWatchers()));
    this._register(toDisposable(() => (clearTimeout(this.pending), clearTimeout(this.poll))));
    this.rewatch();
  }

  /** Every batches folder of the workspace (one per workspace folder). */
  folders(): string[] {
    return (vscode.workspace.workspaceFolders ?? []).map((f) => resolveBatchesFolder(this.batchesFolder(), f.uri.fsPath));
  }

  /** The folder a new batch goes to: the first workspace folder's. */
  submitFolder(): string | undefined {
    return this.folders()[0];
  }

  /** After a settings change: watch the new folder. */
  rewatch(): void {
    this.disposeWatchers();
    const setting = this.batchesFolder();
    for (const ws of vscode.workspace.workspaceFolders ?? []) {
      const folder = resolveBatchesFolder(setting, ws.uri.fsPath);
      // From the workspace folder when the batches folder is inside it: it may not exist yet (the first batch creates it).
      const rel = relative(ws.uri.fsPath, folder);
      const inside = rel !== '' && !rel.startsWith('..') && !isAbsolute(rel);
      const base = inside ? ws : vscode.Uri.file(folder);
      const prefix = inside ? `${rel.split(sep).join('/')}/` : '';
      // State files, and the session files calls are appended to (`<batch>/capture/sessions/*.jsonl`).
      for (const glob of ['**/*.json', '*/capture/sessions/*.jsonl']) {
        const watcher = vscode.workspace.createFileSystemWatcher(new vscode.RelativePattern(base, `${prefix}${glob}`));
        this.watchers.push(
          watcher,
          watcher.onDidCreate(() => this.refreshSoon()),
          watcher.onDidChange(() => this.refreshSoon()),
          watcher.onDidDelete(() => this.refreshSoon()),
        );
      }
    }
    this.refresh();
  }

  /** Re-reads the batches: re-renders the rows that changed, or the whole tree when its shape did. */
  refresh(): void {
    clearTimeout(this.pending);
    this.pending = undefined;
    clearTimeout(this.poll);
    this.poll = undefined;
    const change = this.shown.reread();
    if (change.kind === 'shape') this.changeEmitter.fire(undefined);
    else if (change.kind === 'rows') this.changeEmitter.fire(change.nodes);
    // A file watcher can drop events (a busy machine, a full inotify queue): while a lab runs, read
    // again every few seconds too, so its last write (the batch finished) is never missed.
    if (this.shown.anyRunning()) this.poll = setTimeout(() => this.refresh(), RUNNING_POLL_MS);
  }

  private refreshSoon(): void {
    this.pending ??= setTimeout(() => this.refresh(), 300);
  }

  private disposeWatchers(): void {
    for (const w of this.watchers) w.dispose();
    this.watchers = [];
  }

  getChildren(node?: BatchesTreeNode): BatchesTreeNode[] {
    return this.shown.children(node);
  }

  getTreeItem(node: BatchesTreeNode): vscode.TreeItem {
    const collapsible =
      node.kind === 'batch' || node.kind === 'group' ? vscode.TreeItemCollapsibleState.Expanded : vscode.TreeItemCollapsibleState.None;
    const item = new vscode.TreeItem(node.label, collapsible);
    item.id = node.id;
    item.description = node.description;
    item.tooltip = node.tooltip;
    item.contextValue = node.contextValue;
    if (node.kind === 'batch')
      item.iconPath = new vscode.ThemeIcon(
        node.status.lab === 'running' ? 'sync~spin' : node.status.lab === 'finished' ? 'layers' : 'debug-pause',
      );
    if (node.kind === 'group')
      item.iconPath = new vscode.ThemeIcon(node.noContrast || node.group.too_few_trainable ? 'warning' : 'symbol-array');
    if (node.kind === 'rollout') {
      const r = node.rollout;
      const icon = { completed: 'pass', policy_failure: 'circle-slash', infra_error: 'error', timeout: 'watch' } as const;
      item.iconPath = new vscode.ThemeIcon(r.class ? icon[r.class] : r.state === 'running' ? 'loading~spin' : 'clock');
      if (node.sessionFile) item.command = { command: 'harnessLab.openBatchRollout', title: 'Open in Rollout Viewer', arguments: [node] };
    }
    if (node.kind === 'error') {
      item.iconPath = new vscode.ThemeIcon('error', new vscode.ThemeColor('errorForeground'));
      item.resourceUri = vscode.Uri.file(node.file);
      item.command =
        node.file !== node.dir
          ? { command: 'vscode.open', title: 'Open the broken file', arguments: [vscode.Uri.file(node.file)] }
          : undefined;
    }
    return item;
  }
}
