// The rollout viewer's host side: HTML with a per-load CSP nonce, the ready handshake, zod-validated
// inbound messages, token texts fetched from the engine after the first paint, the ATIF attach flow,
// and a WebviewPanel per session (restored after a reload by the serializer). The custom editor for
// rollout files (rollout-editor.ts) reuses ViewerConnection.
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import * as vscode from 'vscode';
import type { RolloutDocument } from '../capture/rollout.js';
import type { RolloutReadOptions } from '../capture/sessions.js';
import { fetchTokenTexts } from '../capture/token-text.js';
import type { CallRecord } from '../capture/types.js';
import { modelNamesOf, offlineTokenTexts } from '../report/offline-token-texts.js';
import type { AtifCheckResult } from '../harness/atif-check.js';
import {
  ErrorNotification,
  FocusTurnNotification,
  LoadNotification,
  ReadyQueue,
  TokenTextsNotification,
  dispatchWebviewMessage,
  notify,
  type HostMessage,
  type WebviewHandlers,
} from '../protocol/messages.js';
import { sessionOutcome } from './rollout-outcome.js';
import { idsWithoutText, toWire, viewerDataFromRollout, type TurnDetails, type ViewerData } from '../protocol/viewer-data.js';
import { parseWebviewMessage } from '../protocol/webview-schema.js';
import { applyRescore, rescorePathFor } from '../report/rescore-attach.js';
import { checkTrajectory, findTrajectory, type LoadedRollout } from '../report/rollout-loader.js';
import { rescoreRollout, type RescoreReport } from '../export/rescore.js';
import { Disposable, toDisposable } from './lifecycle.js';
import { WebviewWatchdog } from './webview-watchdog.js';

export const ROLLOUT_VIEW_TYPE = 'harnessLab.rolloutViewer';

/** What the viewer needs from the rest of the extension (the proxy controller satisfies most of it). */
export interface RolloutViewerHost {
  extensionUri: vscode.Uri;
  /** Sessions, live or stored. */
  listSessions(): { session_id: string; created_at: string; model?: string | null; metadata?: Record<string, unknown> }[];
  /** A session's rollout document, as its registry builds it (live or stored); throws for an unknown session. */
  rollout(sessionId: string, opts: RolloutReadOptions): RolloutDocument;
  /** The model name for /detokenize (vLLM wants it); empty for the engine's default. */
  model?(): string;
  /** A call was recorded (the record) or sessions changed (undefined): open session viewers refresh. */
  onDidChangeData?(listener: (record: CallRecord | undefined) => void): vscode.Disposable;
  log?(message: string): void;
  /** Prompt-token texts kept with a session's capture while it was live (live-token-texts.ts). */
  storedTokenTexts?(sessionId: string): Record<string, string> | undefined;
  /** Where the embedded engine this extension started builds its model (offline token texts read its GGUF). */
  dataDirs?(): string[];
}

export function viewerHtml(webview: vscode.Webview, extensionUri: vscode.Uri): string {
  const nonce = randomBytes(16).toString('base64');
  const asset = (name: string) => webview.asWebviewUri(vscode.Uri.joinPath(extensionUri, 'dist', 'webview', name)).toString();
  const csp = `default-src 'none'; style-src ${webview.cspSource}; img-src ${webview.cspSource} data:; font-src ${webview.cspSource}; script-src 'nonce-${nonce}';`;
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="${asset('viewer.css')}">
<title>Rollout</title>
</head>
<body>
<div id="app"></div>
<script nonce="${nonce}" src="${asset('viewer.js')}"></script>
</body>
</html>`;
}

/**
 * The viewer page of one panel, set only here: each set has a fresh nonce (a fresh iframe), and a
 * watchdog (webview-watchdog.ts) sets it again when it never says `ready`; after that, one warning
 * offering Developer: Reload Webviews.
 */
export class ViewerPage extends Disposable {
  private readonly watchdog: WebviewWatchdog;

  constructor(
    private readonly panel: vscode.WebviewPanel,
    name: string,
    private readonly extensionUri: vscode.Uri,
    log: (m: string) => void,
  ) {
    super();
    this.watchdog = this._register(
      new WebviewWatchdog(panel, name, {
        reload: () => this.setHtml(),
        log,
        giveUp: () =>
          void vscode.window
            .showWarningMessage(`Harness Lab: the ${name} stays blank: VS Code did not load its page.`, 'Reload Webviews')
            .then((c) => c && vscode.commands.executeCommand('workbench.action.webview.reloadWebviewAction')),
      }),
    );
  }

  /** Sets the page; it should say `ready` soon. */
  show(): void {
    this.setHtml();
    this.watchdog.loading();
  }

  /** The page said `ready`: its script runs. */
  ready(): void {
    this.watchdog.ready();
  }

  private setHtml(): void {
    this.panel.webview.html = viewerHtml(this.panel.webview, this.extensionUri);
  }
}

export function webviewOptions(extensionUri: vscode.Uri): vscode.WebviewOptions {
  return {
    enableScripts: true,
    localResourceRoots: [vscode.Uri.joinPath(extensionUri, 'dist', 'webview'), vscode.Uri.joinPath(extensionUri, 'media')],
  };
}

/** One webview showing one rollout: handshake, inbound validation, token texts, ATIF attach. */
export class ViewerConnection extends Disposable {
  private readonly queue: ReadyQueue<HostMessage>;
  private rollout: LoadedRollout | null = null;
  private details: Record<string, TurnDetails> = {};
  private focus: string | null = null;
  /** The last rescore of this rollout: its drift colours stay through live refreshes. */
  private rescored: RescoreReport | null = null;
  private readonly abort = new AbortController();
  private readonly webview: vscode.Webview;
  private readonly page: ViewerPage;

  constructor(
    panel: vscode.WebviewPanel,
    private readonly host: RolloutViewerHost,
  ) {
    super();
    this.webview = panel.webview;
    this.queue = new ReadyQueue((m) => void this.webview.postMessage(m));
    this._register(toDisposable(() => this.abort.abort()));
    this._register(this.webview.onDidReceiveMessage((raw: unknown) => void this.onMessage(raw)));
    this.page = this._register(new ViewerPage(panel, 'rollout viewer', host.extensionUri, (m) => host.log?.(m)));
  }

  /** Show a rollout; the webview gets it once it has said `ready` (again after every reload). */
  show(rollout: LoadedRollout, focus: string | null = null): void {
    this.rollout = rollout;
    this.focus = focus;
    this.queue.reset();
    this.showPage();
  }

  /** The viewer page, empty until `ready` brings it what it shows (a rollout, or an error). */
  showPage(): void {
    this.page.show();
  }

  /**
   * The same session with more calls: the webview rebuilds and keeps the reader's place (or follows
   * the newest call). Token texts and an attached ATIF check carry over.
   */
  refresh(next: LoadedRollout): void {
    const prev = this.rollout;
    if (prev) {
      next.data.token_texts = { ...prev.data.token_texts, ...next.data.token_texts };
      next.data.atif ??= prev.data.atif;
    }
    if (this.rescored) applyRescore(next.data, this.rescored);
    this.rollout = next;
    // Not listening yet: its `ready` will get this rollout.
    if (!this.queue.isReady) return;
    this.postLoad(next, null);
    void this.loadTokenTexts(next.data);
  }

  /** The rollout to the webview, bypassing the ready queue (callers know the webview listens). */
  private postLoad(rollout: LoadedRollout, focus: string | null): void {
    const { wire, details } = toWire(rollout.data);
    this.details = details;
    void this.webview.postMessage(notify(LoadNotification, { wire, focus }));
  }

  /**
   * Teacher-forces the shown rollout's sampled tokens through `engineUrl` (the same code as
   * `harness-lab rescore`) and colours them by drift, keeping the reader's place. A rollout read from
   * a file gets its report next to it (`<stem>.rescore.json`, as the CLI writes), so it opens coloured.
   */
  async rescore(engineUrl: string, model: string | null): Promise<{ report: RescoreReport; covered: number; saved: string | null }> {
    const rollout = this.rollout;
    if (!rollout) throw new Error('this viewer shows no rollout yet');
    if (!rollout.doc)
      throw new Error(
        'this viewer shows TrainingTrace lines, which keep no behaviour logprobs per call to rescore; open the captured session or its rollout file',
      );
    const report = await rescoreRollout(
      { file: rollout.path || `session ${rollout.doc.session_id}`, info: { session_id: rollout.doc.session_id }, calls: rollout.doc.calls },
      { engineUrl, model },
    );
    if (this.rollout !== rollout) return { report, covered: 0, saved: null };
    this.rescored = report;
    const covered = applyRescore(rollout.data, report);
    let saved: string | null = null;
    if (rollout.path && !rollout.path.endsWith('.rescore.json')) {
      saved = rescorePathFor(rollout.path);
      writeFileSync(saved, `${JSON.stringify(report)}\n`);
    }
    if (this.queue.isReady) this.postLoad(rollout, null);
    return { report, covered, saved };
  }

  focusTurn(nodeId: string): void {
    this.focus = nodeId;
    this.queue.send(notify(FocusTurnNotification, { node_id: nodeId }));
  }

  showError(message: string): void {
    this.queue.send(notify(ErrorNotification, { message }));
  }

  private async onMessage(raw: unknown): Promise<void> {
    const parsed = parseWebviewMessage(raw);
    if (!parsed.ok) {
      this.host.log?.(`rollout viewer: ignored a malformed webview message (${parsed.error})`);
      return;
    }
    await dispatchWebviewMessage(parsed.msg, this.handlers, (reply) => this.queue.send(reply));
  }

  private readonly handlers: WebviewHandlers = {
    ready: () => {
      this.page.ready();
      // The load goes first; anything queued meanwhile (errors, focus) follows it.
      if (this.rollout) this.postLoad(this.rollout, this.focus);
      this.queue.open();
      if (this.rollout) void this.loadTokenTexts(this.rollout.data);
    },
    attachTrajectory: () => this.attach(),
    details: ({ node_id }) => {
      const res = this.details[node_id];
      if (!res) throw new Error(`no turn ${node_id} in this rollout`);
      return res;
    },
    // Only the group view (group-view-panel.ts) shows members to open.
    openGroupMember: ({ rollout_id }) => this.host.log?.(`rollout viewer: ignored openGroupMember ${rollout_id} (not a group view)`),
    // The viewer's buttons run the extension's commands on this viewer's rollout (replay-commands.ts).
    replayRollout: async () => {
      await vscode.commands.executeCommand('harnessLab.replayRollout', this);
    },
    forkFromTurn: async ({ node_id }) => {
      await vscode.commands.executeCommand('harnessLab.forkFromTurn', { viewer: this, nodeId: node_id });
    },
  };

  /** The rollout shown (replay and fork read its calls and task from it). */
  get shown(): LoadedRollout | null {
    return this.rollout;
  }

  /** The ATIF check of a trajectory the user picks; null when they cancel the pick. */
  private async attach(): Promise<AtifCheckResult | null> {
    const rollout = this.rollout;
    if (!rollout) throw new Error('no rollout is shown');
    const near = rollout.path ? findTrajectory(rollout.path) : null;
    const picked = await vscode.window.showOpenDialog({
      title: 'ATIF trajectory of this rollout (trajectory.json)',
      canSelectMany: false,
      filters: { 'ATIF trajectory': ['json'] },
      ...(near ? { defaultUri: vscode.Uri.file(near) } : {}),
    });
    if (!picked?.[0]) return null;
    const res = await checkTrajectory(rollout, picked[0].fsPath);
    rollout.data.atif = res;
    return res;
  }

  /** Prompt-token texts after the first paint: the viewer shows ids until they arrive. */
  private async loadTokenTexts(data: ViewerData): Promise<void> {
    if (idsWithoutText(data).length === 0) return;
    try {
      await this.fetchTokenTexts(data);
    } finally {
      // The viewer says "loading token text…" until this: whatever is still missing stays ids.
      if (!this.abort.signal.aborted) this.queue.send(notify(TokenTextsNotification, { texts: {}, done: true }));
    }
  }

  private async fetchTokenTexts(data: ViewerData): Promise<void> {
    const engineUrl = this.rollout?.doc?.calls.find((c) => c.engine_url)?.engine_url;
    if (idsWithoutText(data).length === 0) return;
    const model = this.host.model?.() || this.rollout?.doc?.calls.find((c) => c.model)?.model || undefined;
    const deliver = (texts: Record<string, string>) => {
      if (!Object.keys(texts).length) return;
      Object.assign(data.token_texts, texts);
      this.queue.send(notify(TokenTextsNotification, { texts }));
    };
    const kept = data.session_id ? this.host.storedTokenTexts?.(data.session_id) : undefined;
    if (kept) deliver(Object.fromEntries(idsWithoutText(data).flatMap((id) => (kept[id] === undefined ? [] : [[String(id), kept[id]!]]))));
    if (engineUrl && idsWithoutText(data).length) {
      try {
        const r = await fetchTokenTexts(engineUrl, idsWithoutText(data), { signal: this.abort.signal, ...(model ? { model } : {}) });
        deliver(r.texts);
        if (r.problem) this.host.log?.(`rollout viewer: ${r.problem}`);
      } catch (err) {
        if (this.abort.signal.aborted) return;
        this.host.log?.(`rollout viewer: token texts unavailable from ${engineUrl}: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
    // The engine is gone (or never named them): the model's tokenizer on this machine.
    const rest = idsWithoutText(data);
    if (rest.length === 0 || this.abort.signal.aborted) return;
    const r = await offlineTokenTexts([...(model ? [model] : []), ...modelNamesOf(data, this.rollout?.doc ?? null)], rest, {
      dataDirs: this.host.dataDirs?.() ?? [],
    });
    if (this.abort.signal.aborted) return;
    deliver(r.texts);
    if (r.problem) {
      this.host.log?.(`rollout viewer: ${r.problem}`);
      this.queue.send(notify(ErrorNotification, { message: r.problem }));
    }
  }
}

/** A session's rollout, as a LoadedRollout (no file path). */
export function loadSession(host: RolloutViewerHost, sessionId: string): LoadedRollout {
  const doc = host.rollout(sessionId, { includeDiscarded: true, includeTraces: false });
  const data = viewerDataFromRollout(doc, { key: sessionId, title: `Session ${sessionId}` });
  data.outcome = sessionOutcome(doc.metadata) ?? null;
  return { data, doc, path: '' };
}

/** Calls arriving closer together than this refresh an open viewer once. */
const LIVE_REFRESH_MS = 400;

/** Viewer panels for captured sessions, one per session, live while calls arrive, restored after a reload. */
export class RolloutViewerPanels extends Disposable {
  private readonly panels = new Map<string, { panel: vscode.WebviewPanel; conn: ViewerConnection }>();
  /** Every open viewer (session panels and rollout-file editors), for actions on the one in front. */
  private readonly shown = new Map<vscode.WebviewPanel, ViewerConnection>();
  private readonly refreshes = new Map<string, NodeJS.Timeout>();

  constructor(private readonly host: RolloutViewerHost) {
    super();
    if (host.onDidChangeData)
      this._register(host.onDidChangeData((record) => this.scheduleRefresh(record ? [record.session_id] : [...this.panels.keys()])));
    this._register(toDisposable(() => [...this.refreshes.values()].forEach(clearTimeout)));
    this._register(
      vscode.window.registerWebviewPanelSerializer(ROLLOUT_VIEW_TYPE, {
        deserializeWebviewPanel: async (panel, state: unknown) => {
          const key = state && typeof state === 'object' ? (state as { lastKey?: unknown }).lastKey : undefined;
          this.adopt(panel, typeof key === 'string' ? key : null, null);
        },
      }),
    );
    this._register(toDisposable(() => [...this.panels.values()].forEach((p) => p.panel.dispose())));
  }

  /** Open (or reveal) the viewer of a session, optionally at one call. */
  open(sessionId: string, focus: string | null = null): vscode.WebviewPanel {
    const existing = this.panels.get(sessionId);
    if (existing) {
      existing.panel.reveal();
      if (focus) existing.conn.focusTurn(focus);
      return existing.panel;
    }
    const panel = vscode.window.createWebviewPanel(
      ROLLOUT_VIEW_TYPE,
      `Rollout ${sessionId}`,
      vscode.ViewColumn.Active,
      webviewOptions(this.host.extensionUri),
    );
    this.adopt(panel, sessionId, focus);
    return panel;
  }

  /** Registers a viewer the custom editor opened, so actions on the viewer in front reach it too. */
  track(panel: vscode.WebviewPanel, conn: ViewerConnection): void {
    this.shown.set(panel, conn);
    panel.onDidDispose(() => this.shown.delete(panel));
  }

  /** The viewer in front (its panel is the active editor), if one is. */
  activeConnection(): ViewerConnection | undefined {
    for (const [panel, conn] of this.shown) if (panel.active) return conn;
    return undefined;
  }

  private scheduleRefresh(sessionIds: string[]): void {
    for (const id of sessionIds) {
      if (!this.panels.has(id) || this.refreshes.has(id)) continue;
      this.refreshes.set(
        id,
        setTimeout(() => {
          this.refreshes.delete(id);
          const open = this.panels.get(id);
          if (!open) return;
          try {
            open.conn.refresh(loadSession(this.host, id));
          } catch (err) {
            open.conn.showError(err instanceof Error ? err.message : String(err));
          }
        }, LIVE_REFRESH_MS),
      );
    }
  }

  private adopt(panel: vscode.WebviewPanel, sessionId: string | null, focus: string | null): void {
    panel.webview.options = webviewOptions(this.host.extensionUri);
    panel.iconPath = vscode.Uri.joinPath(this.host.extensionUri, 'media', 'harness-lab.svg');
    const conn = new ViewerConnection(panel, this.host);
    this.track(panel, conn);
    panel.onDidDispose(() => {
      conn.dispose();
      if (sessionId && this.panels.get(sessionId)?.panel === panel) this.panels.delete(sessionId);
    });
    if (!sessionId) {
      conn.showPage();
      conn.showError('This viewer was restored without its session; open it again from the Sessions view.');
      return;
    }
    panel.title = `Rollout ${sessionId}`;
    this.panels.set(sessionId, { panel, conn });
    try {
      conn.show(loadSession(this.host, sessionId), focus);
    } catch (err) {
      conn.showPage();
      conn.showError(err instanceof Error ? err.message : String(err));
    }
  }
}

/** `harnessLab.openRolloutViewer`: a session or call node from the Sessions tree, or a session id. */
export function viewerTargetOf(arg: unknown): { sessionId: string; focus: string | null } | null {
  if (typeof arg === 'string' && arg) return { sessionId: arg, focus: null };
  if (arg && typeof arg === 'object') {
    const o = arg as { kind?: unknown; sessionId?: unknown; callId?: unknown };
    if (typeof o.sessionId === 'string')
      return { sessionId: o.sessionId, focus: o.kind === 'call' && typeof o.callId === 'string' ? o.callId : null };
  }
  return null;
}
