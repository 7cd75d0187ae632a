// The Training Curves webview: each chosen run's scalars (parsed from its log by src/training/metrics.ts)
// drawn as plain SVG by src/report/curves-svg.ts, several runs overlaid, each with the data it trains
// on. No script runs in it (CSP default-src 'none'); links are command URIs. One panel, reused.
import { randomBytes } from 'node:crypto';
import * as vscode from 'vscode';
import { curvesPage, type ShownRun } from './training-curves-page.js';
import { Disposable } from './lifecycle.js';

export class TrainingCurvesPanel extends Disposable {
  private panel: vscode.WebviewPanel | undefined;

  show(runs: ShownRun[]): vscode.WebviewPanel {
    if (!this.panel) {
      this.panel = vscode.window.createWebviewPanel('harnessLab.trainingCurves', 'Training Curves', vscode.ViewColumn.Active, {
        enableScripts: false,
        enableCommandUris: ['vscode.open'],
        localResourceRoots: [],
      });
      this.panel.onDidDispose(() => (this.panel = undefined));
      this._register({ dispose: () => this.panel?.dispose() });
    }
    this.panel.title = runs.length === 1 ? `Training Curves: ${runs[0]!.name}` : `Training Curves (${runs.length} runs)`;
    this.panel.webview.html = curvesPage(runs, randomBytes(16).toString('base64'), new Date().toLocaleTimeString());
    this.panel.reveal(undefined, true);
    return this.panel;
  }
}
