// Sessions tree: session -> calls, refreshed live as calls are recorded.
import * as vscode from 'vscode';
import { Disposable } from './lifecycle.js';
import type { ProxyController } from './proxy-controller.js';
import { OutcomeCache, outcomeSeverity } from './rollout-outcome.js';
import { SessionsTreeModel, type SessionsTreeNode } from './sessions-model.js';

const LEVEL_ICON = { tokens: 'pass-filled', logprobs: 'circle-large-outline', text: 'circle-outline' } as const;

export class SessionsView extends Disposable implements vscode.TreeDataProvider<SessionsTreeNode> {
  private readonly model: SessionsTreeModel;
  private readonly changeEmitter = this._register(new vscode.EventEmitter<SessionsTreeNode | undefined>());
  readonly onDidChangeTreeData = this.changeEmitter.event;
  readonly treeView: vscode.TreeView<SessionsTreeNode>;

  constructor(private readonly controller: ProxyController) {
    super();
    const outcomes = new OutcomeCache();
    this.model = new SessionsTreeModel(
      () => controller,
      (metadata) => outcomes.of(metadata),
    );
    this.treeView = this._register(vscode.window.createTreeView('harnessLab.sessions', { treeDataProvider: this, showCollapseAll: true }));
    // Coalesce bursts of calls (a harness can make several per second) into one repaint.
    let timer: ReturnType<typeof setTimeout> | undefined;
    this._register(
      controller.onDidChangeData(() => {
        if (timer) return;
        timer = setTimeout(() => {
          timer = undefined;
          this.refresh();
        }, 150);
      }),
    );
    this._register({ dispose: () => timer && clearTimeout(timer) });
  }

  refresh(): void {
    this.changeEmitter.fire(undefined);
    const sessions = this.model.roots();
    const calls = sessions.reduce((n, s) => n + s.nCalls, 0);
    this.treeView.badge = calls ? { value: calls, tooltip: `${calls} captured call${calls === 1 ? '' : 's'}` } : undefined;
  }

  getChildren(node?: SessionsTreeNode): SessionsTreeNode[] {
    return this.model.children(node);
  }

  getParent(node: SessionsTreeNode): SessionsTreeNode | undefined {
    return this.model.parentOf(node);
  }

  getTreeItem(node: SessionsTreeNode): vscode.TreeItem {
    const item = new vscode.TreeItem(
      node.label,
      node.kind === 'session' ? vscode.TreeItemCollapsibleState.Expanded : vscode.TreeItemCollapsibleState.None,
    );
    item.id = node.id;
    item.description = node.description;
    item.tooltip = node.tooltip;
    item.contextValue = node.contextValue;
    if (node.kind === 'session') {
      const severity = node.outcome ? outcomeSeverity(node.outcome) : undefined;
      item.iconPath =
        severity === 'info'
          ? new vscode.ThemeIcon('pass', new vscode.ThemeColor('testing.iconPassed'))
          : severity === 'warning'
            ? new vscode.ThemeIcon('warning', new vscode.ThemeColor('list.warningForeground'))
            : severity === 'error'
              ? new vscode.ThemeIcon('error', new vscode.ThemeColor('list.errorForeground'))
              : new vscode.ThemeIcon('history');
    } else if (node.kind === 'inflight') {
      item.iconPath = new vscode.ThemeIcon('loading~spin');
    } else {
      item.iconPath =
        node.status === 'error'
          ? new vscode.ThemeIcon('error', new vscode.ThemeColor('list.errorForeground'))
          : new vscode.ThemeIcon(
              LEVEL_ICON[node.captureLevel],
              new vscode.ThemeColor(node.captureLevel === 'tokens' ? 'testing.iconPassed' : 'list.warningForeground'),
            );
      // Enter (or a click) opens the viewer at this call; Open Call (context menu) shows its raw JSON.
      item.command = { command: 'harnessLab.openRolloutViewer', title: 'Open in Rollout Viewer', arguments: [node] };
    }
    return item;
  }
}
