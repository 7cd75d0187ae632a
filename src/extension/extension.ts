import * as vscode from 'vscode';

// Minimal activation: the real extension (proxy in the host, trees, webviews) lands with its own issue.
export function activate(context: vscode.ExtensionContext): void {
  const log = vscode.window.createOutputChannel('Harness Lab', { log: true });
  context.subscriptions.push(log);
  context.subscriptions.push(vscode.commands.registerCommand('harnessLab.showLog', () => log.show()));
  log.info('Harness Lab activated');
}

export function deactivate(): void {}
