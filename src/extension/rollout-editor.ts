// Rollout files open in the viewer: `*.rollout.json` documents, captured session files and
// TrainingTrace `*.jsonl` lines, through a read-only custom editor. A trajectory.json found next to
// the file (Harbor trial layout included) is cross-checked right away.
import * as vscode from 'vscode';
import { attachReplayMatches } from '../replay/badges.js';
import { statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { basename } from 'node:path';
import { attachRescore, rescorePathFor } from '../report/rescore-attach.js';
import { fileOutcome } from './rollout-outcome.js';
import { checkTrajectory, findTrajectory, rolloutFromText } from '../report/rollout-loader.js';
import { Disposable } from './lifecycle.js';
import { RolloutViewerPanels, ViewerConnection, webviewOptions, type RolloutViewerHost } from './rollout-viewer-panel.js';

/** `*.rollout.json` (default editor) and `*.jsonl` (offered under "Open With…": not every JSONL is a rollout). */
export const ROLLOUT_EDITOR_TYPES = ['harnessLab.rolloutFile', 'harnessLab.rolloutLines'] as const;

class RolloutFile implements vscode.CustomDocument {
  constructor(readonly uri: vscode.Uri) {}
  dispose(): void {}
}

export class RolloutEditorProvider extends Disposable implements vscode.CustomReadonlyEditorProvider<RolloutFile> {
  constructor(
    private readonly host: RolloutViewerHost,
    private readonly panels: RolloutViewerPanels,
  ) {
    super();
    for (const viewType of ROLLOUT_EDITOR_TYPES) {
      this._register(
        vscode.window.registerCustomEditorProvider(viewType, this, {
          supportsMultipleEditorsPerDocument: true,
          webviewOptions: { retainContextWhenHidden: false },
        }),
      );
    }
  }

  openCustomDocument(uri: vscode.Uri): RolloutFile {
    return new RolloutFile(uri);
  }

  async resolveCustomEditor(document: RolloutFile, panel: vscode.WebviewPanel): Promise<void> {
    panel.webview.options = webviewOptions(this.host.extensionUri);
    const conn = new ViewerConnection(panel, this.host);
    this.panels.track(panel, conn);
    panel.onDidDispose(() => conn.dispose());
    try {
      const text = new TextDecoder().decode(await vscode.workspace.fs.readFile(document.uri));
      const path = document.uri.scheme === 'file' ? document.uri.fsPath : document.uri.path;
      const rollout = rolloutFromText(text, path);
      if (document.uri.scheme === 'file') rollout.data.outcome = fileOutcome(path, rollout.data.metadata) ?? null;
      // A `harness-lab rescore` report (or an earlier Rescore in the viewer) beside the file: drift colours.
      if (document.uri.scheme === 'file') attachRescore(rollout.data, rescorePathFor(path));
      // A replay's rollout (`replay.json` beside it): a match badge per call.
      if (document.uri.scheme === 'file') attachReplayMatches(rollout.data, path);
      const trajectory = document.uri.scheme === 'file' && rollout.doc ? findTrajectory(path) : null;
      if (trajectory) {
        try {
          rollout.data.atif = await checkTrajectory(rollout, trajectory);
        } catch (err) {
          this.host.log?.(
            `rollout viewer: ${basename(trajectory)} next to ${basename(path)} could not be checked: ${err instanceof Error ? err.message : String(err)}`,
          );
        }
      }
      conn.show(rollout);
      if (document.uri.scheme === 'file' && rollout.doc && /\.jsonl$/i.test(path)) followFile(path, panel, conn, this.host.log);
    } catch (err) {
      conn.showPage();
      conn.showError(err instanceof Error ? err.message : String(err));
    }
  }
}

/** How often an open session file is checked for growth (one stat; the file is re-read only when it changed). */
const FILE_POLL_MS = 1000;

/**
 * A captured session file still being written (a running batch rollout: the local proxy appends,
 * a cluster batch's lab mirrors) refreshes its open viewer as calls land, as a live session does.
 * A stat poll, not the workbench's file watcher: the file is written by another process, often
 * outside the workspace, and a poll sees every append on any file system.
 */
function followFile(path: string, panel: vscode.WebviewPanel, conn: ViewerConnection, log?: (message: string) => void): void {
  // What the viewer shows; a poll that finds the file different reads it again.
  let shown = statOf(path);
  let reading = false;
  const poll = async () => {
    const cur = statOf(path);
    if (reading || !cur || (cur.size === shown?.size && cur.mtimeMs === shown.mtimeMs)) return;
    reading = true;
    shown = cur;
    try {
      const text = await readFile(path, 'utf8');
      const next = rolloutFromText(text, path);
      next.data.outcome = fileOutcome(path, next.data.metadata) ?? null;
      attachRescore(next.data, rescorePathFor(path));
      conn.refresh(next);
    } catch (err) {
      log?.(`rollout viewer: ${basename(path)} changed and could not be read again: ${err instanceof Error ? err.message : String(err)}`);
    } finally {
      reading = false;
    }
  };
  const timer = setInterval(() => void poll(), FILE_POLL_MS);
  panel.onDidDispose(() => clearInterval(timer));
}

function statOf(path: string): { size: number; mtimeMs: number } | undefined {
  try {
    const st = statSync(path);
    return { size: st.size, mtimeMs: st.mtimeMs };
  } catch {
    return undefined;
  }
}

/**
 * Everything the rollout viewer contributes apart from its command (commands.ts): session panels
 * (with their serializer) and the custom editor for rollout files.
 */
export function registerRolloutViewer(host: RolloutViewerHost): { panels: RolloutViewerPanels; disposables: vscode.Disposable[] } {
  const panels = new RolloutViewerPanels(host);
  return { panels, disposables: [panels, new RolloutEditorProvider(host, panels)] };
}
