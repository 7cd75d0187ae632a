// The group view's host side: one webview panel per (batch, group), showing the members of one GRPO
// group side by side (webview/viewer/group.ts, the same bundle as the rollout viewer). The data is
// what `harness-lab report --batch DIR --group G` inlines (src/report/group-view.ts); it goes to the
// webview as `loadGroup` after the webview's `ready`, and is rebuilt on every `ready` (the webview
// reloads when its tab is shown again), so a running batch's group is current when looked at.
// A member's "Open in Rollout Viewer" opens its captured session beside the group. The webview keeps
// (dir, group) as its state, so a window reload brings the view back (the panel serializer).
// The same view shows a rollout and its forks (`replay --from N`): group FORKS_GROUP, dir the original's file.
import { existsSync } from 'node:fs';
import * as vscode from 'vscode';
import { z } from 'zod';
import type { GroupViewData } from '../protocol/group-data.js';
import {
  ErrorNotification,
  LoadGroupNotification,
  ReadyQueue,
  dispatchWebviewMessage,
  notify,
  type HostMessage,
  type WebviewHandlers,
} from '../protocol/messages.js';
import { parseWebviewMessage } from '../protocol/webview-schema.js';
import { buildForkGroupView, buildGroupView } from '../report/group-view.js';
import { forkMembers } from '../replay/forks.js';
import { batchReadError, deterministicPolicyNote, memberSessionFile } from './batch-review-model.js';
import { Disposable, toDisposable } from './lifecycle.js';
import { ViewerPage, webviewOptions } from './rollout-viewer-panel.js';

export const GROUP_VIEW_TYPE = 'harnessLab.groupView';

export interface GroupViewHost {
  extensionUri: vscode.Uri;
  log(message: string): void;
  /** Opens a captured session file in the rollout viewer. */
  openSession(file: string): Thenable<unknown>;
}

/** The group id of a fork view: `dir` is then the original rollout's file, its forks found beside its rollout folder. */
export const FORKS_GROUP = '@forks';

/** The group's data, or the batch's error in the user's terms. */
export function loadGroupView(dir: string, groupId: string): GroupViewData {
  if (groupId === FORKS_GROUP) {
    const { original, forks } = forkMembers(dir);
    return buildForkGroupView(original, forks);
  }
  try {
    const data = buildGroupView(dir, groupId);
    // A group without contrast on the embedded engine: say when its policy could not have given any.
    if (data.no_contrast) data.policy_note = deterministicPolicyNote(dir, data.task) ?? null;
    return data;
  } catch (err) {
    throw batchReadError('show a group of', dir, err);
  }
}

/** One webview showing one group: handshake, inbound validation, opening members. */
class GroupViewConnection extends Disposable {
  private readonly queue: ReadyQueue<HostMessage>;
  private data: GroupViewData | null = null;
  private readonly webview: vscode.Webview;
  private readonly page: ViewerPage;

  constructor(
    panel: vscode.WebviewPanel,
    private readonly host: GroupViewHost,
    private readonly dir: string,
    private readonly groupId: string,
    /**
     * Built by `open` just now, so the first `ready` need not build it again; null for a view
     * restored after a reload (read at its first `ready`). Used once.
     */
    private built: GroupViewData | null,
  ) {
    super();
    this.webview = panel.webview;
    this.queue = new ReadyQueue((m) => void this.webview.postMessage(m));
    this._register(this.webview.onDidReceiveMessage((raw: unknown) => void this.onMessage(raw)));
    this.page = this._register(new ViewerPage(panel, 'group view', host.extensionUri, (m) => host.log(m)));
    this.page.show();
  }

  private async onMessage(raw: unknown): Promise<void> {
    const parsed = parseWebviewMessage(raw);
    if (!parsed.ok) {
      this.host.log(`group view: ignored a malformed webview message (${parsed.error})`);
      return;
    }
    await dispatchWebviewMessage(parsed.msg, this.handlers, (reply) => this.queue.send(reply));
  }

  private readonly handlers: WebviewHandlers = {
    ready: () => {
      this.page.ready();
      this.queue.reset();
      let data: GroupViewData;
      try {
        data = this.built ?? loadGroupView(this.dir, this.groupId);
        this.built = null;
        this.data = data;
      } catch (err) {
        // The batch changed under an open view (deleted, rewritten): say so in the view, keep nothing stale.
        void this.webview.postMessage(notify(ErrorNotification, { message: err instanceof Error ? err.message : String(err) }));
        this.queue.open();
        return;
      }
      void this.webview.postMessage(notify(LoadGroupNotification, { group: data, restore: { dir: this.dir, group_id: this.groupId } }));
      this.queue.open();
    },
    attachTrajectory: () => {
      throw new Error('the group view shows no single rollout: open a member in the rollout viewer to attach its trajectory');
    },
    details: () => {
      throw new Error('the group view has no turn details');
    },
    replayRollout: () => this.host.log('group view: ignored replayRollout (open a member in the rollout viewer to replay it)'),
    forkFromTurn: () => this.host.log('group view: ignored forkFromTurn (open a member in the rollout viewer to fork it)'),
    openGroupMember: async ({ rollout_id }) => {
      const member = this.data?.members.find((m) => m.rollout_id === rollout_id);
      if (!member) {
        this.host.log(`group view: no member ${rollout_id} in group ${this.groupId}`);
        return;
      }
      if (this.groupId === FORKS_GROUP) {
        // A fork view's members are rollout files (the original and each fork's rollout folder).
        const { original, forks } = forkMembers(this.dir);
        const file = [original, ...forks].find((m) => m.label === rollout_id)?.rolloutFile;
        if (file && existsSync(file))
          await vscode.commands.executeCommand(
            'vscode.openWith',
            vscode.Uri.file(file),
            'harnessLab.rolloutFile',
            vscode.ViewColumn.Beside,
          );
        else void vscode.window.showWarningMessage(`Harness Lab: ${rollout_id} has no rollout file to open.`);
        return;
      }
      const file = memberSessionFile(this.dir, member.session_id);
      if (!file || !existsSync(file)) {
        void vscode.window.showWarningMessage(
          `Harness Lab: rollout ${rollout_id} has no captured session to open${file ? ` (${file} is missing)` : ' (it never reached the proxy)'}.`,
        );
        return;
      }
      await this.host.openSession(file);
    },
  };
}

/** What a group view's webview keeps as its state (webview/viewer/main.ts), checked when a reload restores it. */
const RestoredGroupViewState = z.looseObject({
  groupView: z.strictObject({ dir: z.string().min(1).max(4096), group_id: z.string().min(1).max(500) }),
});

/** Group view panels, one per batch group; revealed again when opened twice, restored after a reload. */
export class GroupViewPanels extends Disposable {
  private readonly panels = new Map<string, vscode.WebviewPanel>();

  constructor(private readonly host: GroupViewHost) {
    super();
    this._register(toDisposable(() => [...this.panels.values()].forEach((p) => p.dispose())));
    this._register(
      vscode.window.registerWebviewPanelSerializer(GROUP_VIEW_TYPE, {
        deserializeWebviewPanel: async (panel, state: unknown) => {
          const parsed = RestoredGroupViewState.safeParse(state);
          if (!parsed.success) {
            // A view from before views were restorable, or a state that is not ours: nothing to show.
            this.host.log(`group view: not restored (its saved state names no batch group)`);
            panel.dispose();
            return;
          }
          const { dir, group_id: groupId } = parsed.data.groupView;
          panel.webview.options = webviewOptions(this.host.extensionUri);
          // Read at the webview's first `ready`: a batch deleted since shows its error in the view.
          this.adopt(panel, dir, groupId, null);
        },
      }),
    );
  }

  /** A rollout and its forks side by side, beside the editor in front. */
  openForks(rolloutFile: string): vscode.WebviewPanel {
    return this.open(rolloutFile, FORKS_GROUP, vscode.ViewColumn.Beside);
  }

  /** Opens (or reveals) the view of one group; throws in the user's terms when the batch or group cannot be read. */
  open(dir: string, groupId: string, column: vscode.ViewColumn = vscode.ViewColumn.Active): vscode.WebviewPanel {
    const key = `${dir}\0${groupId}`;
    const existing = this.panels.get(key);
    if (existing) {
      // A fork view opened again has a new fork to show: build it afresh.
      if (groupId !== FORKS_GROUP) {
        existing.reveal();
        return existing;
      }
      existing.dispose();
    }
    const data = loadGroupView(dir, groupId);
    const title = groupId === FORKS_GROUP ? `Forks of ${data.group_id.replace(/^forks of /, '')}` : `Group ${groupId}`;
    const panel = vscode.window.createWebviewPanel(GROUP_VIEW_TYPE, title, column, webviewOptions(this.host.extensionUri));
    this.adopt(panel, dir, groupId, data);
    return panel;
  }

  private adopt(panel: vscode.WebviewPanel, dir: string, groupId: string, data: GroupViewData | null): void {
    const key = `${dir}\0${groupId}`;
    panel.iconPath = vscode.Uri.joinPath(this.host.extensionUri, 'media', 'harness-lab.svg');
    const conn = new GroupViewConnection(panel, this.host, dir, groupId, data);
    this.panels.set(key, panel);
    panel.onDidDispose(() => {
      conn.dispose();
      if (this.panels.get(key) === panel) this.panels.delete(key);
    });
  }
}
