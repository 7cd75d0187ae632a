// `harness-lab report --batch DIR --group G`: the group view as one self-contained HTML file, the same
// viewer bundle as the rollout report with the group's data in an `hl-group` JSON script tag.
import type { GroupViewData } from '../protocol/group-data.js';
import { escapeHtml, reportPage, scriptJson, type ViewerAssets } from './report-html.js';

export function buildGroupReportHtml(data: GroupViewData, assets: ViewerAssets): string {
  return reportPage(assets, `Group ${escapeHtml(data.group_id)} of ${escapeHtml(data.batch_id)} · Harness Lab`, [
    `<script type="application/json" id="hl-group">${scriptJson(data)}</script>`,
  ]);
}
