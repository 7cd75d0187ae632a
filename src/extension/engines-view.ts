// Engines tree: the configured engine URL(s) with reachability and probed capture level.
import * as vscode from 'vscode';
import { Disposable } from './lifecycle.js';
import type { EngineStatus, ProxyController } from './proxy-controller.js';

export interface EngineNode extends EngineStatus {
  kind: 'engine';
}

export class EnginesView extends Disposable implements vscode.TreeDataProvider<EngineNode> {
  private readonly changeEmitter = this._register(new vscode.EventEmitter<EngineNode | undefined>());
  readonly onDidChangeTreeData = this.changeEmitter.event;

  constructor(
    private readonly controller: ProxyController,
    private readonly configuredEngines: () => string[],
    /** The embedded engine this window owns (it stands in for the Engine URL setting while it runs). */
    private readonly ownedEngine: () => { url: string; policy: string | undefined } | undefined = () => undefined,
  ) {
    super();
    this._register(vscode.window.createTreeView('harnessLab.engines', { treeDataProvider: this }));
    this._register(controller.onDidChangeEngines(() => this.refresh()));
  }

  refresh(): void {
    this.changeEmitter.fire(undefined);
  }

  getChildren(node?: EngineNode): EngineNode[] {
    if (node) return [];
    return this.controller.engineStatuses(this.configuredEngines()).map((s) => ({ kind: 'engine', ...s }));
  }

  getTreeItem(node: EngineNode): vscode.TreeItem {
    const item = new vscode.TreeItem(node.url, vscode.TreeItemCollapsibleState.None);
    item.id = `engine:${node.url}`;
    const owned = this.ownedEngine();
    const embedded =
      owned?.url === node.url ? `embedded engine of this window${owned.policy ? `, policy ${owned.policy}` : ', no policy'}` : undefined;
    item.description = [
      ...(embedded ? ['embedded'] : []),
      node.reachability,
      node.captureLevel ? `capture: ${node.captureLevel}` : 'capture: not probed',
    ].join(' · ');
    item.tooltip = [
      node.url,
      ...(embedded ? [`${embedded} (Stop Embedded Engine ends it)`] : []),
      `Reachability: ${node.reachability}`,
      `Capture level: ${node.captureLevel ?? 'not probed'}`,
      node.detail,
      node.checkedAt ? `Checked ${node.checkedAt}` : '',
    ]
      .filter(Boolean)
      .join('\n');
    item.contextValue = 'harnessLab.engine';
    item.iconPath =
      node.reachability === 'unreachable'
        ? new vscode.ThemeIcon('warning', new vscode.ThemeColor('list.warningForeground'))
        : node.reachability === 'reachable'
          ? new vscode.ThemeIcon('server', new vscode.ThemeColor(node.captureLevel === 'tokens' ? 'testing.iconPassed' : 'foreground'))
          : new vscode.ThemeIcon('server');
    return item;
  }
}
