// `harness-lab report`: one self-contained HTML file with the rollout viewer. The built webview
// script and styles are inlined and the data rides in a JSON script tag, so the file opens anywhere
// without the extension and without network access.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { toWire, type ViewerData } from '../protocol/viewer-data.js';

export interface ViewerAssets {
  js: string;
  css: string;
  themeCss: string;
}

/** The built viewer bundle (`npm run build`), found next to the running CLI or in the repository's dist/. */
export function loadViewerAssets(): ViewerAssets {
  const dirs = [join(__dirname, 'webview'), join(__dirname, '..', '..', 'dist', 'webview'), join(process.cwd(), 'dist', 'webview')];
  const dir = dirs.find((d) => existsSync(join(d, 'viewer.js')) && existsSync(join(d, 'viewer.css')));
  if (!dir) throw new Error(`the viewer bundle is missing (looked in ${dirs.join(', ')}); run \`npm run build\` first`);
  const themeDirs = [dir, join(__dirname, '..', '..', 'webview', 'viewer')];
  const theme = themeDirs.map((d) => join(d, 'report-theme.css')).find((f) => existsSync(f));
  return {
    js: readFileSync(join(dir, 'viewer.js'), 'utf8'),
    css: readFileSync(join(dir, 'viewer.css'), 'utf8'),
    themeCss: theme ? readFileSync(theme, 'utf8') : '',
  };
}

/** JSON that is safe inside a <script> element. */
export function scriptJson(value: unknown): string {
  return JSON.stringify(value)
    .replace(/</g, '\\u003c')
    .replace(/\u2028/g, '\\u2028')
    .replace(/\u2029/g, '\\u2029');
}

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** Inline code must not close its own element early. */
export function inline(code: string, tag: 'script' | 'style'): string {
  return code.replace(new RegExp(`</${tag}`, 'gi'), `<\\/${tag}`);
}

export const sha256 = (s: string) => `'sha256-${createHash('sha256').update(s, 'utf8').digest('base64')}'`;

export function buildReportHtml(data: ViewerData, assets: ViewerAssets): string {
  const { wire, details } = toWire(data);
  // One JSON block per turn's raw I/O: the browser only tokenises them; the viewer parses a block
  // when its turn is shown.
  const blocks = wire.turns.map((t, i) => `<script type="application/json" id="hl-d-${i}">${scriptJson(details[t.node_id])}</script>`);
  return reportPage(assets, `${escapeHtml(data.title)} · Harness Lab`, [
    `<script type="application/json" id="hl-data">${scriptJson(wire)}</script>`,
    ...blocks,
  ]);
}

/**
 * One self-contained page of the viewer bundle: theme, styles and script inlined, `dataBlocks` (JSON
 * script tags, already escaped) before the script that reads them. The CSP lists hashes instead of
 * 'unsafe-inline': only exactly these inline blocks may run or apply.
 */
export function reportPage(assets: ViewerAssets, title: string, dataBlocks: string[]): string {
  const theme = inline(assets.themeCss, 'style');
  const css = inline(assets.css, 'style');
  const js = inline(assets.js, 'script');
  const csp = `default-src 'none'; style-src ${sha256(theme)} ${sha256(css)}; script-src ${sha256(js)}; img-src data:;`;
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="generator" content="harness-lab report">
<title>${title}</title>
<style>${theme}</style>
<style>${css}</style>
</head>
<body class="hl-report">
<div id="app"></div>
${dataBlocks.join('\n')}
<script>${js}</script>
</body>
</html>
`;
}
