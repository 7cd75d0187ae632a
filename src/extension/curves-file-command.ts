// Show Training Curves from a metrics file: a trainer's own metrics file (Hugging Face Trainer's
// trainer_state.json, which TRL saves in every checkpoint, or JSON lines of per-step scalars) drawn in
// the Training Curves panel beside or instead of runs read from the cluster. From the Explorer's menu
// on such a file (several selected: overlaid), or the palette with an open dialog.
import * as vscode from 'vscode';
import { metricsFileRuns } from './metrics-file-runs.js';
import type { TrainingCurvesPanel } from './training-curves-panel.js';
import type { ShownRun } from './training-curves-page.js';

/** `harnessLab.showCurvesFromFile`: the Explorer's file (and the other selected ones), or files picked in a dialog. */
export async function showCurvesFromFileCommand(curves: TrainingCurvesPanel, arg: unknown, selected: unknown): Promise<ShownRun[]> {
  const fromMenu = (Array.isArray(selected) && selected.length ? selected : arg instanceof vscode.Uri ? [arg] : []).filter(
    (u): u is vscode.Uri => u instanceof vscode.Uri && u.scheme === 'file',
  );
  const uris = fromMenu.length
    ? fromMenu
    : await vscode.window.showOpenDialog({
        title: 'Show Training Curves from metrics files',
        canSelectMany: true,
        filters: { 'Metrics (JSON lines, trainer_state.json)': ['jsonl', 'json'] },
        openLabel: 'Show Curves',
      });
  if (!uris?.length) return [];
  const runs = await metricsFileRuns(uris.map((u) => u.fsPath));
  curves.show(runs);
  return runs;
}
