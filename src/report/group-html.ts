// `harness-lab report --batch DIR --group G`: the group view as one self-contained HTML file, the same
// viewer bundle as the rollout report with the group's data in an `hl-group` JSON script tag.
import type { GroupViewData } from '../protocol/group-data.js';
import { escapeHtml, inline, scriptJson, sha256, type ViewerAssets } from './report-html.js';

export function buildGroupReportHtml(data: GroupViewData, assets: ViewerAssets): string {
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
<title>Group ${escapeHtml(data.group_id)} of ${escapeHtml(data.batch_id)} · Harness Lab</title>
<style>${theme}</style>
<style>${css}</style>
</head>
<body class="hl-report">
<div id="app"></div>
<script type="application/json" id="hl-group">${scriptJson(data)}</script>
<script>${js}</script>
</body>
</html>
`;
}
