// The token strip: one turn's tokens as text pieces, virtualised by rows. Only the rows in view (plus
// a margin) exist in the DOM, so a turn of any length costs the same to show and to scroll.
// Layout is computed from monospace column widths, without measuring tokens in the DOM.
import { columns, displayText, layoutRows, positionClass, type TokenTexts, type TurnTokens } from './model.js';

const OVERSCAN = 8;

export interface TokenDetail {
  index: number;
  tt: TurnTokens;
}

export class TokenStrip {
  readonly el: HTMLElement;
  private readonly spacer: HTMLElement;
  private readonly rowsEl: HTMLElement;
  private tt: TurnTokens | null = null;
  private rowStarts: Int32Array = Int32Array.from([0, 0]);
  private texts: string[] = [];
  private rowHeight = 20;
  private charWidth = 8;
  private rendered = { from: -1, to: -1 };
  private cursor = -1;
  private raf = 0;

  constructor(
    parent: HTMLElement,
    private readonly tokenTexts: TokenTexts,
    private readonly onDetail: (d: TokenDetail | null) => void,
  ) {
    this.el = document.createElement('div');
    this.el.className = 'strip';
    this.el.tabIndex = 0;
    this.el.setAttribute('role', 'listbox');
    this.el.setAttribute('aria-label', 'Tokens of this turn; arrow keys move between tokens');
    this.spacer = document.createElement('div');
    this.spacer.className = 'strip-spacer';
    this.rowsEl = document.createElement('div');
    this.rowsEl.className = 'strip-rows';
    this.spacer.append(this.rowsEl);
    this.el.append(this.spacer);
    parent.append(this.el);
    this.el.addEventListener('scroll', () => this.schedule());
    // pointermove, not mouseover: re-rendered rows under a still pointer must not steal the detail
    // from the keyboard cursor.
    this.el.addEventListener('pointermove', (e) => {
      const i = indexOf(e.target);
      if (i !== null && this.tt) this.onDetail({ index: i, tt: this.tt });
    });
    this.el.addEventListener('keydown', (e) => this.onKey(e));
    this.el.addEventListener('focus', () => {
      if (this.cursor < 0 && this.tt && this.tt.n > 0) this.setCursor(this.firstVisible());
    });
    new ResizeObserver(() => {
      this.measured = false;
      this.relayout();
    }).observe(this.el);
  }

  show(tt: TurnTokens, scrollTo: 'start' | 'sampled' = 'sampled'): void {
    this.tt = tt;
    this.cursor = -1;
    this.texts = new Array<string>(tt.n);
    this.relayout();
    const target = scrollTo === 'sampled' && tt.n > tt.nPrompt ? this.rowOf(tt.nPrompt) : 0;
    // Show a little context above the first sampled token.
    this.el.scrollTop = Math.max(0, (target - 3) * this.rowHeight);
    this.render(true);
  }

  private text(i: number): { text: string; breakAfter: boolean } {
    const tt = this.tt!;
    const id = tt.id(i);
    const ownBytes = i >= tt.nPrompt ? tt.turn.sampled_text?.[i - tt.nPrompt] : undefined;
    return displayText(ownBytes ?? this.tokenTexts.get(id), id);
  }

  /** Character width and row height are read once (and again after a resize), not per turn. */
  private measured = false;

  private relayout(): void {
    if (!this.tt) return;
    if (!this.measured) this.measure();
    const tt = this.tt;
    const width = Math.max(8, Math.floor((this.el.clientWidth - 16) / this.charWidth));
    const breaks = new Uint8Array(tt.n);
    const widths = new Uint16Array(tt.n);
    for (let i = 0; i < tt.n; i++) {
      const d = this.text(i);
      this.texts[i] = d.text;
      breaks[i] = d.breakAfter ? 1 : 0;
      widths[i] = Math.min(65535, columns(d.text));
    }
    this.rowStarts = layoutRows(
      tt.n,
      (i) => widths[i]!,
      (i) => breaks[i] === 1,
      width,
    );
    this.spacer.style.height = `${(this.rowStarts.length - 1) * this.rowHeight}px`;
    this.render(true);
  }

  private measure(): void {
    const probe = document.createElement('span');
    probe.className = 't';
    probe.textContent = 'MMMMMMMMMM';
    this.rowsEl.append(probe);
    const r = probe.getBoundingClientRect();
    if (r.width > 0) this.charWidth = r.width / 10;
    probe.remove();
    const lh = parseFloat(getComputedStyle(this.el).getPropertyValue('--strip-row-height'));
    if (lh > 0) this.rowHeight = lh;
    this.measured = r.width > 0;
  }

  private schedule(): void {
    if (this.raf) return;
    this.raf = requestAnimationFrame(() => {
      this.raf = 0;
      this.render(false);
    });
  }

  private rowOf(i: number): number {
    const s = this.rowStarts;
    let lo = 0;
    let hi = s.length - 2;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (s[mid]! <= i) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  private firstVisible(): number {
    return this.rowStarts[Math.min(this.rowStarts.length - 2, Math.floor(this.el.scrollTop / this.rowHeight))] ?? 0;
  }

  /** Rows in the DOM by row number; scrolling adds and removes only the rows that enter or leave. */
  private readonly live = new Map<number, HTMLElement>();

  private render(force: boolean): void {
    const tt = this.tt;
    if (!tt) return;
    const nRows = this.rowStarts.length - 1;
    const top = Math.floor(this.el.scrollTop / this.rowHeight);
    const visible = Math.ceil((this.el.clientHeight || 600) / this.rowHeight);
    const from = Math.max(0, top - OVERSCAN);
    const to = Math.min(nRows, top + visible + OVERSCAN);
    if (force) {
      this.live.clear();
      this.rowsEl.replaceChildren();
    } else if (from === this.rendered.from && to === this.rendered.to) return;
    this.rendered = { from, to };
    for (const [r, el] of this.live) {
      if (r < from || r >= to) {
        el.remove();
        this.live.delete(r);
      }
    }
    const frag = document.createDocumentFragment();
    for (let r = from; r < to; r++) {
      if (this.live.has(r)) continue;
      const row = this.buildRow(tt, r);
      this.live.set(r, row);
      frag.append(row);
    }
    this.rowsEl.append(frag);
  }

  private buildRow(tt: TurnTokens, r: number): HTMLElement {
    const row = document.createElement('div');
    row.className = 'row';
    row.style.transform = `translateY(${r * this.rowHeight}px)`;
    for (let i = this.rowStarts[r]!; i < this.rowStarts[r + 1]!; i++) {
      const span = document.createElement('span');
      span.className = positionClass(tt, i) + (i === this.cursor ? ' cur' : '');
      span.dataset.i = String(i);
      span.id = `tok-${i}`;
      span.setAttribute('role', 'option');
      span.textContent = this.texts[i]!;
      row.append(span);
    }
    return row;
  }

  private setCursor(i: number): void {
    const tt = this.tt;
    if (!tt || tt.n === 0) return;
    this.rowsEl.querySelector(`#tok-${this.cursor}`)?.classList.remove('cur');
    this.cursor = Math.max(0, Math.min(tt.n - 1, i));
    const row = this.rowOf(this.cursor);
    const top = row * this.rowHeight;
    if (top < this.el.scrollTop) this.el.scrollTop = top;
    else if (top + this.rowHeight > this.el.scrollTop + this.el.clientHeight)
      this.el.scrollTop = top + this.rowHeight - this.el.clientHeight;
    this.render(false);
    this.rowsEl.querySelector(`#tok-${this.cursor}`)?.classList.add('cur');
    this.el.setAttribute('aria-activedescendant', `tok-${this.cursor}`);
    this.onDetail({ index: this.cursor, tt });
  }

  private onKey(e: KeyboardEvent): void {
    if (!this.tt) return;
    const moves: Record<string, number> = { ArrowRight: 1, ArrowLeft: -1, Home: -Infinity, End: Infinity };
    const row = this.rowOf(Math.max(0, this.cursor));
    if (e.key in moves) {
      const d = moves[e.key]!;
      this.setCursor(d === -Infinity ? 0 : d === Infinity ? this.tt.n - 1 : this.cursor + d);
    } else if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      const r = Math.max(0, Math.min(this.rowStarts.length - 2, row + (e.key === 'ArrowDown' ? 1 : -1)));
      this.setCursor(this.rowStarts[r]! + (this.cursor - this.rowStarts[row]!));
    } else if (e.key === 'Escape') {
      this.el.blur();
      this.onDetail(null);
      return;
    } else return;
    e.preventDefault();
    e.stopPropagation();
  }

  /** Rows and token spans currently in the DOM (for tests and the benchmark). */
  get renderedTokens(): number {
    return this.rowsEl.querySelectorAll('.t').length;
  }
}

function indexOf(target: EventTarget | null): number | null {
  if (!(target instanceof HTMLElement) || target.dataset.i === undefined) return null;
  return Number(target.dataset.i);
}
