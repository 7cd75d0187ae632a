// Read-only virtual documents for session/call JSON and env snippets: no "save changes?" prompt when
// they are closed, and nothing is written to the workspace.
import * as vscode from 'vscode';
import { Disposable } from './lifecycle.js';

export const READONLY_SCHEME = 'harness-lab';

export class ReadonlyDocuments extends Disposable implements vscode.TextDocumentContentProvider {
  private readonly contents = new Map<string, string>();
  private readonly changeEmitter = this._register(new vscode.EventEmitter<vscode.Uri>());
  readonly onDidChange = this.changeEmitter.event;

  constructor() {
    super();
    this._register(vscode.workspace.registerTextDocumentContentProvider(READONLY_SCHEME, this));
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    return (
      this.contents.get(uri.path) ??
      '// This Harness Lab document is no longer available (window reloaded); open it again from the Sessions view.\n'
    );
  }

  /** Holds `content` under a readable name (an open document of that name shows the new content); returns its URI. */
  set(name: string, content: string): vscode.Uri {
    const uri = vscode.Uri.from({ scheme: READONLY_SCHEME, path: `/${name}` });
    this.contents.set(uri.path, content);
    this.changeEmitter.fire(uri);
    return uri;
  }

  /** Shows `content` under a readable name such as `session s123.json`. */
  async show(name: string, content: string, language: string): Promise<vscode.TextEditor> {
    const uri = this.set(name, content);
    const doc = await vscode.workspace.openTextDocument(uri);
    await vscode.languages.setTextDocumentLanguage(doc, language);
    return vscode.window.showTextDocument(doc, { preview: true });
  }
}
