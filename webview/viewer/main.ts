// Rollout viewer (webview and HTML report). Data comes either from the extension host over the typed
// message protocol (after the `ready` handshake) or, in a report, from an inline JSON script tag.
import '@vscode-elements/elements/dist/vscode-button/index.js';
import '@vscode-elements/elements/dist/vscode-badge/index.js';
import '@vscode-elements/elements/dist/vscode-tabs/index.js';
import '@vscode-elements/elements/dist/vscode-tab-header/index.js';
import '@vscode-elements/elements/dist/vscode-tab-panel/index.js';
import {
  AttachTrajectoryRequest,
  DetailsRequest,
  ErrorNotification,
  FocusTurnNotification,
  LoadGroupNotification,
  LoadNotification,
  OpenGroupMemberCommand,
  ReadyCommand,
  ReplayRolloutCommand,
  ForkFromTurnCommand,
  TokenTextsNotification,
  isMessage,
  type NotificationMessage,
} from '../../src/protocol/messages.js';
import type { AtifCheckResult } from '../../src/harness/atif-check.js';
import type { GroupViewData } from '../../src/protocol/group-data.js';
import {
  fromWire,
  idsWithoutText,
  type RolloutOutcomeView,
  type TurnDetails,
  type ViewerData,
  type ViewerTurn,
  type ViewerWire,
} from '../../src/protocol/viewer-data.js';
import { GraphView } from './graph.js';
import { renderGroup } from './group.js';
import {
  Navigator,
  TokenTexts,
  addedByHarness,
  bridgeKinds,
  liveFocus,
  logprobBucket,
  plural,
  samplesSummary,
  turnTokens,
  type BridgeKinds,
  type TurnTokens,
} from './model.js';
import { addedPanel, atifPanel, findingsPanel, gradeClass, h, rawPanel } from './panels.js';
import { TokenStrip, type TokenDetail } from './strip.js';
import { HostTransport, vsCodeApi, type VsCodeApi } from './transport.js';

interface SavedState {
  positions: Record<string, string>;
  /** The rollout last shown: lets the host's panel serializer reopen it after a reload. */
  lastKey?: string;
  mask: boolean;
  tab: number;
}

/** Where positions are remembered: the webview state in VS Code, sessionStorage in a report. */
function stateStore(api: VsCodeApi | null): { load(): SavedState; save(s: SavedState): void } {
  const empty: SavedState = { positions: {}, mask: false, tab: 0 };
  const coerce = (v: unknown): SavedState => (v && typeof v === 'object' && 'positions' in v ? { ...empty, ...(v as SavedState) } : empty);
  if (api) return { load: () => coerce(api.getState()), save: (s) => api.setState(s) };
  return {
    load: () => {
      try {
        return coerce(JSON.parse(sessionStorage.getItem('harness-lab-viewer') ?? 'null'));
      } catch {
        return empty;
      }
    },
    save: (s) => {
      try {
        sessionStorage.setItem('harness-lab-viewer', JSON.stringify(s));
      } catch {
        /* storage disabled: positions are not remembered */
      }
    },
  };
}

const OUTCOME_WORDS: Record<RolloutOutcomeView['class'], string> = {
  completed: 'solved',
  policy_failure: 'not solved',
  infra_error: 'failed before a reward',
  timeout: 'timed out',
  cancelled: 'cancelled',
};

/** The rollout's outcome under the header: task, harness, reward and class, and the verifier's last lines (its reason). */
function outcomeBanner(o: RolloutOutcomeView): HTMLElement {
  const tone = o.class === 'completed' ? 'ok' : o.class === 'policy_failure' || o.class === 'cancelled' ? 'warn' : 'bad';
  const reward = o.reward === null ? 'no reward' : `reward ${o.reward.toFixed(2)}`;
  const reason = o.error ? o.error.split('\n')[0]! : null;
  return h(
    'section',
    { class: `outcome outcome-${tone}`, 'data-testid': 'outcome', 'aria-label': 'Run outcome' },
    h(
      'div',
      { class: 'outcome-line' },
      h('span', { class: 'outcome-reward', 'data-testid': 'outcome-reward' }, reward),
      h('span', {}, `${OUTCOME_WORDS[o.class]} (${o.class})`),
      h('span', { class: 'muted' }, `task ${o.task} · ${o.harness}`),
    ),
    reason ? h('div', { class: 'outcome-reason', 'data-testid': 'outcome-reason' }, reason) : null,
    o.verifier.length
      ? h(
          'details',
          { class: 'outcome-verifier', open: '' },
          h('summary', {}, 'Verifier output (last lines)'),
          h('pre', { 'data-testid': 'outcome-verifier' }, o.verifier.join('\n')),
        )
      : null,
  );
}

/** How a token-in turn's prompt was built: the anchor kept, the bridge's glue and message tokens. */
function bridgeSummary(b: NonNullable<ViewerTurn['bridge']>, anchorIndex: number | string, bridge: BridgeKinds | null): string {
  const tokens = bridge ? `${bridge.glue} glue + ${bridge.tool} message` : '?';
  const close = b.synthesized_close ? ' (turn close added)' : '';
  const drift = b.drift_tokens ? `; a full render would change ${b.drift_tokens}` : '';
  return `token in: ${b.anchor_tokens} tokens of #${anchorIndex} unchanged, then a bridge of ${tokens} tokens${close}${drift}`;
}
class Viewer {
  private readonly nav: Navigator;
  private readonly texts: TokenTexts;
  private readonly strip: TokenStrip;
  private readonly graph: GraphView;
  private readonly head = h('div', { class: 'turn-head', 'data-testid': 'turn-head' });
  private readonly flags = h('div', { class: 'flags', 'data-testid': 'flags' });
  private readonly detail = h('div', { class: 'detail', 'aria-live': 'polite', 'data-testid': 'detail' });
  private readonly panels: HTMLElement[] = [];
  private readonly maskButton: HTMLElement;
  private readonly verdict = h('span', { class: 'verdict-badge', 'data-testid': 'verdict' });
  /** The colour keys of sampled tokens: logprob buckets, or drift bands when the turn carries a rescore. */
  private readonly logprobLegend = h(
    'span',
    { class: 'legend-part', 'data-testid': 'legend-logprob' },
    ...[0, 1, 2, 3, 4].map((b) => h('span', { class: `t s b${b}` }, ['p≥0.9', 'p≥0.5', 'p≥0.2', 'p≥0.05', 'p<0.05'][b]!)),
  );
  private readonly driftLegend = h('span', { class: 'legend-part', 'data-testid': 'legend-drift', hidden: '' });
  /** "loading token text…" while the host is still fetching prompt-token texts (ids show meanwhile). */
  private readonly textStatus = h('span', { class: 'muted text-status', 'data-testid': 'token-text-status', role: 'status' });
  private current: ViewerTurn;
  private tt: TurnTokens | null = null;
  private state: SavedState;
  private atif: AtifCheckResult | null;
  /** Listeners outside the viewer's own DOM, removed when a live refresh replaces the viewer. */
  private readonly listening = new AbortController();

  constructor(
    private readonly root: HTMLElement,
    private readonly data: ViewerData,
    private readonly host: HostTransport | null,
    private readonly store: ReturnType<typeof stateStore>,
    focus: string | null,
    private readonly details: (nodeId: string) => Promise<TurnDetails>,
  ) {
    this.nav = new Navigator(data);
    this.texts = new TokenTexts(data);
    this.state = store.load();
    this.state.lastKey = data.key;
    this.atif = data.atif;
    // Only a viewer with a host gets texts later; a report shows what it embeds.
    if (host && idsWithoutText(data).length)
      this.textStatus.append(h('span', { class: 'spinner', 'aria-hidden': 'true' }), 'loading token text…');
    const saved = focus ?? this.state.positions[data.key];
    this.current = (saved ? this.nav.byId.get(saved) : undefined) ?? data.turns[0]!;

    const button = (label: string, title: string, testid: string, run: () => void) => {
      const b = document.createElement('vscode-button');
      b.setAttribute('secondary', '');
      b.setAttribute('title', title);
      b.setAttribute('data-testid', testid);
      b.textContent = label;
      b.addEventListener('click', run);
      return b;
    };
    this.maskButton = button('Loss mask', 'Show which tokens train (mask 1) [m]', 'mask-toggle', () => this.toggleMask());
    this.maskButton.setAttribute('aria-pressed', 'false');
    const stats = data.stats;
    const header = h(
      'header',
      { class: 'top' },
      h('h1', {}, data.title),
      h(
        'span',
        { class: 'muted', 'data-testid': 'summary' },
        [
          plural(data.turns.length, 'call'),
          plural(data.graph.roots.length, 'root'),
          data.capture_level,
          data.rollout_type,
          ...(stats ? [`${stats.n_trainable_tokens} trainable tokens`] : []),
        ].join(' · '),
      ),
      h('span', { class: 'muted', 'data-testid': 'samples' }, samplesSummary(data)),
      this.verdict,
      this.textStatus,
      h('span', { class: 'spacer' }),
      // One group: when the header wraps, the turn and branch buttons move together.
      h(
        'div',
        { class: 'nav', role: 'group', 'aria-label': 'Navigate turns' },
        button('‹ Turn', 'Previous turn [k]', 'prev-turn', () => this.step(-1)),
        button('Turn ›', 'Next turn [j]', 'next-turn', () => this.step(1)),
        button('‹ Branch', 'Previous branch [[]', 'prev-branch', () => this.branch(-1)),
        button('Branch ›', 'Next branch []]', 'next-branch', () => this.branch(1)),
        this.maskButton,
      ),
      // In the editor only (the HTML report has no host to run them).
      ...(host
        ? [
            h(
              'div',
              { class: 'nav', role: 'group', 'aria-label': 'Replay' },
              button('Replay', 'Run the harness again with every model call answered from this record', 'replay-rollout', () =>
                host.sendCommand(ReplayRolloutCommand, {}),
              ),
              button(
                'Fork here',
                'Fork this rollout at the turn shown: the turns before it from the record, this one on from a live engine',
                'fork-from-turn',
                () => host.sendCommand(ForkFromTurnCommand, { node_id: this.current.node_id }),
              ),
            ),
          ]
        : []),
    );
    this.graph = new GraphView(data, this.nav.byId, (id) => this.go(id));
    const legend = h(
      'div',
      { class: 'legend', 'aria-hidden': 'true', 'data-testid': 'legend' },
      h('span', { class: 't c' }, 'context'),
      h('span', { class: 't a' }, 'added by harness'),
      h('span', { class: 't br' }, 'bridge (template glue)'),
      h('span', { class: 't tl' }, 'bridge (tool/user messages)'),
      this.logprobLegend,
      this.driftLegend,
      h('span', { class: 't s nolp' }, 'no logprob'),
      h('span', { class: 't s b0 m1' }, 'trains (mask 1)'),
    );
    const turnEl = h('section', { class: 'turn', 'aria-label': 'Turn' }, this.head, this.flags, legend);
    this.strip = new TokenStrip(turnEl, this.texts, (d) => this.showDetail(d));
    turnEl.append(this.detail);
    const tabs = document.createElement('vscode-tabs');
    tabs.className = 'bottom';
    tabs.setAttribute('data-testid', 'bottom-tabs');
    for (const title of ['What the harness added', 'Raw I/O', 'ATIF cross-check', 'Findings']) {
      const header = document.createElement('vscode-tab-header');
      header.setAttribute('slot', 'header');
      header.textContent = title;
      const panel = document.createElement('vscode-tab-panel');
      this.panels.push(panel);
      tabs.append(header, panel);
    }
    tabs.setAttribute('selected-index', String(this.state.tab));
    tabs.addEventListener('vsc-tabs-select', (e) => {
      this.state.tab = (e as CustomEvent<{ selectedIndex: number }>).detail.selectedIndex;
      this.store.save(this.state);
    });
    turnEl.append(tabs);
    root.replaceChildren(
      header,
      ...(data.outcome ? [outcomeBanner(data.outcome)] : []),
      h('div', { class: 'main' }, this.graph.el, turnEl),
    );
    if (this.state.mask) this.setMask(true);
    document.addEventListener('keydown', (e) => this.onKey(e), { signal: this.listening.signal });
    performance.mark('hl-built');
    this.renderAtif();
    this.show(this.current);
    performance.mark('hl-shown');
  }

  go(id: string): void {
    const t = this.nav.byId.get(id);
    if (t) this.show(t);
  }

  /** What a live refresh needs to keep the reader's place (see liveFocus). */
  get place(): { currentId: string; newestId: string | undefined } {
    return { currentId: this.current.node_id, newestId: this.data.turns[this.data.turns.length - 1]?.node_id };
  }

  dispose(): void {
    this.listening.abort();
  }

  private step(d: 1 | -1): void {
    const i = this.nav.indexOf(this.current.node_id) + d;
    const t = this.nav.at(i);
    if (t) this.show(t);
  }

  private branch(d: 1 | -1): void {
    const t = this.nav.branch(this.current, d);
    if (t) this.show(t);
  }

  private toggleMask(): void {
    this.setMask(!this.state.mask);
    this.store.save(this.state);
  }

  private setMask(on: boolean): void {
    this.state.mask = on;
    document.body.classList.toggle('mask-on', on);
    this.maskButton.setAttribute('aria-pressed', String(on));
    this.maskButton.toggleAttribute('secondary', !on);
  }

  private show(turn: ViewerTurn): void {
    this.current = turn;
    this.state.positions[this.data.key] = turn.node_id;
    this.store.save(this.state);
    this.graph.select(turn.node_id);
    this.showLegend(turn);
    const added = addedByHarness(this.data, turn, this.nav.byId);
    const bridge = bridgeKinds(turn, this.texts);
    this.tt = turnTokens(turn, bridge ? bridge.start : added.relation === 'parent' ? added.kept : 0, bridge);
    const nTrain = turn.trained ? turn.sampled_ids.length : 0;
    const b = turn.bridge;
    const how = !b
      ? null
      : b.kind === 'bridge'
        ? bridgeSummary(b, this.nav.byId.get(b.anchor_call_id ?? '')?.index ?? '?', bridge)
        : `token in: full render (${b.new_root_reason ?? 'first call'})`;
    this.head.replaceChildren(
      h('h2', {}, `Turn #${turn.index}`),
      h(
        'span',
        { class: 'muted' },
        `${turn.node_id} · ${turn.role}${turn.discarded ? ' · discarded retry' : ''} · finish ${turn.finish_reason ?? '—'} · ${turn.n_tools} tools`,
      ),
      h(
        'span',
        {
          class: 'counts',
          'data-testid': 'counts',
          'data-prompt': String(turn.prompt_ids.length),
          'data-sampled': String(turn.sampled_ids.length),
          'data-trained': String(nTrain),
        },
        `${turn.prompt_ids.length} prompt · ${turn.sampled_ids.length} sampled · ${nTrain} trained`,
      ),
      h('span', { class: 'muted' }, `position ${this.nav.indexOf(turn.node_id) + 1} of ${this.data.turns.length}`),
      ...(how ? [h('span', { class: 'muted', 'data-testid': 'render-how' }, how)] : []),
    );
    this.flags.replaceChildren(...turn.flags.map((f) => h('div', { class: `flag ${gradeClass(f)}`, role: 'status' }, f)));
    if (turn.match) {
      const m = turn.match;
      const what =
        m.level === 'live'
          ? 'live engine (fork)'
          : m.level === 'none'
            ? 'NO MATCH: the replay halted here'
            : `${m.level} match of recorded call #${m.recorded_index}`;
      this.flags.prepend(
        h(
          'div',
          { class: `flag replay-${m.level}`, role: 'status', 'data-testid': 'replay-match' },
          [`replay: ${what}`, ...m.notes].join(' · '),
        ),
      );
    }
    this.strip.show(this.tt);
    this.detail.textContent = 'Hover or focus a token (Tab into the strip, then arrow keys) to see its id, text, logprob and alternatives.';
    const loading = () => h('p', { class: 'muted' }, 'Loading…');
    this.panels[0]!.replaceChildren(loading());
    this.panels[1]!.replaceChildren(loading());
    this.panels[3]!.replaceChildren(findingsPanel(this.data, turn));
    void this.showDetails(turn);
  }

  /** Raw I/O and messages arrive per turn (host request, or a JSON block of the report). */
  private async showDetails(turn: ViewerTurn): Promise<void> {
    const parent = turn.parent_id ? this.nav.byId.get(turn.parent_id) : undefined;
    let mine: TurnDetails;
    let theirs: TurnDetails | null = null;
    try {
      [mine, theirs] = await Promise.all([this.details(turn.node_id), parent ? this.details(parent.node_id) : Promise.resolve(null)]);
    } catch (err) {
      if (this.current === turn) this.panels[1]!.replaceChildren(h('p', { class: 'g-fatal' }, `Raw I/O unavailable: ${String(err)}`));
      return;
    }
    if (this.current !== turn) return;
    this.panels[0]!.replaceChildren(addedPanel(this.data, turn, this.nav.byId, this.texts, (id) => this.go(id), mine, theirs));
    this.panels[1]!.replaceChildren(rawPanel(mine));
  }

  /** Drift colours replace the logprob buckets on a rescored turn: the legend says which key applies. */
  private showLegend(turn: ViewerTurn): void {
    const drift = turn.drift;
    this.logprobLegend.hidden = Boolean(drift);
    this.driftLegend.hidden = !drift;
    if (!drift) return;
    const t = drift.threshold;
    const band = (x: number) => `|r−1|≤${+x.toFixed(3)}`;
    this.driftLegend.replaceChildren(
      h('span', { class: 'muted' }, 'drift r = rescored/captured p:'),
      h('span', { class: 't s dr0' }, band(t / 4)),
      h('span', { class: 't s dr1' }, band(t / 2)),
      h('span', { class: 't s dr2' }, band(t)),
      h('span', { class: 't s dr3' }, `|r−1|>${+t.toFixed(3)}`),
    );
  }

  private showDetail(d: TokenDetail | null): void {
    if (!d) return;
    const { tt, index: i } = d;
    const id = tt.id(i);
    const sampledAt = i - tt.nPrompt;
    const own = sampledAt >= 0 ? tt.turn.sampled_text?.[sampledAt] : undefined;
    const text = own ?? this.texts.get(id);
    const lp = tt.logprob(i);
    const parts: (Node | string)[] = [
      h('b', {}, sampledAt >= 0 ? `sampled ${sampledAt}` : `context ${i}`),
      ` · id ${id} · `,
      h('code', { 'data-testid': 'detail-text' }, text === undefined ? '(no text)' : JSON.stringify(text)),
      lp === null ? ' · no logprob' : ` · logprob ${lp.toFixed(4)} (p=${Math.exp(lp).toFixed(3)})`,
      ` · mask ${tt.mask(i)}`,
    ];
    // On a rescored turn the colour is the drift: the hover says its ratio next to the logprob.
    const ratio = sampledAt >= 0 ? tt.turn.drift?.ratios[sampledAt] : undefined;
    if (tt.turn.drift)
      parts.push(
        h(
          'span',
          { 'data-testid': 'detail-drift' },
          ratio === undefined
            ? ' · no drift ratio'
            : ` · drift r=${ratio.toFixed(4)} (rescored/captured probability, threshold ±${tt.turn.drift.threshold})`,
        ),
      );
    const alts = sampledAt >= 0 ? tt.turn.top?.[sampledAt] : undefined;
    if (alts && alts.length) {
      parts.push(' · top: ');
      alts.slice(0, 8).forEach((a, k) => {
        if (k) parts.push(', ');
        parts.push(h('span', { class: `alt b${logprobBucket(a.logprob)}` }, `${JSON.stringify(a.text)} ${a.logprob.toFixed(3)}`));
      });
    }
    this.detail.replaceChildren(...parts);
  }

  private renderAtif(): void {
    const attach = this.host ? () => void this.requestAttach() : null;
    this.panels[2]!.replaceChildren(atifPanel(this.atif, (id) => this.go(id), attach));
    const v = this.atif?.verdict ?? 'none';
    this.verdict.textContent = v === 'none' ? '' : v === 'match' ? 'ATIF: match' : 'ATIF: MISMATCH';
    this.verdict.className = `verdict-badge v-${v.toLowerCase()}`;
  }

  private async requestAttach(): Promise<void> {
    if (!this.host) return;
    let res: AtifCheckResult | null;
    try {
      res = await this.host.sendRequest(AttachTrajectoryRequest, {});
    } catch (err) {
      this.flags.append(h('div', { class: 'flag g-fatal', role: 'alert' }, (err as Error).message));
      return;
    }
    if (!res) return;
    this.atif = res;
    this.renderAtif();
  }

  /** A host notification other than `load` (boot turns a load into a new Viewer). */
  onHost(msg: NotificationMessage): void {
    switch (msg.type) {
      case TokenTextsNotification.method:
        this.texts.add(msg.texts);
        if (msg.done) this.textStatus.replaceChildren();
        this.show(this.current);
        break;
      case FocusTurnNotification.method:
        this.go(msg.node_id);
        break;
      case ErrorNotification.method:
        this.textStatus.replaceChildren();
        this.flags.append(h('div', { class: 'flag g-fatal', role: 'alert' }, msg.message));
        break;
      default:
        break;
    }
  }

  private onKey(e: KeyboardEvent): void {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const t = e.target as HTMLElement | null;
    if (t && (t.tagName === 'INPUT' || t.tagName === 'TEXTAREA' || t.isContentEditable)) return;
    const actions: Record<string, () => void> = {
      j: () => this.step(1),
      ArrowDown: () => this.step(1),
      k: () => this.step(-1),
      ArrowUp: () => this.step(-1),
      ']': () => this.branch(1),
      '[': () => this.branch(-1),
      m: () => this.toggleMask(),
      p: () => this.current.parent_id && this.go(this.current.parent_id),
    };
    const run = actions[e.key];
    if (!run) return;
    e.preventDefault();
    run();
  }
}

function fail(root: HTMLElement, message: string): void {
  root.replaceChildren(h('div', { class: 'flag g-fatal', role: 'alert' }, message));
}

/** Details of a report: one JSON block per turn, parsed only when the turn is shown. */
function reportDetails(wire: ViewerWire): (nodeId: string) => Promise<TurnDetails> {
  const index = new Map(wire.turns.map((t, i) => [t.node_id, i]));
  const cache = new Map<string, TurnDetails>();
  return async (nodeId) => {
    let d = cache.get(nodeId);
    if (!d) {
      const el = document.getElementById(`hl-d-${index.get(nodeId)}`);
      d = el ? (JSON.parse(el.textContent ?? 'null') as TurnDetails) : { raw: null, request_messages: [], response_message: null };
      cache.set(nodeId, d);
    }
    return d;
  };
}

/** Details from the host, requested once per turn (again after a failed answer). */
function hostDetails(host: HostTransport): (nodeId: string) => Promise<TurnDetails> {
  const cache = new Map<string, Promise<TurnDetails>>();
  return (nodeId) => {
    let p = cache.get(nodeId);
    if (!p) {
      p = host.sendRequest(DetailsRequest, { node_id: nodeId }).catch((err: unknown) => {
        cache.delete(nodeId);
        throw err;
      });
      cache.set(nodeId, p);
    }
    return p;
  };
}

function boot(): void {
  const root = document.getElementById('app') ?? document.body;
  const group = document.getElementById('hl-group');
  if (group) {
    try {
      renderGroup(root, JSON.parse(group.textContent ?? '') as GroupViewData);
    } catch (err) {
      fail(root, `The report's group data is not valid: ${String(err)}`);
    }
    return;
  }
  const inline = document.getElementById('hl-data');
  if (inline) {
    let wire: ViewerWire;
    let data: ViewerData;
    try {
      performance.mark('hl-parse-start');
      wire = JSON.parse(inline.textContent ?? '') as ViewerWire;
      data = fromWire(wire);
      performance.mark('hl-parsed');
    } catch (err) {
      fail(root, `The report's data is not valid: ${String(err)}`);
      return;
    }
    if (data.turns.length === 0) return fail(root, 'This rollout has no calls.');
    (window as unknown as { harnessLabViewer: Viewer }).harnessLabViewer = new Viewer(
      root,
      data,
      null,
      stateStore(null),
      null,
      reportDetails(wire),
    );
    return;
  }
  const api = vsCodeApi();
  if (!api) return fail(root, 'No data: this page must be opened by the extension or built by `harness-lab report`.');
  let viewer: Viewer | null = null;
  const early: NotificationMessage[] = [];
  const host: HostTransport = new HostTransport(api, (msg) => {
    if (isMessage(LoadGroupNotification, msg)) {
      viewer?.dispose();
      viewer = null;
      // Kept as the webview's state: after a window reload the host's serializer reopens this group.
      if (msg.restore) {
        const saved = api.getState();
        api.setState({ ...(saved && typeof saved === 'object' ? saved : {}), groupView: msg.restore });
      }
      renderGroup(root, msg.group, { openMember: (id) => host.sendCommand(OpenGroupMemberCommand, { rollout_id: id }) });
    } else if (isMessage(LoadNotification, msg)) {
      performance.mark('hl-parse-start');
      let data: ViewerData;
      try {
        data = fromWire(msg.wire);
      } catch (err) {
        return fail(root, `The rollout could not be read: ${String(err)}`);
      }
      performance.mark('hl-parsed');
      if (data.turns.length === 0) return fail(root, 'This rollout has no calls yet.');
      // A second load is a live session's refresh: keep the reader's place, or follow the newest call.
      const focus = msg.focus ?? (viewer ? liveFocus(viewer.place, data) : null);
      viewer?.dispose();
      viewer = new Viewer(root, data, host, stateStore(api), focus, details);
      (window as unknown as { harnessLabViewer: Viewer }).harnessLabViewer = viewer;
      for (const m of early.splice(0)) viewer.onHost(m);
    } else if (viewer) viewer.onHost(msg);
    else if (isMessage(ErrorNotification, msg)) fail(root, msg.message);
    else early.push(msg);
  });
  const details = hostDetails(host);
  root.replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
  host.sendCommand(ReadyCommand, { version: 1 });
}

boot();
