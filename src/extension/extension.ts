// Harness Lab in VS Code: the capture proxy runs in this extension host (same code as the CLI),
// with Sessions/Tasks/Engines views, a status bar item and commands. Activation only wires things
// up: no network, no Docker, no file scans until a view or command asks.
import * as vscode from 'vscode';
import { z } from 'zod';
import { CaptureProxy } from '../capture/proxy.js';
import type { CallRecord } from '../capture/types.js';
import { BatchesView } from './batches-view.js';
import { currentSettings } from './command-host.js';
import { registerCommands } from './commands.js';
import { EngineSlot } from './embedded-engine-process.js';
import { EnginesView } from './engines-view.js';
import { GroupViewPanels } from './group-view-panel.js';
import { Disposable, toDisposable } from './lifecycle.js';
import { LiveTokenTexts } from './live-token-texts.js';
import { Logger } from './logger.js';
import { ProxyController, type EngineStatus, type ProxyState } from './proxy-controller.js';
import { ReadonlyDocuments } from './readonly-docs.js';
import type { SessionRow } from './sessions-model.js';
import { SessionsView } from './sessions-view.js';
import { SETTINGS_SECTION } from './settings.js';
import { registerRolloutViewer } from './rollout-editor.js';
import { ProxyStatusBar } from './status-bar.js';
import { TasksView } from './tasks-view.js';
import { TrainingRuns } from './training-runs.js';

/** What `activate` returns: read-only access for other extensions and the extension-host tests. */
export interface HarnessLabApi {
  readonly state: ProxyState;
  listSessions(): SessionRow[];
  getCalls(sessionId: string): CallRecord[];
  /** The session's TrainingTrace JSONL, as "Export Session" writes it. */
  exportTraces(sessionId: string): string;
  onDidChangeData(listener: () => void): vscode.Disposable;
}

class HarnessLab extends Disposable {
  readonly controller: ProxyController<CaptureProxy>;
  readonly api: HarnessLabApi;

  constructor(context: vscode.ExtensionContext) {
    super();
    const log = this._register(new Logger(vscode.window.createOutputChannel('Harness Lab', { log: true })));
    const controller = (this.controller = this._register(
      new ProxyController<CaptureProxy>({
        startProxy: (opts) => CaptureProxy.start(opts),
        logger: log,
        defaultDataDir: context.globalStorageUri.fsPath,
        rememberedEngines: rememberedEngines(context.globalState.get(ENGINES_KEY)),
        rememberedPort: rememberedPort(context.workspaceState.get(PROXY_PORT_KEY)),
      }),
    ));
    this._register(controller.onDidChangeEngines(() => void context.globalState.update(ENGINES_KEY, controller.probedEngines())));
    this._register(
      controller.onDidChangeState((st) => st.kind === 'running' && void context.workspaceState.update(PROXY_PORT_KEY, st.port)),
    );
    // The embedded engine this workspace owns: remembered in workspace state, never in User settings.
    const engineSlot = this._register(
      new EngineSlot({
        get: () => context.workspaceState.get(OWNED_ENGINE_KEY),
        set: (v) => void context.workspaceState.update(OWNED_ENGINE_KEY, v),
      }),
    );
    this._register(
      engineSlot.onDidExit(({ url, pid }) => {
        log.warn(`the embedded engine on ${url} (pid ${pid ?? '?'}) exited; its port is dead`);
        controller.noteEngine(url, { reachability: 'unreachable', detail: 'the embedded engine process exited' });
      }),
    );
    const engineUrl = () => safeSettings()?.engineUrl ?? '';
    const sessions = this._register(new SessionsView(controller));
    const tasks = this._register(new TasksView(log));
    const engines = this._register(
      new EnginesView(
        controller,
        () => [engineUrl()].filter(Boolean),
        () => engineSlot.current,
      ),
    );
    const batches = this._register(new BatchesView(() => safeSettings()?.batchesFolder ?? ''));
    const statusBar = this._register(new ProxyStatusBar(controller, engineUrl));

    const showStored = () => {
      const settings = safeSettings();
      if (settings && !controller.running) controller.useStoredSessions(controller.resolveDataDir(settings));
    };
    const setContext = () => {
      void vscode.commands.executeCommand('setContext', 'harnessLab.proxyRunning', controller.state.kind === 'running');
      void vscode.commands.executeCommand('setContext', 'harnessLab.engineConfigured', engineUrl() !== '');
      void vscode.commands.executeCommand('setContext', 'harnessLab.embeddedEngineRunning', engineSlot.current !== undefined);
    };
    this._register(controller.onDidChangeState(() => setContext()));
    this._register(engineSlot.onDidChange(() => (setContext(), engines.refresh(), statusBar.update())));
    setContext();
    // Stored sessions are read lazily: the tree asks for them only when it becomes visible.
    this._register(sessions.treeView.onDidChangeVisibility((e) => e.visible && showStored()));
    if (sessions.treeView.visible) showStored();

    this._register(
      vscode.workspace.onDidChangeConfiguration((e) => {
        if (!e.affectsConfiguration(SETTINGS_SECTION)) return;
        if (e.affectsConfiguration(`${SETTINGS_SECTION}.batchesFolder`)) batches.rewatch();
        setContext();
        engines.refresh();
        showStored();
        // A new engine URL is graded right away (the proxy grades its own at start).
        if (
          (e.affectsConfiguration(`${SETTINGS_SECTION}.engineURL`) || e.affectsConfiguration(`${SETTINGS_SECTION}.engineUrl`)) &&
          engineUrl() &&
          !controller.running
        )
          void vscode.commands.executeCommand('harnessLab.probeEngine', { kind: 'engine', url: engineUrl(), quiet: true });
        if (
          controller.running &&
          ['engineURL', 'engineUrl', 'model', 'proxyHost', 'proxyPort', 'dataDir'].some((k) =>
            e.affectsConfiguration(`${SETTINGS_SECTION}.${k}`),
          )
        ) {
          void vscode.window
            .showInformationMessage('Harness Lab settings changed; restart the proxy to apply them.', 'Restart Proxy')
            .then(async (c) => {
              if (!c) return;
              await controller.stop();
              await vscode.commands.executeCommand('harnessLab.startProxy');
            });
        }
      }),
    );

    const trainingRuns = this._register(new TrainingRuns(log, () => batches.folders()));
    const docs = this._register(new ReadonlyDocuments());
    const liveTexts = this._register(
      new LiveTokenTexts(() => (safeSettings() ? controller.resolveDataDir(safeSettings()!) : undefined), log),
    );
    this._register(controller.onDidChangeData((rec) => rec && controller.running && liveTexts.noteCall(rec)));
    const viewer = registerRolloutViewer({
      extensionUri: context.extensionUri,
      listSessions: () => controller.listSessions(),
      rollout: (id, opts) => controller.rollout(id, opts),
      model: () => safeSettings()?.model ?? '',
      onDidChangeData: (listener) => controller.onDidChangeData(listener),
      log: (m) => log.warn(m),
      dataDirs: () => [context.globalStorageUri.fsPath],
      storedTokenTexts: (id) => liveTexts.read(id),
    });
    for (const d of viewer.disposables) this._register(d);
    const groupViews = this._register(
      new GroupViewPanels({
        extensionUri: context.extensionUri,
        log: (m) => log.warn(m),
        // Beside the group, so the members stay in view.
        openSession: (file) =>
          vscode.commands.executeCommand('vscode.openWith', vscode.Uri.file(file), 'harnessLab.rolloutLines', vscode.ViewColumn.Beside),
      }),
    );
    for (const d of registerCommands({
      context,
      controller,
      log,
      docs,
      viewer: viewer.panels,
      engineSlot,
      tokenTexts: liveTexts,
      refreshSessions: () => sessions.refresh(),
      refreshTasks: () => tasks.refresh(),
      refreshEngines: () => engines.refresh(),
      refreshBatches: () => batches.refresh(),
      batchesFolder: () => batches.submitFolder(),
      batchFolders: () => batches.folders(),
      groupViews,
      trainingRuns,
    }))
      this._register(d);

    const owned = engineSlot.remembered();
    const autoStart = () => {
      const settings = safeSettings(log);
      // Opt-in only: starting binds a port and contacts the engine, so it never runs by default.
      if (settings?.autoStart && settings.engineUrl) void vscode.commands.executeCommand('harnessLab.startProxy');
    };
    // The engine this workspace ran before the reload comes back (on its port when it is free).
    if (owned)
      setTimeout(
        () =>
          void Promise.resolve(
            vscode.commands.executeCommand('harnessLab.startEmbeddedEngine', { restore: true, policy: owned.policy, port: owned.port }),
          ).then(autoStart),
        0,
      );
    else setTimeout(autoStart, 0);
    this._register(toDisposable(() => log.info('Harness Lab deactivated')));
    log.info(`Harness Lab activated (${context.extension.packageJSON.version as string})`);

    this.api = {
      get state() {
        return controller.state;
      },
      listSessions: () => controller.listSessions(),
      getCalls: (id) => controller.getCalls(id),
      exportTraces: (id) => controller.exportTraces(id).jsonl,
      onDidChangeData: (listener) => controller.onDidChangeData(() => listener()),
    };
  }
}

const ENGINES_KEY = 'harnessLab.probedEngines';
const PROXY_PORT_KEY = 'harnessLab.proxyPort';
const OWNED_ENGINE_KEY = 'harnessLab.ownedEngine';

function rememberedPort(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isInteger(value) && value > 0 && value < 65536 ? value : undefined;
}

const RememberedEngines = z.array(
  z.object({
    url: z.string(),
    reachability: z.enum(['unknown', 'reachable', 'unreachable']),
    captureLevel: z.enum(['tokens', 'logprobs', 'text']).nullable(),
    detail: z.string(),
    checkedAt: z.string().nullable(),
  }),
);

/** globalState is outside input like any other: a malformed value is dropped, never trusted. */
function rememberedEngines(value: unknown): EngineStatus[] {
  const parsed = RememberedEngines.safeParse(value);
  return parsed.success ? parsed.data : [];
}

function safeSettings(log?: Logger) {
  try {
    return currentSettings();
  } catch (err) {
    log?.error(err instanceof Error ? err.message : String(err));
    return undefined;
  }
}

let current: HarnessLab | undefined;

export function activate(context: vscode.ExtensionContext): HarnessLabApi {
  current = new HarnessLab(context);
  context.subscriptions.push(current);
  return current.api;
}

/** Lets the host wait for the proxy's listener and store to close before the process goes. */
export function deactivate(): Promise<void> | undefined {
  const lab = current;
  current = undefined;
  return lab?.controller.stop();
}
