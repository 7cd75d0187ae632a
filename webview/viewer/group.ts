// The group view: one GRPO group's members side by side, reward histograms, the first divergence of
// two members with their sampled tokens aligned, behaviour metrics as a table and a chart. Shared by
// the webview (LoadGroupNotification) and `harness-lab report --batch DIR --group G` (inline JSON).
// Plain DOM and SVG; text always goes through textContent.
import type { GroupDivergence, GroupMemberView, GroupViewData, RewardHistogram, StripToken } from '../../src/protocol/group-data.js';
import type { SampleAccount, SampleTotals } from '../../src/capture/samples.js';
import type { BehaviourAggregate } from '../../src/export/behaviour.js';
import { logprobBucket } from './model.js';
import { h } from './panels.js';

const SVG = 'http://www.w3.org/2000/svg';

function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number>,
  ...children: (SVGElement | string)[]
): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.append(c);
  return el;
}

const fmt = (x: number | null | undefined, d = 2) => (x === null || x === undefined ? '–' : x.toFixed(d));

function classLabel(m: GroupMemberView): string {
  if (m.state !== 'done' && m.state !== 'discarded') return `unfinished (${m.state})`;
  if (m.class === 'completed') return 'completed';
  if (m.class === 'policy_failure') return 'policy failure';
  return `discarded: ${m.class === 'timeout' ? 'timeout' : 'infra error'}`;
}

/** A bar chart of one reward histogram; the bin of each value in `marks` is outlined. */
function histogramChart(title: string, hist: RewardHistogram, testid: string): HTMLElement {
  const W = 220;
  const H = 70;
  const bw = W / hist.counts.length;
  const top = Math.max(1, ...hist.counts);
  const bars = hist.counts.map((c, k) => {
    const bh = (c / top) * (H - 14);
    const lo = hist.edges[k]!;
    const hi = hist.edges[k + 1]!;
    return svg(
      'rect',
      { x: k * bw + 1, y: H - 12 - bh, width: bw - 2, height: bh, class: 'hist-bar', 'data-count': c, 'data-bin': k },
      svg('title', {}, `[${lo.toFixed(2)}, ${hi.toFixed(2)}${k === hist.counts.length - 1 ? ']' : ')'}: ${c}`),
    );
  });
  const axis = [
    svg('text', { x: 0, y: H - 1, class: 'hist-axis' }, hist.edges[0]!.toFixed(1)),
    svg('text', { x: W, y: H - 1, 'text-anchor': 'end', class: 'hist-axis' }, hist.edges[hist.edges.length - 1]!.toFixed(1)),
  ];
  return h(
    'figure',
    { class: 'hist', 'data-testid': testid, 'data-counts': hist.counts.join(',') },
    svg(
      'svg',
      { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', 'aria-label': `${title}: ${hist.n} rewards` },
      ...bars,
      ...axis,
    ),
    h('figcaption', {}, `${title} (n=${hist.n})`),
  );
}

/** What the group view can ask of its host (none in a report page). */
export interface GroupHost {
  /** Opens a member's captured session in the rollout viewer. */
  openMember(rolloutId: string): void;
}

function openButton(m: GroupMemberView, host: GroupHost | null): HTMLElement | null {
  if (!host || !m.session_id) return null;
  const button = h(
    'button',
    {
      class: 'open-member',
      type: 'button',
      'data-testid': 'open-member',
      title: `Open ${m.rollout_id} (session ${m.session_id}) in the rollout viewer`,
    },
    'Open in Rollout Viewer',
  );
  button.addEventListener('click', () => host.openMember(m.rollout_id));
  return button;
}

const count = (n: number) => n.toLocaleString('en-US');

/** "1 sample, 10,973 tokens to the trainer (1.00x the merged 10,973)". */
export function memberSamplesText(a: SampleAccount | null): string {
  if (!a) return '– (no token ids)';
  const ratio = a.merged_tokens > 0 ? ` (${(a.tokens_to_trainer / a.merged_tokens).toFixed(2)}x the merged ${count(a.merged_tokens)})` : '';
  return `${a.samples} sample${a.samples === 1 ? '' : 's'}, ${count(a.tokens_to_trainer)} tokens to the trainer${ratio}`;
}

/** "1.00 samples/rollout, 1.00x the merged length, 0 unparsed tool calls (4 rollouts)". */
export function totalsText(t: SampleTotals): string {
  if (t.rollouts === 0) return 'no kept rollout with token ids';
  const ratio = t.token_ratio === null ? '–' : `${t.token_ratio.toFixed(2)}x`;
  const unparsed = `${t.unparsed_tool_calls} unparsed tool call${t.unparsed_tool_calls === 1 ? '' : 's'}`;
  const rollouts = `${t.rollouts} rollout${t.rollouts === 1 ? '' : 's'}`;
  return (
    `${t.samples_per_rollout!.toFixed(2)} samples/rollout, ` +
    `${count(t.tokens_to_trainer)} tokens to the trainer (${ratio} the merged length), ${unparsed} (${rollouts})`
  );
}

function samplesSection(data: GroupViewData): HTMLElement {
  const row = (name: string, t: SampleTotals, testid: string) =>
    h('tr', { 'data-testid': testid }, h('th', {}, name), h('td', {}, totalsText(t)));
  return h(
    'section',
    { class: 'group-samples', 'data-testid': 'samples' },
    h('h2', {}, 'Samples to the trainer'),
    h(
      'table',
      {},
      h(
        'tbody',
        {},
        row('group', data.samples.group, 'samples-group'),
        row(`harness ${data.harness}`, data.samples.harness, 'samples-harness'),
        row('batch', data.samples.batch, 'samples-batch'),
      ),
    ),
  );
}

function memberCard(m: GroupMemberView, host: GroupHost | null): HTMLElement {
  const b = m.behaviour;
  const cls = m.kept ? (m.class === 'completed' ? 'ok' : 'fail') : 'discarded';
  const unseen = b?.unknown_tool_calls ? `, ${b.unknown_tool_calls} unseen` : '';
  const unparsed = m.samples?.unparsed_tool_calls ? `, ${m.samples.unparsed_tool_calls} did not parse` : '';
  return h(
    'article',
    { class: `member-card m-${cls}`, 'data-testid': 'member-card', 'data-rollout': m.rollout_id },
    h(
      'header',
      {},
      h('strong', {}, `#${m.member} ${m.rollout_id}`),
      h('span', { class: 'reward', 'data-testid': 'member-reward' }, m.reward === null ? 'reward –' : `reward ${+m.reward.toFixed(3)}`),
    ),
    h('div', { class: 'member-class', 'data-testid': 'member-class' }, classLabel(m)),
    m.excluded ? h('div', { class: 'muted' }, `not in the baseline: ${m.excluded}${m.error ? ` (${m.error})` : ''}`) : null,
    m.capture_problem ? h('div', { class: 'muted' }, `capture: ${m.capture_problem}`) : null,
    h(
      'dl',
      {},
      h('dt', {}, 'turns'),
      h('dd', {}, `${m.turns} (${m.calls} calls)`),
      h('dt', {}, 'tool calls'),
      h('dd', {}, b ? `${m.tool_calls} (${b.failed_tool_calls} failed${unseen}${unparsed})` : String(m.tool_calls)),
      h('dt', {}, 'tokens'),
      h('dd', {}, `${m.sampled_tokens} sampled, ${m.prompt_tokens} prompt`),
      h('dt', {}, 'samples'),
      h('dd', { 'data-testid': 'member-samples' }, memberSamplesText(m.samples)),
      h('dt', {}, 'self-verified'),
      h('dd', {}, b ? (b.verification ? `yes (${b.verification.kind}, turn ${b.verification.turn + 1})` : 'no') : '–'),
    ),
    openButton(m, host),
  );
}

function stripRow(label: string, tokens: StripToken[], start: number, at: number | null, testid: string): HTMLTableRowElement {
  return h(
    'tr',
    { 'data-testid': testid },
    h('th', {}, label),
    ...tokens.map((t, k) => {
      const pos = start + k;
      const cell = h('td', {
        class: `t s ${t.logprob === null ? 'nolp' : `b${logprobBucket(t.logprob)}`}${pos === at ? ' div' : ''}`,
        'data-pos': String(pos),
        title: `#${t.id} at ${pos}${t.logprob === null ? '' : ` logprob ${t.logprob.toFixed(3)}`}`,
      });
      cell.textContent = t.text.replace(/\n/g, '⏎');
      return cell;
    }),
  );
}

function divergenceText(d: GroupDivergence): string {
  if (d.call === null) return `${d.a} and ${d.b} are identical on their main paths`;
  if (d.prefix_of) return `${d.a} and ${d.b} agree until call ${d.call + 1}, where the shorter one stopped`;
  const parts = [`${d.a} and ${d.b} first diverge at call ${d.call + 1}`];
  if (d.prompt_index !== null) parts.push(`prompt token ${d.prompt_index} (the environment answered differently)`);
  if (d.token_index !== null) parts.push(`sampled token ${d.token_index}`);
  return `${parts.join(', ')}; rewards ${fmt(d.reward_a, 3)} vs ${fmt(d.reward_b, 3)}`;
}

function divergenceSection(data: GroupViewData): HTMLElement {
  const box = h('section', { class: 'group-div', 'data-testid': 'divergence' }, h('h2', {}, 'Where two members diverge'));
  if (data.divergences.length === 0) {
    box.append(h('p', { class: 'muted' }, 'Fewer than two members have captured calls.'));
    return box;
  }
  const select = h('select', { 'data-testid': 'pair-select', 'aria-label': 'pair of members' });
  data.divergences.forEach((d, i) => {
    const o = h('option', { value: String(i) }, `${d.a} vs ${d.b}${d.call === null ? ' (identical)' : ` (call ${d.call + 1})`}`);
    if (i === data.focus_pair) o.selected = true;
    select.append(o);
  });
  const body = h('div', {});
  const show = (i: number) => {
    const d = data.divergences[i]!;
    const table = h(
      'table',
      { class: 'div-strip' },
      h(
        'tbody',
        {},
        stripRow(d.a, d.a_tokens, d.window_start, d.token_index, 'strip-a'),
        stripRow(d.b, d.b_tokens, d.window_start, d.token_index, 'strip-b'),
      ),
    );
    body.replaceChildren(
      h('p', { 'data-testid': 'divergence-text' }, divergenceText(d)),
      d.a_tokens.length || d.b_tokens.length
        ? h('div', { class: 'div-scroll' }, table)
        : h('p', { class: 'muted' }, 'No sampled tokens differ at this call.'),
    );
  };
  select.addEventListener('change', () => show(Number(select.value)));
  show(data.focus_pair ?? 0);
  box.append(h('label', {}, 'pair ', select), body);
  return box;
}

function aggregateRow(name: string, a: BehaviourAggregate): HTMLTableRowElement {
  return h(
    'tr',
    { class: 'agg' },
    h('th', {}, `${name} (${a.rollouts})`),
    h('td', {}, fmt(a.mean_tool_calls)),
    h('td', {}, fmt(a.mean_failed_tool_calls)),
    h('td', {}, fmt(a.error_recovery)),
    h('td', {}, fmt(a.self_verification)),
    h('td', {}, fmt(a.mean_tool_coverage)),
    h('td', {}, fmt(a.mean_turns_to_first_success)),
  );
}

/** Per member: tool calls as a stacked bar (ok, failed, result unseen). */
function behaviourChart(members: GroupMemberView[]): SVGSVGElement {
  const rowH = 16;
  const W = 260;
  const most = Math.max(1, ...members.map((m) => m.behaviour?.tool_calls ?? 0));
  const scale = (W - 70) / most;
  const rows = members.flatMap((m, i) => {
    const b = m.behaviour;
    const y = i * rowH;
    const failed = b?.failed_tool_calls ?? 0;
    const unseen = b?.unknown_tool_calls ?? 0;
    const ok = (b?.tool_calls ?? 0) - failed - unseen;
    let x = 70;
    const seg = (n: number, cls: string) => {
      const r = svg('rect', { x, y: y + 2, width: n * scale, height: rowH - 4, class: cls, 'data-n': n });
      x += n * scale;
      return r;
    };
    return [
      svg('text', { x: 0, y: y + rowH - 4, class: 'chart-label' }, m.rollout_id),
      seg(ok, 'bar-ok'),
      seg(failed, 'bar-failed'),
      seg(unseen, 'bar-unseen'),
    ];
  });
  return svg(
    'svg',
    {
      viewBox: `0 0 ${W} ${members.length * rowH}`,
      width: W,
      height: members.length * rowH,
      role: 'img',
      'aria-label': 'tool calls per member: ok, failed, unseen',
      'data-testid': 'behaviour-chart',
    },
    ...rows,
  );
}

function behaviourSection(data: GroupViewData): HTMLElement {
  const head = h(
    'tr',
    {},
    ...['', 'tool calls', 'failed', 'recovery', 'self-verify', 'coverage', 'first success'].map((t) => h('th', {}, t)),
  );
  const rows = data.members.map((m) => {
    const b = m.behaviour;
    return h(
      'tr',
      { 'data-rollout': m.rollout_id },
      h('th', {}, m.rollout_id),
      h('td', {}, b ? String(b.tool_calls) : '–'),
      h('td', {}, b ? String(b.failed_tool_calls) : '–'),
      h('td', {}, fmt(b?.error_recovery)),
      h('td', {}, b ? (b.self_verified ? 'yes' : 'no') : '–'),
      h('td', {}, fmt(b?.tool_coverage)),
      h('td', {}, b?.turns_to_first_success === null || !b ? '–' : `turn ${b.turns_to_first_success}`),
    );
  });
  return h(
    'section',
    { class: 'group-behaviour', 'data-testid': 'behaviour' },
    h('h2', {}, 'Behaviour'),
    h(
      'table',
      { class: 'behaviour-table', 'data-testid': 'behaviour-table' },
      h('thead', {}, head),
      h(
        'tbody',
        {},
        ...rows,
        aggregateRow('group', data.behaviour.group),
        aggregateRow(`harness ${data.harness}`, data.behaviour.harness),
        aggregateRow('batch', data.behaviour.batch),
      ),
    ),
    h(
      'div',
      { class: 'chart' },
      behaviourChart(data.members),
      h('span', { class: 'muted legend' }, 'tool calls: ok, failed, result unseen'),
    ),
  );
}

export function renderGroup(root: HTMLElement, data: GroupViewData, host: GroupHost | null = null): void {
  performance.mark('hl-group-start');
  const badge = data.teaches_nothing
    ? h('span', { class: 'no-contrast', 'data-testid': 'teaches-nothing', role: 'status' }, `teaches nothing: ${data.teaches_nothing}`)
    : null;
  const head = h(
    'div',
    { class: 'top' },
    h('h1', {}, `Group ${data.group_id}`),
    h(
      'span',
      { class: 'muted' },
      `batch ${data.batch_id} · task ${data.task} · harness ${data.harness} · ${data.members.length}/${data.group_size} members`,
    ),
    h(
      'span',
      { 'data-testid': 'group-stats' },
      `rewards [${data.rewards.map((r) => +r.toFixed(3)).join(', ')}] mean ${fmt(data.mean, 3)} std ${fmt(data.std, 3)}`,
    ),
    badge,
    data.policy_note ? h('div', { class: 'policy-note', 'data-testid': 'policy-note', role: 'note' }, `Why: ${data.policy_note}`) : null,
  );
  const hists = h(
    'section',
    { class: 'group-hists', 'data-testid': 'histograms' },
    h('h2', {}, 'Rewards'),
    h(
      'div',
      { class: 'hist-row' },
      histogramChart('this group', data.histogram.group, 'histogram-group'),
      histogramChart('batch', data.histogram.batch, 'histogram-batch'),
      ...Object.entries(data.histogram.harnesses).map(([name, hist]) =>
        histogramChart(`harness ${name}`, hist, `histogram-harness-${name}`),
      ),
    ),
  );
  const cards = h('section', { class: 'group-members', 'data-testid': 'members' }, ...data.members.map((m) => memberCard(m, host)));
  root.replaceChildren(
    h(
      'div',
      { class: 'group-view', 'data-testid': 'group-view' },
      head,
      cards,
      hists,
      samplesSection(data),
      divergenceSection(data),
      behaviourSection(data),
    ),
  );
  performance.mark('hl-group-painted');
}
