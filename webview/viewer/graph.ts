// The rollout graph as a lane diagram: one row per call in arrival order, one lane per branch.
// A child continues its parent's lane when it is the first child; retries, forks and new roots
// (subagents, compactions, side calls) open lanes. Each row is a button that selects the turn.
import type { ViewerData, ViewerTurn } from '../../src/protocol/viewer-data.js';
import { plural, rootKind } from './model.js';
import { h } from './panels.js';

const ROW = 24;
const LANE = 14;
const MAX_LANES = 10;
const SVG_NS = 'http://www.w3.org/2000/svg';

export class GraphView {
  readonly el: HTMLElement;
  private readonly rows = new Map<string, HTMLButtonElement>();
  private selected: string | null = null;

  constructor(data: ViewerData, byId: Map<string, ViewerTurn>, select: (id: string) => void) {
    this.el = h('nav', { class: 'graph', 'aria-label': 'Rollout graph' });
    const lane = new Map<string, number>();
    const continued = new Set<string>();
    let nextLane = 0;
    for (const t of data.turns) {
      if (t.parent_id && lane.has(t.parent_id) && !continued.has(t.parent_id)) {
        lane.set(t.node_id, lane.get(t.parent_id)!);
        continued.add(t.parent_id);
      } else lane.set(t.node_id, nextLane++ % MAX_LANES);
    }
    const nLanes = Math.min(MAX_LANES, Math.max(1, nextLane));
    const width = nLanes * LANE + 8;
    const rowOf = new Map(data.turns.map((t, i) => [t.node_id, i]));
    const svg = document.createElementNS(SVG_NS, 'svg');
    svg.setAttribute('class', 'graph-svg');
    svg.setAttribute('width', String(width));
    svg.setAttribute('height', String(data.turns.length * ROW));
    svg.setAttribute('aria-hidden', 'true');
    const x = (id: string) => 8 + lane.get(id)! * LANE;
    const y = (id: string) => rowOf.get(id)! * ROW + ROW / 2;
    for (const t of data.turns) {
      if (!t.parent_id || !rowOf.has(t.parent_id)) continue;
      const p = document.createElementNS(SVG_NS, 'path');
      const [x1, y1, x2, y2] = [x(t.parent_id), y(t.parent_id), x(t.node_id), y(t.node_id)];
      p.setAttribute(
        'd',
        x1 === x2 ? `M${x1},${y1} L${x2},${y2}` : `M${x1},${y1} C${x1},${y2 - ROW / 2} ${x2},${y1 + ROW / 2} ${x2},${y2}`,
      );
      p.setAttribute('class', `edge${t.discarded ? ' edge-discarded' : ''}`);
      svg.append(p);
    }
    for (const t of data.turns) {
      const c = document.createElementNS(SVG_NS, 'circle');
      c.setAttribute('cx', String(x(t.node_id)));
      c.setAttribute('cy', String(y(t.node_id)));
      c.setAttribute('r', t.parent_id ? '4' : '5.5');
      c.setAttribute('class', `dot role-${t.role}${t.discarded ? ' discarded' : ''}${t.parent_id ? '' : ' root'}`);
      svg.append(c);
    }
    const list = h('div', { class: 'graph-rows', role: 'list' });
    list.style.paddingLeft = `${width}px`; // CSSOM, allowed by the webview's style-src
    for (const t of data.turns) {
      const kind = rootKind(data, t, byId);
      const sibs = t.parent_id ? (byId.get(t.parent_id)?.children.length ?? 1) : 1;
      const badges: string[] = [];
      if (kind) badges.push(kind);
      if (t.discarded) badges.push('retry');
      else if (sibs > 1) badges.push('branch');
      if (t.role === 'auxiliary' && kind !== 'auxiliary') badges.push('aux');
      if (t.flags.length) badges.push('!');
      // A replay's call: its rung on the match ladder (replay.json beside the rollout).
      if (t.match) badges.push(t.match.level === 'none' ? 'no-match' : t.match.level);
      const b = h(
        'button',
        {
          class: 'graph-row',
          type: 'button',
          role: 'listitem',
          'data-node': t.node_id,
          title: `${t.node_id}: ${t.prompt_ids.length} prompt + ${t.sampled_ids.length} sampled tokens`,
        },
        h('span', { class: 'gi' }, `#${t.index}`),
        h('span', { class: 'gn' }, `${t.sampled_ids.length} tok`),
        ...badges.map((x) => h('span', { class: `badge b-${x === '!' ? 'flag' : x}` }, x)),
      );
      b.addEventListener('click', () => select(t.node_id));
      this.rows.set(t.node_id, b);
      list.append(b);
    }
    const inner = h('div', { class: 'graph-inner' });
    inner.append(svg, list);
    this.el.append(
      h('div', { class: 'graph-title' }, `Graph · ${plural(data.graph.roots.length, 'root')} · ${plural(data.graph.forks.length, 'fork')}`),
      inner,
    );
  }

  select(id: string): void {
    if (this.selected) {
      this.rows.get(this.selected)?.classList.remove('sel');
      this.rows.get(this.selected)?.removeAttribute('aria-current');
    }
    this.selected = id;
    const row = this.rows.get(id);
    if (!row) return;
    row.classList.add('sel');
    row.setAttribute('aria-current', 'true');
    row.scrollIntoView({ block: 'nearest' });
  }
}
