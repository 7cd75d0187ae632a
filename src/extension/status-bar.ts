// Status bar item: proxy state and port; warning/error colours; click for the action quick pick.
import * as vscode from 'vscode';
import { Disposable } from './lifecycle.js';
import type { ProxyController } from './proxy-controller.js';
import { statusView } from './status-model.js';

export class ProxyStatusBar extends Disposable {
  private readonly item: vscode.StatusBarItem;

  constructor(
    private readonly controller: ProxyController,
    private readonly engineUrl: () => string,
  ) {
    super();
    this.item = this._register(vscode.window.createStatusBarItem('harnessLab.proxy', vscode.StatusBarAlignment.Left, 50));
    this.item.name = 'Harness Lab Proxy';
    this.item.command = 'harnessLab.statusMenu';
    this._register(controller.onDidChangeState(() => this.update()));
    this._register(controller.onDidChangeEngines(() => this.update()));
    this.update();
    this.item.show();
  }

  update(): void {
    const url = this.engineUrl();
    const view = statusView(
      this.controller.state,
      url,
      this.controller.engineReachability(url),
      this.controller.engineStatuses([url])[0]?.captureLevel ?? null,
    );
    this.item.text = view.text;
    this.item.tooltip = view.tooltip;
    this.item.backgroundColor = view.background ? new vscode.ThemeColor(view.background) : undefined;
  }
}
