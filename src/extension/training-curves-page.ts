// The Training Curves page, without vscode: the SVG panels (src/report/curves-svg.ts) and, per run,
// the data it trains on with a link to the export's manifest and why it has no points yet. No
// script: the CSP allows only its own style; links are command URIs the panel enables.
import { pathToFileURL } from 'node:url';
import { CURVES_CSS, curvesHtml, type CurveRun } from '../report/curves-svg.js';

export interface ShownRun extends CurveRun {
  /** What the run trains on, in words (an export file, the rollout server). */
  data: string | null;
  /** A local file behind it (the export's manifest), opened from the link. */
  dataFile: string | null;
  /** Why it has no points yet (no pod, a waiting reason), when it has none. */
  note: string | null;
  /** The metrics file the points were read from, when not from a run's log (curves-file-command.ts). */
  source?: string;
}

const esc = (s: string) => s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

/** The page: the SVG panels and, per run, its data source and why it has no points (pure; tested). */
export function curvesPage(runs: ShownRun[], nonce: string, updated: string): string {
  const rows = runs
    .map((r) => {
      const open = r.dataFile
        ? ` <a href="command:vscode.open?${encodeURIComponent(JSON.stringify([pathToFileURL(r.dataFile).toString()]))}">open its manifest</a>`
        : '';
      const what = r.source
        ? `from the metrics file ${esc(r.source)} <a href="command:vscode.open?${encodeURIComponent(JSON.stringify([pathToFileURL(r.source).toString()]))}">open it</a>`
        : r.data
          ? `trains on ${esc(r.data)}${open}`
          : 'data source unknown (no local record of its config)';
      return `<li data-run="${esc(r.name)}"><b>${esc(r.name)}</b>: ${what}${r.note ? ` · <span class="note-line">${esc(r.note)}</span>` : ''}</li>`;
    })
    .join('');
  return `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'nonce-${nonce}';">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>Training Curves</title>
<style nonce="${nonce}">body{font-family:var(--vscode-font-family);color:var(--vscode-foreground);padding:8px 16px}
ul.runs{padding-left:18px;margin:4px 0 12px}.note-line{color:var(--vscode-editorWarning-foreground,#c90)}
.updated{opacity:.7;font-size:11px}${CURVES_CSS}</style></head>
<body><h2>Training curves</h2><p class="updated">Parsed from each run's log or metrics file (docs/training-runs.md, "Curves"): ${esc(updated)}</p>
<ul class="runs">${rows}</ul>${curvesHtml(runs)}</body></html>`;
}
