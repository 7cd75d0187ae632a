// The per-turn panels below the strip: what the harness added, raw I/O, ATIF cross-check, findings.
// Plain DOM built with `h`; text always goes through textContent, never innerHTML.
import type { AtifCheckResult } from '../../src/harness/atif-check.js';
import type { TurnDetails, ViewerData, ViewerTurn } from '../../src/protocol/viewer-data.js';
import { addedByHarness, displayText, rootKind, type TokenTexts } from './model.js';

type Child = Node | string | null | undefined | false;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') el.className = v;
    else el.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) el.append(c);
  return el;
}

function custom(tag: string, attrs: Record<string, string>, ...children: Child[]): HTMLElement {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  for (const c of children) if (c !== null && c !== undefined && c !== false) el.append(c);
  return el;
}

const MAX_TEXT = 20_000;

function tokensText(ids: readonly number[], from: number, texts: TokenTexts, limit = MAX_TEXT): string {
  let out = '';
  for (let i = from; i < ids.length && out.length < limit; i++) {
    const t = texts.get(ids[i]!);
    out += t ?? displayText(undefined, ids[i]!).text;
  }
  return out.length >= limit ? `${out.slice(0, limit)}\n… (${ids.length - from} tokens in all)` : out;
}

function messageText(m: unknown): string {
  if (!m || typeof m !== 'object') return String(m);
  const o = m as { role?: string; content?: unknown; tool_calls?: unknown };
  const content =
    typeof o.content === 'string' ? o.content : o.content === null || o.content === undefined ? '' : JSON.stringify(o.content);
  const tools = o.tool_calls ? `\n[tool_calls] ${JSON.stringify(o.tool_calls)}` : '';
  return `${o.role ?? '?'}: ${content}${tools}`;
}

export function addedPanel(
  data: ViewerData,
  turn: ViewerTurn,
  byId: Map<string, ViewerTurn>,
  texts: TokenTexts,
  go: (id: string) => void,
  mine: TurnDetails,
  parent: TurnDetails | null,
): HTMLElement {
  const a = addedByHarness(data, turn, byId);
  const box = h('div', { class: 'added', 'data-testid': 'added' });
  if (!a.against) {
    const kind = turn.parent_id === null ? rootKind(data, turn, byId) : null;
    const why =
      data.turns[0] === turn
        ? 'The first call of the rollout'
        : kind === 'root'
          ? 'The start of the main chain (the calls before it were side calls, such as a title request)'
          : kind === 'auxiliary'
            ? 'A side call (no tools: a title, a summary or a check) beside the agent chain'
            : 'A new root that continues no earlier call (a subagent, or a new conversation)';
    box.append(h('p', { 'data-testid': 'new-root' }, `${why}: its whole prompt is what the harness sent.`));
    box.append(h('pre', { class: 'added-text' }, tokensText(turn.prompt_ids, 0, texts)));
    return box;
  }
  const link = h('button', { class: 'link', type: 'button' }, `#${a.against.index} (${a.against.node_id})`);
  link.addEventListener('click', () => go(a.against!.node_id));
  const what =
    a.relation === 'parent'
      ? "its parent's prompt+completion"
      : 'the earlier call it shares the longest prefix with (this turn is a new root)';
  box.append(
    h(
      'p',
      {},
      `Compared with ${what} `,
      link,
      `: ${a.kept} of ${a.referenceLength} tokens kept, ${turn.prompt_ids.length - a.addedFrom} added by the harness.`,
    ),
  );
  if (a.prefixBreak) {
    box.append(
      h(
        'p',
        { class: 'break', role: 'alert', 'data-testid': 'prefix-break' },
        `Prefix break at token ${a.prefixBreak.at}: ` +
          `expected ${a.prefixBreak.expected ?? 'end'} ${fmtTok(a.prefixBreak.expected, texts)}, ` +
          `got ${a.prefixBreak.got ?? 'end of prompt'} ${fmtTok(a.prefixBreak.got, texts)}. ` +
          'The harness rewrote history (compaction, edited messages or a different template), ' +
          'so this turn does not extend the earlier one token for token.',
      ),
    );
  }
  box.append(h('pre', { class: 'added-text', 'data-testid': 'added-text' }, tokensText(turn.prompt_ids, a.addedFrom, texts)));
  const prevMsgs = parent && a.relation === 'parent' ? parent.request_messages.length + (parent.response_message ? 1 : 0) : 0;
  const newMsgs = mine.request_messages.slice(prevMsgs);
  if (newMsgs.length > 0) {
    box.append(h('h4', {}, `Messages added (${newMsgs.length})`));
    for (const m of newMsgs) box.append(h('pre', { class: 'msg' }, messageText(m).slice(0, MAX_TEXT)));
  }
  return box;
}

function fmtTok(id: number | null, texts: TokenTexts): string {
  if (id === null) return '';
  return `(${JSON.stringify(texts.get(id) ?? `⟨${id}⟩`)})`;
}

function json(v: unknown): string {
  const s = JSON.stringify(v, null, 2) ?? 'null';
  return s.length > 400_000 ? `${s.slice(0, 400_000)}\n… (${s.length} characters)` : s;
}

export function rawPanel(d: TurnDetails): HTMLElement {
  if (!d.raw) {
    return h(
      'div',
      { class: 'raw' },
      h('p', {}, 'This file holds TrainingTrace lines, which keep the engine-side messages only:'),
      h('pre', { class: 'raw-json' }, json({ messages: d.request_messages, response: d.response_message })),
    );
  }
  const r = d.raw;
  const tabs = custom('vscode-tabs', { 'data-testid': 'raw-tabs' });
  // Short tab titles so the four fit side by side; the dialect and path head the request's panel.
  const parts: [string, unknown][] = [
    ['Harness request', r.request],
    ['Engine request', r.engine_request],
    ['Engine response', r.engine_response],
    ['Harness response', r.response_body],
  ];
  for (const [title, value] of parts) {
    tabs.append(custom('vscode-tab-header', { slot: 'header', title }, title));
    const head =
      title === 'Harness request' ? [h('div', { class: 'muted', 'data-testid': 'raw-request-route' }, `${r.dialect} · ${r.path}`)] : [];
    tabs.append(custom('vscode-tab-panel', {}, ...head, h('pre', { class: 'raw-json' }, json(value))));
  }
  return h('div', { class: 'raw' }, tabs);
}

export function atifPanel(result: AtifCheckResult | null, go: (id: string) => void, attach: (() => void) | null): HTMLElement {
  const box = h('div', { class: 'atif', 'data-testid': 'atif' });
  if (attach) {
    const b = custom(
      'vscode-button',
      { secondary: '', 'data-testid': 'attach-trajectory' },
      result ? 'Attach another trajectory…' : 'Attach trajectory.json…',
    );
    b.addEventListener('click', attach);
    box.append(b);
  }
  if (!result || result.verdict === 'none') {
    box.append(
      h('p', {}, "No ATIF trajectory attached. Attach the harness's trajectory.json to compare its agent steps with the captured calls."),
    );
    return box;
  }
  box.append(h('p', { class: `verdict v-${result.verdict.toLowerCase()}`, 'data-testid': 'atif-verdict' }, result.summary));
  if (result.findings.length)
    box.append(h('ul', { class: 'findings' }, ...result.findings.map((f) => h('li', { class: gradeClass(f) }, f))));
  const table = h('table', { class: 'atif-table' });
  table.append(
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        h('th', {}, 'Call'),
        h('th', {}, 'Sampled tokens'),
        h('th', {}, 'ATIF step'),
        h('th', {}, 'Step completion tokens'),
        h('th', {}, 'Status'),
      ),
    ),
  );
  const body = h('tbody');
  for (const r of result.rows) {
    const tr = h(
      'tr',
      { class: `st-${r.status}` },
      h('td', {}, r.call_index === null ? '—' : `#${r.call_index}${r.discarded ? ' (retry)' : ''}`),
      h('td', {}, r.n_sampled === null ? '—' : String(r.n_sampled)),
      h('td', {}, r.step_id === null ? '—' : String(r.step_id)),
      h('td', {}, r.step_completion_tokens === null ? '—' : String(r.step_completion_tokens)),
      h('td', {}, r.status.replace(/_/g, ' ')),
    );
    if (r.call_id) {
      tr.tabIndex = 0;
      const id = r.call_id;
      tr.addEventListener('click', () => go(id));
      tr.addEventListener('keydown', (e) => e.key === 'Enter' && go(id));
    }
    body.append(tr);
  }
  table.append(body);
  box.append(table);
  box.append(
    h(
      'p',
      { class: 'muted' },
      `Step-1 prompt tokens: ATIF ${result.step1.atif_prompt_tokens ?? '—'}, captured ${result.step1.captured_prompt_len ?? '—'}. ` +
        `Retries: ${result.retries.atif_steps} step(s) with llm_call_count > 1, ${result.retries.graph_discarded} discarded call(s) in the graph. ` +
        `Subagents: ${result.n_subagents}.`,
    ),
  );
  return box;
}

export function gradeClass(f: string): string {
  return f.startsWith('[FATAL]') ? 'g-fatal' : f.startsWith('[WARN]') ? 'g-warn' : 'g-info';
}

export function findingsPanel(data: ViewerData, turn: ViewerTurn): HTMLElement {
  const box = h('div', { class: 'findings-panel' });
  box.append(h('h4', {}, 'This turn'));
  box.append(
    turn.findings.length
      ? h('ul', { class: 'findings' }, ...turn.findings.map((f) => h('li', { class: gradeClass(f) }, f)))
      : h('p', { class: 'muted' }, 'No findings.'),
  );
  box.append(h('h4', {}, 'Rollout'));
  box.append(
    data.validation.length
      ? h('ul', { class: 'findings' }, ...data.validation.map((f) => h('li', { class: gradeClass(f) }, f)))
      : h('p', { class: 'muted' }, 'No findings.'),
  );
  box.append(
    h(
      'pre',
      { class: 'msg' },
      json({
        model: turn.model,
        finish_reason: turn.finish_reason,
        latency_ms: turn.latency_ms,
        started_at: turn.started_at,
        metadata: data.metadata,
      }),
    ),
  );
  return box;
}
