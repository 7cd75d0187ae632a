// Training curves as plain SVG (no chart library, no script): one panel per canonical scalar
// (reward mean with its ± std band, loss, KL, learning rate) against the step, every run overlaid in
// its own colour, theme colours through CSS variables. The Training Curves webview shows this markup.
import type { MetricPoint, RunMetrics } from '../training/metrics.js';

export interface CurveRun {
  name: string;
  metrics: RunMetrics;
}

export interface Panel {
  title: string;
  metric: string;
  /** The series whose ± band is drawn around `metric` (reward_std around reward_mean). */
  band?: string;
}

export const PANELS: readonly Panel[] = [
  { title: 'Reward (mean ± std)', metric: 'reward_mean', band: 'reward_std' },
  { title: 'Loss', metric: 'loss' },
  { title: 'KL', metric: 'kl' },
  { title: 'Learning rate', metric: 'learning_rate' },
];

/** Distinct colours that read on dark and light themes. */
export const RUN_COLOURS = ['#4e9de6', '#e8a33d', '#5cb85c', '#d9534f', '#a77be0', '#36b3a8', '#e07bb5', '#9c9c3a'];

const esc = (s: string) => s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

/** A short label for an axis value: 3 significant digits (trailing zeros dropped), exponent for the very small or large. */
export function tickLabel(v: number): string {
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a < 1e-3 || a >= 1e5) return v.toExponential(2).replace(/\.?0+e/, 'e');
  return String(Number(v.toPrecision(3)));
}

interface Box {
  x0: number;
  x1: number;
  y0: number;
  y1: number;
}

/** The extent of the panel's data over all runs (the band included), padded so flat lines are visible. */
export function extent(runs: CurveRun[], panel: Panel): Box | undefined {
  let x0 = Infinity;
  let x1 = -Infinity;
  let y0 = Infinity;
  let y1 = -Infinity;
  for (const r of runs) {
    const pts = r.metrics.series[panel.metric] ?? [];
    const band = bandOf(r, panel);
    for (const p of pts) {
      const s = band.get(p.step) ?? 0;
      x0 = Math.min(x0, p.step);
      x1 = Math.max(x1, p.step);
      y0 = Math.min(y0, p.value - s);
      y1 = Math.max(y1, p.value + s);
    }
  }
  if (!Number.isFinite(x0)) return undefined;
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) {
    const pad = Math.abs(y0) * 0.1 || 1;
    y0 -= pad;
    y1 += pad;
  }
  return { x0, x1, y0, y1 };
}

function bandOf(r: CurveRun, panel: Panel): Map<number, number> {
  return new Map(panel.band ? (r.metrics.series[panel.band] ?? []).map((p) => [p.step, p.value] as const) : []);
}

const W = 420;
const H = 220;
const M = { left: 58, right: 12, top: 26, bottom: 30 };

/** One panel as an <svg>, or a note when no run logged this scalar. */
export function panelSvg(runs: CurveRun[], panel: Panel): string {
  const box = extent(runs, panel);
  const title = `<text class="title" x="${M.left}" y="16">${esc(panel.title)}</text>`;
  if (!box)
    return (
      `<svg class="panel empty" data-metric="${panel.metric}" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" ` +
      `role="img" aria-label="${esc(panel.title)}: no data">${title}<text class="note" x="${W / 2}" y="${H / 2}" ` +
      `text-anchor="middle">not logged</text></svg>`
    );
  const sx = (x: number) => M.left + ((x - box.x0) / (box.x1 - box.x0)) * (W - M.left - M.right);
  const sy = (y: number) => H - M.bottom - ((y - box.y0) / (box.y1 - box.y0)) * (H - M.top - M.bottom);
  const parts: string[] = [title];
  for (let i = 0; i <= 4; i++) {
    const y = box.y0 + ((box.y1 - box.y0) * i) / 4;
    parts.push(
      `<line class="grid" x1="${M.left}" x2="${W - M.right}" y1="${sy(y).toFixed(1)}" y2="${sy(y).toFixed(1)}"/>`,
      `<text class="tick" x="${M.left - 4}" y="${(sy(y) + 3).toFixed(1)}" text-anchor="end">${tickLabel(y)}</text>`,
    );
  }
  for (let i = 0; i <= 4; i++) {
    const x = box.x0 + ((box.x1 - box.x0) * i) / 4;
    parts.push(
      `<text class="tick" x="${sx(x).toFixed(1)}" y="${H - M.bottom + 14}" text-anchor="middle">${tickLabel(Math.round(x * 100) / 100)}</text>`,
    );
  }
  parts.push(`<text class="axis" x="${W - M.right}" y="${H - 4}" text-anchor="end">step</text>`);
  runs.forEach((r, i) => {
    const pts: MetricPoint[] = r.metrics.series[panel.metric] ?? [];
    if (!pts.length) return;
    const colour = RUN_COLOURS[i % RUN_COLOURS.length]!;
    const band = bandOf(r, panel);
    if (band.size) {
      const withBand = pts.filter((p) => band.has(p.step));
      if (withBand.length) {
        const upper = withBand.map((p) => `${sx(p.step).toFixed(1)},${sy(p.value + band.get(p.step)!).toFixed(1)}`);
        const lower = withBand.map((p) => `${sx(p.step).toFixed(1)},${sy(p.value - band.get(p.step)!).toFixed(1)}`).reverse();
        parts.push(`<polygon class="band" data-run="${esc(r.name)}" fill="${colour}" points="${[...upper, ...lower].join(' ')}"/>`);
      }
    }
    const line = pts.map((p) => `${sx(p.step).toFixed(1)},${sy(p.value).toFixed(1)}`).join(' ');
    parts.push(
      `<polyline class="curve" data-run="${esc(r.name)}" data-points="${pts.length}" stroke="${colour}" points="${line}"><title>${esc(r.name)}: ` +
        `${pts.length} point(s), last ${tickLabel(pts[pts.length - 1]!.value)} at step ${pts[pts.length - 1]!.step}</title></polyline>`,
    );
    if (pts.length === 1)
      parts.push(`<circle cx="${sx(pts[0]!.step).toFixed(1)}" cy="${sy(pts[0]!.value).toFixed(1)}" r="3" fill="${colour}"/>`);
  });
  return `<svg class="panel" data-metric="${panel.metric}" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="${esc(panel.title)}">${parts.join('')}</svg>`;
}

/** The legend and every panel. */
export function curvesHtml(runs: CurveRun[]): string {
  const legend = runs
    .map(
      (r, i) =>
        `<li data-run="${esc(r.name)}"><span class="swatch" style="background:${RUN_COLOURS[i % RUN_COLOURS.length]}"></span>${esc(r.name)} ` +
        `<span class="dim">${r.metrics.lines} metric line(s)${r.metrics.formats.length ? ` · ${r.metrics.formats.join(', ')}` : ''}</span></li>`,
    )
    .join('');
  return `<ul class="legend">${legend}</ul><div class="panels">${PANELS.map((p) => panelSvg(runs, p)).join('')}</div>`;
}

/** The styles the markup needs (theme variables; no script). */
export const CURVES_CSS = `
.legend{list-style:none;padding:0;margin:0 0 8px;display:flex;flex-wrap:wrap;gap:4px 16px}
.legend .swatch{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px;vertical-align:-1px}
.dim{opacity:.7}
.panels{display:flex;flex-wrap:wrap;gap:12px}
svg.panel{background:var(--vscode-editorWidget-background,transparent);border:1px solid var(--vscode-panel-border,#8884);border-radius:4px;max-width:100%;height:auto}
svg .title{fill:var(--vscode-foreground);font-size:12px;font-weight:600}
svg .tick,svg .axis,svg .note{fill:var(--vscode-descriptionForeground,#888);font-size:10px}
svg .grid{stroke:var(--vscode-panel-border,#8884);stroke-width:.5}
svg .curve{fill:none;stroke-width:1.6}
svg .band{opacity:.18;stroke:none}
`;
