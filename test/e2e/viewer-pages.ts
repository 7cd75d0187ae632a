// Pages for the viewer's browser tests and benchmark: the built webview bundle behind a stubbed
// `acquireVsCodeApi` (the host side is played by the test), and `harness-lab report` files.
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { buildRollout, type RolloutDocument } from '../../src/capture/rollout.js';
import type { CallRecord } from '../../src/capture/types.js';
import { toWire, viewerDataFromRollout, type ViewerData } from '../../src/protocol/viewer-data.js';
import { buildReportHtml, loadViewerAssets } from '../../src/report/report-html.js';
import { generateRollout, type GeneratorOptions } from '../../bench/rollout-generator.js';

export const DIST = resolve(__dirname, '..', '..', 'dist', 'webview');

export function chromium(): string {
  return process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
}

/** A generated rollout as ViewerData, with every prompt-token text (as an engine's /detokenize would give). */
export function fixtureData(opts: GeneratorOptions, withTexts = true): ViewerData {
  return fixture(opts, withTexts).data;
}

export function fixture(
  opts: GeneratorOptions,
  withTexts = true,
): { data: ViewerData; doc: RolloutDocument; records: CallRecord[]; vocab: Record<string, string> } {
  const g = generateRollout(opts);
  const doc = buildRollout(g.session, g.records, {
    budgetStopCount: 0,
    captureLevel: 'tokens',
    includeDiscarded: true,
    includeTraces: false,
  });
  return {
    data: viewerDataFromRollout(doc, { key: 'fixture', title: 'Fixture rollout', tokenTexts: withTexts ? g.vocab : {} }),
    doc,
    records: g.records,
    vocab: g.vocab,
  };
}

/**
 * The webview page as VS Code would load it, minus VS Code: the built viewer.js and viewer.css, a stub
 * `acquireVsCodeApi` that records posted messages in `window.__posted`, keeps state in `window.__state`
 * and answers details requests from `window.__details`. The test plays the host with `window.postMessage`
 * (see postLoad).
 */
export function webviewPage(dir: string, theme: 'vscode-light' | 'vscode-dark' | 'vscode-high-contrast'): string {
  const vars =
    theme === 'vscode-light'
      ? '--vscode-editor-background:#ffffff;--vscode-editor-foreground:#1f1f1f;--vscode-panel-border:#e5e5e5;'
      : theme === 'vscode-dark'
        ? '--vscode-editor-background:#1f1f1f;--vscode-editor-foreground:#cccccc;--vscode-panel-border:#3c3c3c;--vscode-descriptionForeground:#9d9d9d;--vscode-list-activeSelectionBackground:#04395e;--vscode-charts-green:#89d185;--vscode-charts-red:#f14c4c;--vscode-charts-blue:#3794ff;'
        : '--vscode-editor-background:#000000;--vscode-editor-foreground:#ffffff;--vscode-contrastBorder:#6fc3df;--vscode-focusBorder:#f38518;';
  const html = `<!doctype html><html><head><meta charset="utf-8">
<style>html{${vars}}</style>
<link rel="stylesheet" href="${join(DIST, 'viewer.css')}">
<script>
window.__posted = [];
window.__state = undefined;
window.__details = {};
window.acquireVsCodeApi = () => ({
  postMessage: (m) => {
    window.__posted.push(JSON.parse(JSON.stringify(m)));
    // The host's answer to a details request, from the table the test put in window.__details.
    if (m.type === 'details') setTimeout(() => window.postMessage(window.__details[m.node_id] ? { type: 'details/completion', seq: m.seq, node_id: m.node_id, res: window.__details[m.node_id] } : { type: 'details/completion', seq: m.seq, node_id: m.node_id, err: 'unknown turn' }, '*'), 0);
  },
  getState: () => window.__state,
  setState: (s) => { window.__state = JSON.parse(JSON.stringify(s)); },
});
</script></head>
<body class="${theme}"><div id="app"></div><script src="${join(DIST, 'viewer.js')}"></script></body></html>`;
  const file = join(dir, `webview-${theme}.html`);
  writeFileSync(file, html);
  return `file://${file}`;
}

export function reportPage(dir: string, data: ViewerData): string {
  const file = join(dir, 'report.html');
  writeFileSync(file, buildReportHtml(data, loadViewerAssets()));
  return `file://${file}`;
}

export function tempDir(): string {
  return mkdtempSync(join(tmpdir(), 'hl-viewer-'));
}

export function bundleBuilt(): boolean {
  try {
    readFileSync(join(DIST, 'viewer.js'));
    return true;
  } catch {
    return false;
  }
}

/** Why the browser tests of the viewer cannot run here, in terms of what to do about it; undefined when they can. */
export function missingViewerPrerequisite(): string | undefined {
  if (!existsSync(chromium()))
    return `no chromium at ${chromium()}: run \`npm test\` or \`bash scripts/code-server-install.sh\` as root (both apt-get install Debian's chromium), or set CHROMIUM_PATH`;
  if (!bundleBuilt()) return `${join(DIST, 'viewer.js')} is missing: run \`npm run build\``;
  return undefined;
}

/** Post the data as the host does: the wire form, with the per-turn details ready to be requested. */
export async function postLoad(page: import('playwright-core').Page, data: ViewerData, focus: string | null = null): Promise<void> {
  const { wire, details } = toWire(data);
  await page.evaluate(
    ([w, d, f]) => {
      (window as unknown as { __details: unknown }).__details = d;
      window.postMessage({ type: 'load', wire: w, focus: f }, '*');
    },
    [wire, details, focus] as const,
  );
}
