// Tasks tree: Harbor task folders (holding task.toml) in the workspace, found lazily.
import * as vscode from 'vscode';
import { Disposable } from './lifecycle.js';
import type { Logger } from './logger.js';
import { sortTasks, taskNode, type TaskNode } from './tasks-model.js';

export class TasksView extends Disposable implements vscode.TreeDataProvider<TaskNode> {
  private readonly changeEmitter = this._register(new vscode.EventEmitter<TaskNode | undefined>());
  readonly onDidChangeTreeData = this.changeEmitter.event;
  private watcher: vscode.FileSystemWatcher | undefined;

  constructor(private readonly log: Logger) {
    super();
    this._register(vscode.window.createTreeView('harnessLab.tasks', { treeDataProvider: this }));
    this._register(vscode.workspace.onDidChangeWorkspaceFolders(() => this.refresh()));
  }

  refresh(): void {
    this.changeEmitter.fire(undefined);
  }

  private ensureWatcher(): void {
    if (this.watcher) return;
    this.watcher = this._register(vscode.workspace.createFileSystemWatcher('**/task.toml'));
    this._register(this.watcher.onDidCreate(() => this.refresh()));
    this._register(this.watcher.onDidDelete(() => this.refresh()));
    this._register(this.watcher.onDidChange(() => this.refresh()));
  }

  async getChildren(node?: TaskNode): Promise<TaskNode[]> {
    if (node) return [];
    if (!vscode.workspace.workspaceFolders?.length) return [];
    this.ensureWatcher();
    const uris = await vscode.workspace.findFiles('**/task.toml', '{**/node_modules/**,**/.git/**}', 1000);
    const nodes: TaskNode[] = [];
    for (const uri of uris) {
      const root = vscode.workspace.getWorkspaceFolder(uri)?.uri.fsPath ?? '';
      try {
        const text = new TextDecoder().decode(await vscode.workspace.fs.readFile(uri));
        nodes.push(taskNode(uri.fsPath, root, text));
      } catch (err) {
        this.log.warn(`could not read ${uri.fsPath}: ${String(err)}`);
      }
    }
    return sortTasks(nodes);
  }

  getTreeItem(node: TaskNode): vscode.TreeItem {
    const item = new vscode.TreeItem(node.label, vscode.TreeItemCollapsibleState.None);
    item.id = node.id;
    item.description = node.description;
    item.tooltip = node.tooltip;
    item.contextValue = node.contextValue;
    item.iconPath = new vscode.ThemeIcon('checklist');
    item.resourceUri = vscode.Uri.file(node.folder);
    item.command = { command: 'vscode.open', title: 'Open task.toml', arguments: [vscode.Uri.file(node.tomlPath)] };
    return item;
  }
}
