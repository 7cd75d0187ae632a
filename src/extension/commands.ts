// Every "Harness Lab: ..." command, in one table (createCommands): its name, its handler and when it
// is enabled. registerCommands is the only place in the extension that registers a command; every
// handler's error becomes one message in the user's terms (never "command not found"), and a
// NotConfiguredError gets the button that sets the missing thing up. The shape follows rust-analyzer
// (editors/code: main.ts createCommands, ctx.ts CommandFactory).
import { showCurvesFromFileCommand } from './curves-file-command.js';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import * as vscode from 'vscode';
import { EngineClient, servedModel } from '../capture/engine-client.js';
import { listShippedPolicies } from '../engine/policy.js';
import { bundledCli, EngineProcess, type EngineSlot } from './embedded-engine-process.js';
import { probeEngine } from '../capture/engine-probe.js';
import type { CaptureProxy } from '../capture/proxy.js';
import type { SessionInfo } from '../capture/types.js';
import { auditBatchCommand, openGroupViewCommand } from './batch-review-commands.js';
import {
  cancelBatchCommand,
  deleteBatchCommand,
  exportBatchCommand,
  openBatchRollout,
  resumeBatchCommand,
  submitRolloutBatch,
  teardownBatchCommand,
  type BatchCommandContext,
} from './batch-commands.js';
import type { EngineNode } from './engines-view.js';
import type { GroupViewPanels } from './group-view-panel.js';
import { runTaskWithHarness, validateHarnessWiring } from './harness-run-commands.js';
import { installHarnessCommand, openLabTerminal } from './lab-tools-commands.js';
import type { Logger } from './logger.js';
import { NotConfiguredError, SET_ENGINE_URL } from './not-configured.js';
import { NotRunningError, type ProxyController } from './proxy-controller.js';
import type { ReadonlyDocuments } from './readonly-docs.js';
import type { RescoreReport } from '../export/rescore.js';
import { viewerTargetOf, type RolloutViewerPanels } from './rollout-viewer-panel.js';
import type { CallNode, SessionNode } from './sessions-model.js';
import { forkShownRollout, replayShownRollout, type ReplayCommandHost } from './replay-commands.js';
import { SETTINGS_SECTION, readSettings, settingKey, type HarnessLabSettings } from './settings.js';
import { quickActions } from './status-model.js';
import type { TrainingRuns } from './training-runs.js';
import type { TrainingRunNode } from './training-runs-model.js';
import { capturedTerminalEnv, codexConfigToml, envSnippets, harnessConfigFiles, type CaptureTarget } from './terminal-env.js';

export const ADMIN_KEY_SECRET = 'harnessLab.adminKey';

/** What every command handler may use (rust-analyzer's Ctx): built once at activation. */
export interface CommandHost {
  context: vscode.ExtensionContext;
  controller: ProxyController<CaptureProxy>;
  log: Logger;
  docs: ReadonlyDocuments;
  viewer: RolloutViewerPanels;
  /** The embedded engine "Start Embedded Engine" started, if any. */
  engineSlot: EngineSlot;
  /** Prompt-token texts kept with sessions (deleted with their session). */
  tokenTexts?: { delete(sessionId: string): void };
  refreshSessions(): void;
  refreshTasks(): void;
  refreshEngines(): void;
  refreshBatches(): void;
  /** Where Submit Rollout Batch writes new batches (the Batches view's folder); undefined without a workspace. */
  batchesFolder(): string | undefined;
  /** Every batches folder the Batches view reads (one per workspace folder). */
  batchFolders(): string[];
  groupViews: GroupViewPanels;
  trainingRuns: TrainingRuns;
}

/** The settings as the user set them (the Engine URL setting, not this window's embedded engine). */
function configuredSettings(): HarnessLabSettings {
  const config = vscode.workspace.getConfiguration(SETTINGS_SECTION);
  return readSettings((key) => config.get(key));
}

/** The embedded engine this window owns, if it runs: it stands in for the Engine URL setting while it does. */
let ownedEngine: () => string | undefined = () => undefined;

/**
 * The settings, with the engine in use: the embedded engine this window owns while it runs (its
 * ephemeral URL never goes into the user's settings), else the Engine URL setting.
 */
export function currentSettings(): HarnessLabSettings {
  const settings = configuredSettings();
  const owned = ownedEngine();
  // The embedded engine serves one model: an empty model means "the engine's only model".
  return owned ? { ...settings, engineUrl: owned, model: '' } : settings;
}

/** The model the proxy announces: the setting, else the engine's only served model. */
async function resolveModel(settings: HarnessLabSettings, token?: vscode.CancellationToken): Promise<string> {
  if (settings.model) return settings.model;
  const abort = new AbortController();
  const sub = token?.onCancellationRequested(() => abort.abort());
  try {
    return await servedModel(
      settings.engineUrl,
      { checkUrl: 'the setting harnessLab.engineUrl', nameModel: 'set harnessLab.model' },
      { signal: abort.signal },
    );
  } finally {
    sub?.dispose();
  }
}

/** The running proxy, started first if it is not (the one proxy every session goes through). */
async function startProxy(host: CommandHost): Promise<CaptureProxy> {
  const running = host.controller.running;
  if (running) return running;
  const settings = currentSettings();
  if (!settings.engineUrl)
    throw new NotConfiguredError('Harness Lab needs an inference engine URL before the proxy can start.', SET_ENGINE_URL);
  return vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: 'Harness Lab: starting capture proxy', cancellable: true },
    async (_progress, token) => {
      const model = await resolveModel(settings, token);
      if (token.isCancellationRequested) throw new vscode.CancellationError();
      const adminKey = await host.context.secrets.get(ADMIN_KEY_SECRET);
      host.log.addSecret(adminKey);
      const proxy = await host.controller.start({ ...settings, model }, adminKey);
      host.log.addSecret(host.controller.adminKey);
      if (token.isCancellationRequested) {
        await host.controller.stop();
        throw new vscode.CancellationError();
      }
      return proxy;
    },
  );
}

function sessionIdOf(arg: unknown): string | undefined {
  if (typeof arg === 'string') return arg;
  if (arg && typeof arg === 'object' && typeof (arg as SessionNode).sessionId === 'string') return (arg as SessionNode).sessionId;
  return undefined;
}

/** The session a command acts on: its argument (a Sessions tree node or an id), else a quick pick. */
async function pickSession(host: CommandHost, arg: unknown, placeHolder: string): Promise<string | undefined> {
  const fromArg = sessionIdOf(arg);
  if (fromArg) return fromArg;
  const sessions = host.controller.listSessions();
  if (!sessions.length) {
    void vscode.window.showInformationMessage('Harness Lab has no captured sessions yet.');
    return undefined;
  }
  const picked = await vscode.window.showQuickPick(
    sessions.map((s) => ({ label: s.session_id, description: `${s.n_calls} calls · ${s.created_at}` })),
    { placeHolder },
  );
  return picked?.label;
}

/**
 * The keys of the sessions this window created, by session id. They live in this extension host
 * only: the store keeps a key's hash, so a key is shown (and copyable) only while this window lives.
 */
const mintedKeys = new Map<string, string>();

function captureTarget(proxy: CaptureProxy, sessionKey: string, model: string): CaptureTarget {
  return { proxyUrl: proxy.url, sessionKey, ...(model ? { model } : {}) };
}

/** A session with a minted key: the harness presents the key, and the id (in every record and export) opens nothing. */
function createKeyedSession(proxy: CaptureProxy, source: string): { info: SessionInfo; key: string } {
  const { api_key: key, ...info } = proxy.sessions.create({ mint_key: true, metadata: { source } });
  mintedKeys.set(info.session_id, key!);
  return { info, key: key! };
}

async function newSession(host: CommandHost): Promise<string | undefined> {
  const proxy = await startProxy(host);
  const { info, key } = createKeyedSession(proxy, 'vscode');
  host.log.info(`session ${info.session_id} created`);
  const snippets = envSnippets(captureTarget(proxy, key, info.model));
  const all = snippets.map((s) => `# ${s.label}\n${s.text}`).join('\n\n');
  const items: (vscode.QuickPickItem & { text: string })[] = [
    { label: '$(copy) All dialects', description: 'every variable below', text: all },
    ...snippets.map((s) => ({ label: s.dialect, description: s.label, detail: s.text.split('\n').join('  ·  '), text: s.text })),
  ];
  const picked = await vscode.window.showQuickPick(items, {
    title: `Session ${info.session_id}: copy the environment for a harness`,
    placeHolder: 'Pick a dialect to copy its env snippet (Escape: no session)',
    matchOnDescription: true,
  });
  if (!picked) {
    // Escape: the user did not take the session, so none is left behind (its key was never shown).
    await host.controller.deleteSession(info.session_id);
    mintedKeys.delete(info.session_id);
    host.log.info(`session ${info.session_id} dropped (New Capture Session dismissed)`);
    host.refreshSessions();
    return undefined;
  }
  const copied = await copyToClipboard(host, picked.text);
  await host.docs.show(
    `env ${info.session_id}.sh`,
    `# Harness Lab capture session ${info.session_id}\n# proxy ${proxy.url}\n# The API key below is this session's secret: it is shown once, and stored only as a hash.\n\n${all}\n`,
    'shellscript',
  );
  void vscode.window.showInformationMessage(
    `Session ${info.session_id} created${copied ? `; ${picked.label.replace(/^\$\(copy\) /, '')} env snippet copied to the clipboard` : ''}.`,
  );
  return info.session_id;
}

/** Browsers can refuse clipboard access (no focus, no permission); the caller still shows the text. */
async function copyToClipboard(host: CommandHost, text: string): Promise<boolean> {
  try {
    await vscode.env.clipboard.writeText(text);
    return true;
  } catch (err) {
    host.log.warn(`could not write the clipboard: ${String(err)}`);
    return false;
  }
}

async function openCapturedTerminal(host: CommandHost): Promise<{ sessionId: string; terminal: vscode.Terminal }> {
  const proxy = await startProxy(host);
  const { info, key } = createKeyedSession(proxy, 'terminal');
  const settings = currentSettings();
  const codexHome = join(host.controller.resolveDataDir(settings), 'codex-home', info.session_id);
  const configDir = join(host.controller.resolveDataDir(settings), 'harness-config', info.session_id);
  const target: CaptureTarget = { ...captureTarget(proxy, key, info.model), sessionId: info.session_id, codexHome, configDir };
  mkdirSync(codexHome, { recursive: true });
  writeFileSync(join(codexHome, 'config.toml'), codexConfigToml(target));
  // OpenClaw and Continue read the proxy only from a config file.
  for (const file of harnessConfigFiles(target)) {
    mkdirSync(dirname(join(configDir, file.path)), { recursive: true });
    writeFileSync(join(configDir, file.path), file.content, { mode: 0o600 });
  }
  const terminal = vscode.window.createTerminal({
    name: `Harness Lab: ${info.session_id}`,
    iconPath: new vscode.ThemeIcon('radio-tower'),
    // Not revived after a reload: its env names this proxy instance, whose port may then be gone.
    isTransient: true,
    env: capturedTerminalEnv(target, { NO_PROXY: process.env.NO_PROXY, no_proxy: process.env.no_proxy }),
    message: `Harness Lab: model calls from harnesses started here are captured into session ${info.session_id} via ${proxy.url}.`,
  });
  capturedTerminals.set(terminal, proxy.url);
  terminal.show();
  host.log.info(`captured terminal opened for session ${info.session_id}`);
  return { sessionId: info.session_id, terminal };
}

async function setEngineUrl(host: CommandHost): Promise<void> {
  const config = vscode.workspace.getConfiguration(SETTINGS_SECTION);
  const configured = readSettings((key) => config.get(key)).engineUrl;
  const value = await vscode.window.showInputBox({
    title: 'Harness Lab: inference engine URL',
    prompt:
      'OpenAI-compatible base URL of an engine that returns token ids (vLLM, SGLang, or the bundled CPU engine: "Harness Lab: Start Embedded Engine")',
    value: configured || 'http://127.0.0.1:8000/v1',
    validateInput: (v) => (/^https?:\/\/[^\s/]+/.test(v.trim()) ? undefined : 'Enter an http:// or https:// URL'),
  });
  if (value === undefined) return;
  const inspect = config.inspect<string>(settingKey('engineUrl'));
  const legacy = config.inspect<string>('engineUrl');
  const target = inspect?.workspaceValue !== undefined ? vscode.ConfigurationTarget.Workspace : vscode.ConfigurationTarget.Global;
  await config.update(settingKey('engineUrl'), value.trim(), legacy?.workspaceValue ? vscode.ConfigurationTarget.Workspace : target);
  const owned = host.engineSlot.current;
  if (owned) {
    const stop = 'Stop Embedded Engine';
    const c = await vscode.window.showInformationMessage(
      `Harness Lab: the embedded engine on ${owned.url} stays in use until you stop it; then ${value.trim()} is used.`,
      stop,
    );
    if (c === stop) await vscode.commands.executeCommand('harnessLab.stopEmbeddedEngine');
  }
}

async function setAdminKey(host: CommandHost): Promise<void> {
  const value = await vscode.window.showInputBox({
    title: 'Harness Lab: admin key',
    prompt: 'Required for /sessions routes when the proxy binds beyond loopback. Stored in SecretStorage. Leave empty to remove.',
    password: true,
    ignoreFocusOut: true,
  });
  if (value === undefined) return;
  if (value === '') {
    await host.context.secrets.delete(ADMIN_KEY_SECRET);
    void vscode.window.showInformationMessage('Harness Lab admin key removed.');
  } else {
    host.log.addSecret(value);
    await host.context.secrets.store(ADMIN_KEY_SECRET, value);
    void vscode.window.showInformationMessage('Harness Lab admin key saved in SecretStorage (applies on the next proxy start).');
  }
}

async function probe(host: CommandHost, arg: unknown): Promise<void> {
  const settings = currentSettings();
  const url = arg && typeof arg === 'object' && typeof (arg as EngineNode).url === 'string' ? (arg as EngineNode).url : settings.engineUrl;
  if (!url) throw new NotConfiguredError('No engine URL configured.', SET_ENGINE_URL);
  await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: `Harness Lab: probing ${url}`, cancellable: true },
    async (_p, token) => {
      const client = new EngineClient(url, { connections: 2 });
      let onCancel: vscode.Disposable | undefined;
      const cancelled = new Promise<undefined>((resolve) => (onCancel = token.onCancellationRequested(() => resolve(undefined))));
      try {
        const model = await resolveModel({ ...settings, engineUrl: url }, token);
        const report = await Promise.race([probeEngine(client, model), cancelled]);
        if (!report) return;
        host.controller.noteEngine(url, {
          reachability: report.reachable ? 'reachable' : 'unreachable',
          captureLevel: report.reachable ? report.capture_level : null,
          detail: report.findings.length ? report.findings.join('\n') : 'no findings',
          checkedAt: report.probed_at,
        });
        host.log.info(
          `probe ${url}: reachable=${report.reachable} capture_level=${report.capture_level} findings=${report.findings.join(' | ') || 'none'}`,
        );
        const msg = report.reachable
          ? `Engine ${url}: capture level ${report.capture_level}${report.ok ? ' (trainable)' : ''}.`
          : `Engine ${url} is unreachable.`;
        if (report.reachable && report.ok) {
          if (!(arg as { quiet?: unknown } | undefined)?.quiet) void vscode.window.showInformationMessage(msg);
        } else void vscode.window.showWarningMessage(msg, 'Show Log').then((c) => c && host.log.show());
      } finally {
        onCancel?.dispose();
        void client.close();
      }
    },
  );
}

async function exportSession(host: CommandHost, arg: unknown): Promise<vscode.Uri | undefined> {
  const sessionId = await pickSession(host, arg, 'Session to export as TrainingTrace JSONL');
  if (!sessionId) return undefined;
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
  const uri = await vscode.window.showSaveDialog({
    title: `Export session ${sessionId} (TrainingTrace JSONL)`,
    filters: { 'JSON Lines': ['jsonl'] },
    ...(folder ? { defaultUri: vscode.Uri.joinPath(folder, `${sessionId}.jsonl`) } : {}),
  });
  if (!uri) return undefined;
  return vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: `Harness Lab: exporting ${sessionId}`, cancellable: true },
    async (_p, token) => {
      const out = host.controller.exportTraces(sessionId);
      if (token.isCancellationRequested) return undefined;
      await vscode.workspace.fs.writeFile(uri, new TextEncoder().encode(out.jsonl));
      host.log.info(`exported ${out.traces} trace(s) of session ${sessionId} to ${uri.fsPath}`);
      void vscode.window
        .showInformationMessage(
          `Exported ${out.traces} trace(s) (${out.trainable} trainable) from ${out.calls} call(s) to ${uri.fsPath}.`,
          'Open',
          'Reveal',
        )
        .then((c) => revealOrOpen(c, uri));
      return uri;
    },
  );
}

/** The "Open" / "Reveal" buttons of a message about a written file. */
export async function revealOrOpen(choice: string | undefined, uri: vscode.Uri): Promise<void> {
  if (choice === 'Open') await vscode.commands.executeCommand('vscode.open', uri);
  if (choice === 'Reveal') await vscode.commands.executeCommand('revealInExplorer', uri);
}

interface PolicyPick extends vscode.QuickPickItem {
  policy: string | undefined;
}

/** The policies the embedded engine can follow: the tasks' own policy.json files, the shipped ones, or none. */
async function pickPolicy(host: CommandHost, arg: unknown): Promise<PolicyPick | undefined> {
  const named = (arg as { policy?: unknown } | undefined)?.policy;
  if (typeof named === 'string') return { label: named, policy: named };
  const fromTasks = vscode.workspace.workspaceFolders?.length
    ? await vscode.workspace.findFiles('**/policy.json', '{**/node_modules/**,**/.git/**}', 50)
    : [];
  const items: PolicyPick[] = [
    ...fromTasks.map((u) => ({
      label: `$(checklist) ${vscode.workspace.asRelativePath(u)}`,
      description: 'task policy: scripted turns that solve this task',
      policy: u.fsPath,
    })),
    ...listShippedPolicies().map((name) => ({ label: `$(file-code) ${name}`, description: 'shipped policy', policy: name })),
    { label: '$(circle-slash) No policy', description: 'the tiny model samples freely (random text)', policy: undefined },
  ];
  return vscode.window.showQuickPick(items, {
    title: 'Harness Lab: Start Embedded Engine',
    placeHolder: 'Policy that decides what the CPU engine says (it scores exactly those tokens)',
    matchOnDescription: true,
  });
}

/** `harness-lab engine` (the bundled CLI) under a progress notification; `port` first when given (a restart after a reload). */
async function spawnEngine(host: CommandHost, policy: string | undefined, port: number | undefined): Promise<EngineProcess> {
  const cli = bundledCli(host.context.extensionUri.fsPath);
  const title = 'Harness Lab: starting the embedded CPU engine (the first start builds its tiny model)';
  return vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title, cancellable: true }, async (_p, token) => {
    const start = (p: number | undefined) =>
      EngineProcess.start({
        cliPath: cli,
        policy,
        log: host.log,
        dataDir: host.context.globalStorageUri.fsPath,
        ...(p ? { port: p } : {}),
      });
    // After a reload the engine of the window before may still be letting go of the port: try it a few times.
    const again = async (p: number): Promise<EngineProcess> => {
      for (let attempt = 1; ; attempt++) {
        try {
          return await start(p);
        } catch (err) {
          if (attempt >= 3 || token.isCancellationRequested) {
            host.log.warn(
              `the embedded engine could not listen on its former port ${p} (${err instanceof Error ? err.message.split('\n')[0] : String(err)}); using another`,
            );
            return start(undefined);
          }
          await new Promise((r) => setTimeout(r, 1000));
        }
      }
    };
    const starting = port ? again(port) : start(undefined);
    const sub = token.onCancellationRequested(
      () =>
        void starting.then(
          (e) => e.dispose(),
          () => undefined,
        ),
    );
    try {
      const e = await starting;
      if (token.isCancellationRequested) throw new vscode.CancellationError();
      return e;
    } finally {
      sub.dispose();
    }
  });
}

/**
 * Starts the embedded engine and makes it the engine in use. A second start swaps engines without a
 * gap: the new one listens first, the running proxy is pointed at it, and only then the old one stops.
 * Its URL is kept in workspace state (for the restart after a reload), never in the Engine URL setting.
 */
async function startEmbeddedEngine(host: CommandHost, arg: unknown): Promise<string | undefined> {
  const restore = (arg as { restore?: unknown } | undefined)?.restore === true;
  const picked = restore
    ? {
        label: String((arg as { policy?: unknown }).policy ?? 'no policy'),
        policy: ((arg as { policy?: unknown }).policy as string | null) ?? undefined,
      }
    : await pickPolicy(host, arg);
  if (!picked) return undefined;
  const port = restore ? (arg as { port?: unknown }).port : undefined;
  const engine = await spawnEngine(host, picked.policy, typeof port === 'number' ? port : undefined);
  const previous = host.engineSlot.current;
  // Traffic moves first: the proxy forwards to the new engine before the old one stops.
  if (host.controller.running && !(await host.controller.retarget(engine.url))) {
    host.engineSlot.replace(engine);
    await restartProxy(host);
  } else host.engineSlot.replace(engine);
  host.refreshEngines();
  const label = picked.label.replace(/^\$\([\w-]+\) /, '');
  const what = `embedded engine on ${engine.url}${picked.policy ? ` following ${label}` : ''}`;
  host.log.info(`${restore ? 'restarted the' : 'started the'} ${what}${previous ? ` (replacing ${previous.url})` : ''}`);
  const start = 'Start Proxy';
  const message = restore
    ? `Harness Lab: restarted the ${what} (it ran before the window reloaded).`
    : `Harness Lab: ${what}${previous && host.controller.running ? '; the proxy switched to it' : ''}.`;
  void vscode.window.showInformationMessage(message, ...(host.controller.running ? [] : [start])).then(async (c) => {
    if (c === start) await vscode.commands.executeCommand('harnessLab.startProxy');
  });
  return engine.url;
}

/** Stops the owned embedded engine; a running proxy goes back to the Engine URL setting (if one is set). */
async function stopEmbeddedEngine(host: CommandHost): Promise<boolean> {
  const engine = host.engineSlot.current;
  if (!engine) {
    host.engineSlot.replace(undefined); // forgets a remembered one too: no restart after the next reload
    void vscode.window.showInformationMessage('Harness Lab: no embedded engine is running in this window.');
    return false;
  }
  host.engineSlot.replace(undefined);
  const configured = currentSettings().engineUrl;
  if (host.controller.running) {
    if (configured) await host.controller.retarget(configured);
    else host.controller.noteEngine(engine.url, { reachability: 'unreachable', detail: 'the embedded engine was stopped' });
  }
  host.refreshEngines();
  host.log.info(`stopped the embedded engine on ${engine.url}`);
  void vscode.window.showInformationMessage(
    `Harness Lab: stopped the embedded engine on ${engine.url}.${host.controller.running ? (configured ? ` The proxy forwards to ${configured} (Engine URL setting).` : ' The proxy has no engine now: start one, or set an Engine URL.') : ''}`,
  );
  return true;
}

/**
 * Stop then start, on the same port (the controller binds its last port again), so every captured
 * terminal and copied snippet keeps working; the sessions and their keys come back from the store.
 */
async function restartProxy(host: CommandHost): Promise<string> {
  const before = host.controller.running?.url;
  await host.controller.stop();
  const proxy = await startProxy(host);
  if (before && before !== proxy.url) staleTerminals(host, before, proxy.url);
  return proxy.url;
}

/** Captured terminals opened in this window, with the proxy URL their environment names. */
const capturedTerminals = new Map<vscode.Terminal, string>();

/** The proxy came back on another port: the terminals that name the old one are told so. */
function staleTerminals(host: CommandHost, oldUrl: string, newUrl: string): void {
  const stale = [...capturedTerminals].filter(([t, url]) => url === oldUrl && t.exitStatus === undefined).map(([t]) => t);
  if (!stale.length) return;
  host.log.warn(`${stale.length} captured terminal(s) point at ${oldUrl}; the proxy is now on ${newUrl}`);
  const open = 'Open Captured Terminal';
  void vscode.window
    .showWarningMessage(
      `Harness Lab: the proxy could not get its port back (now ${newUrl}); ${stale.length} open captured terminal(s) still point at ${oldUrl} and are stale. Open a new one.`,
      open,
    )
    .then((c) => c === open && vscode.commands.executeCommand('harnessLab.openCapturedTerminal'));
}

async function deleteSession(host: CommandHost, arg: unknown): Promise<boolean> {
  const sessionId = await pickSession(host, arg, 'Session to delete');
  if (!sessionId) return false;
  const ok = await vscode.window.showWarningMessage(`Delete session ${sessionId} and all its captured calls?`, { modal: true }, 'Delete');
  if (ok !== 'Delete') return false;
  const deleted = await host.controller.deleteSession(sessionId);
  host.tokenTexts?.delete(sessionId);
  host.log.info(`session ${sessionId} ${deleted ? 'deleted' : 'was already gone'}`);
  host.refreshSessions();
  return deleted;
}

async function statusMenu(host: CommandHost): Promise<void> {
  const picked = await vscode.window.showQuickPick(quickActions(host.controller.state), { title: 'Harness Lab' });
  if (picked) await vscode.commands.executeCommand(picked.command);
}

/** Opens a session's rollout in the viewer, at a call when given one from the Sessions tree. */
async function openRolloutViewer(host: CommandHost, arg: unknown): Promise<string | undefined> {
  const target = viewerTargetOf(arg) ?? {
    sessionId: await pickSession(host, undefined, 'Session to open in the rollout viewer'),
    focus: null,
  };
  if (!target.sessionId) return undefined;
  host.viewer.open(target.sessionId, target.focus);
  return target.sessionId;
}

/** What Replay Rollout and Fork from This Turn need of the extension. */
function replayHost(host: CommandHost): ReplayCommandHost {
  return {
    activeViewer: () => host.viewer.activeConnection(),
    engineUrl: () => currentSettings().engineUrl,
    log: (message) => host.log.info(message),
    openForks: (file) => void host.groupViews.openForks(file),
  };
}

/** Rescore the rollout in the viewer in front against an engine's weights: drift colours in place. */
async function rescoreShownRollout(host: CommandHost): Promise<RescoreReport | undefined> {
  const viewer = host.viewer.activeConnection();
  if (!viewer)
    throw new Error('Rescore works on the rollout viewer in front: open a session (Sessions view) or a rollout file in the viewer first.');
  const settings = currentSettings();
  const engineUrl = await vscode.window.showInputBox({
    title: 'Rescore Rollout: engine with the weights to compare',
    prompt:
      "The sampled tokens are teacher-forced through this engine (vLLM's prompt_logprobs, or the embedded engine); each is coloured by exp(rescored - captured logprob).",
    value: settings.engineUrl || 'http://127.0.0.1:8000',
    ignoreFocusOut: true,
    validateInput: (v) => (/^https?:\/\/\S+$/.test(v.trim()) ? undefined : 'an http(s) URL, e.g. http://127.0.0.1:8000'),
  });
  if (!engineUrl) return undefined;
  const r = await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: `Harness Lab: rescoring against ${engineUrl.trim()}` },
    () => viewer.rescore(engineUrl.trim(), settings.model || null),
  );
  const s = r.report.summary;
  const mean = s.mean_ratio === null ? '-' : s.mean_ratio.toFixed(4);
  const past = s.share_past === null ? '-' : `${(s.share_past * 100).toFixed(1)}%`;
  const skipped = r.report.skipped.length ? `; ${r.report.skipped.length} call(s) skipped (${r.report.skipped[0]!.reason})` : '';
  host.log.info(
    `rescore of ${r.report.session_id} against ${r.report.engine_url}: mean ratio ${mean}, ${past} of ${s.tokens} tokens past ±${r.report.threshold}${skipped}${r.saved ? `; report ${r.saved}` : ''}`,
  );
  void vscode.window.showInformationMessage(
    `Drift: mean ratio ${mean}; ${past} of ${s.tokens} sampled tokens past ±${r.report.threshold} in ${r.covered} call(s)${skipped}.${r.saved ? ` Report saved as ${r.saved}.` : ''}`,
  );
  return r.report;
}

/** When a command can do its work; otherwise it fails with the NotConfiguredError this returns. */
type Precondition = (host: CommandHost) => NotConfiguredError | undefined;

const proxyRunning =
  (action: string): Precondition =>
  (host) =>
    host.controller.running ? undefined : new NotRunningError(action);

export interface CommandSpec {
  run(host: CommandHost, ...args: unknown[]): Promise<unknown>;
  /** Unset: always enabled (a handler that needs the proxy starts it). */
  enabled?: Precondition;
}

/** The command table: every command the extension contributes (package.json), and only those. */
export function createCommands(): Record<string, CommandSpec> {
  return {
    'harnessLab.startProxy': {
      run: async (host) => {
        const proxy = await startProxy(host);
        void vscode.window.showInformationMessage(`Harness Lab proxy listening on ${proxy.url}`);
        return proxy.url;
      },
    },
    'harnessLab.stopProxy': { run: (host) => host.controller.stop() },
    'harnessLab.newSession': { run: (host) => newSession(host) },
    'harnessLab.openCapturedTerminal': { run: async (host) => (await openCapturedTerminal(host)).sessionId },
    'harnessLab.setEngineUrl': { run: (host) => setEngineUrl(host) },
    'harnessLab.setAdminKey': { run: (host) => setAdminKey(host) },
    'harnessLab.probeEngine': { run: (host, arg) => probe(host, arg) },
    'harnessLab.exportSession': { run: (host, arg) => exportSession(host, arg) },
    'harnessLab.deleteSession': { run: (host, arg) => deleteSession(host, arg) },
    'harnessLab.showLog': { run: async (host) => host.log.show() },
    'harnessLab.statusMenu': { run: (host) => statusMenu(host) },
    'harnessLab.copyProxyUrl': {
      enabled: proxyRunning('copy its URL'),
      run: async (host) => {
        const proxy = host.controller.running!; // enabled only while it runs
        const copied = await copyToClipboard(host, proxy.url);
        void vscode.window.showInformationMessage(copied ? `Copied ${proxy.url}` : `Proxy URL: ${proxy.url}`);
        return proxy.url;
      },
    },
    'harnessLab.copySessionKey': {
      run: async (host, arg) => {
        const sessionId = await pickSession(host, arg, 'Session whose key to copy');
        if (!sessionId) return undefined;
        const keyed = host.controller.listSessions().find((s) => s.session_id === sessionId)?.keyed === true;
        const key = mintedKeys.get(sessionId) ?? (keyed ? undefined : sessionId);
        if (key === undefined) {
          void vscode.window.showWarningMessage(
            `Session ${sessionId} has a secret key that was shown once when it was created; it is not stored, so it cannot be copied now. Create a new session for a new key.`,
          );
          return undefined;
        }
        const copied = await copyToClipboard(host, key);
        // The key itself is never put in a notification (they can be logged and screenshotted).
        void vscode.window.showInformationMessage(
          `${copied ? `Copied the key of session ${sessionId}` : `Could not copy the key of session ${sessionId}`} (use it as the harness's API key).`,
        );
        return key;
      },
    },
    'harnessLab.openSession': {
      run: async (host, arg) => {
        const sessionId = await pickSession(host, arg, 'Session to open');
        if (!sessionId) return;
        const row = host.controller.listSessions().find((s) => s.session_id === sessionId);
        await host.docs.show(
          `session ${sessionId}.json`,
          `${JSON.stringify({ ...row, calls: host.controller.getCalls(sessionId) }, null, 2)}\n`,
          'json',
        );
      },
    },
    'harnessLab.openCall': {
      run: async (host, arg) => {
        const node = arg as CallNode | undefined;
        if (!node || node.kind !== 'call') throw new Error('Open Call needs a call from the Sessions view.');
        const rec = host.controller.getCalls(node.sessionId).find((c) => c.call_id === node.callId);
        if (!rec) throw new Error(`Call ${node.callId} is no longer in session ${node.sessionId}.`);
        await host.docs.show(`call ${rec.index} ${rec.call_id}.json`, `${JSON.stringify(rec, null, 2)}\n`, 'json');
      },
    },
    'harnessLab.openRolloutViewer': { run: (host, arg) => openRolloutViewer(host, arg) },
    'harnessLab.rescoreRollout': { run: (host) => rescoreShownRollout(host) },
    // replay (#29): one block
    'harnessLab.replayRollout': { run: (host, arg) => replayShownRollout(replayHost(host), arg) },
    'harnessLab.forkFromTurn': { run: (host, arg) => forkShownRollout(replayHost(host), arg) },
    'harnessLab.validateHarness': { run: (host, arg) => validateHarnessWiring(harnessRunContext(host), arg) },
    'harnessLab.runTaskWithHarness': { run: (host, arg) => runTaskWithHarness(harnessRunContext(host), arg) },
    'harnessLab.refreshSessions': { run: async (host) => host.refreshSessions() },
    'harnessLab.refreshTasks': { run: async (host) => host.refreshTasks() },
    'harnessLab.refreshEngines': { run: async (host) => host.refreshEngines() },
    'harnessLab.submitBatch': { run: (host, arg) => submitRolloutBatch(batchContext(host), arg) },
    'harnessLab.cancelBatch': { run: (host, arg) => cancelBatchCommand(batchContext(host), arg) },
    'harnessLab.openBatchRollout': { run: (_host, arg) => openBatchRollout(arg) },
    'harnessLab.refreshBatches': { run: async (host) => host.refreshBatches() },
    'harnessLab.auditBatch': { run: (host, arg) => auditBatchCommand(host, arg) },
    'harnessLab.openGroupView': { run: (host, arg) => openGroupViewCommand(host, arg) },
    'harnessLab.startTrainingRun': { run: (host) => host.trainingRuns.start() },
    'harnessLab.refreshTrainingRuns': { run: async (host) => host.trainingRuns.refresh() },
    'harnessLab.showTrainingRunLogs': {
      run: (host, arg) =>
        host.trainingRuns.showLogs((arg as TrainingRunNode | undefined)?.name, (arg as TrainingRunNode | undefined)?.runKind),
    },
    'harnessLab.cancelTrainingRun': { run: (host, arg) => host.trainingRuns.cancel(arg as TrainingRunNode | undefined) },
    // ux-cluster (#28): the batch lifecycle, exports, the Harness Lab terminal, harness installs, training curves.
    'harnessLab.resumeBatch': { run: (host, arg) => resumeBatchCommand(batchContext(host), arg) },
    'harnessLab.teardownBatch': { run: (host, arg) => teardownBatchCommand(batchContext(host), arg) },
    'harnessLab.deleteBatch': { run: (host, arg) => deleteBatchCommand(batchContext(host), arg) },
    'harnessLab.openLabTerminal': { run: async (host) => (await openLabTerminal(host)).commands },
    'harnessLab.installHarness': { run: (host, arg) => installHarnessCommand(host, arg) },
    'harnessLab.showCurvesFromFile': { run: (host, arg, selected) => showCurvesFromFileCommand(host.trainingRuns.curves, arg, selected) },
    'harnessLab.showTrainingCurves': {
      run: (host, arg, selected) =>
        host.trainingRuns.showCurves(arg as TrainingRunNode | undefined, selected as TrainingRunNode[] | undefined),
    },
    'harnessLab.exportBatch': {
      run: (host, arg, preset) =>
        exportBatchCommand(batchContext(host), arg, preset as { format?: 'trl' | 'verl' | 'trainingtrace'; out?: string } | undefined),
    },
    // ---- ux-session (#28): proxy and embedded engine lifecycle ----
    'harnessLab.startEmbeddedEngine': { run: (host, arg) => startEmbeddedEngine(host, arg) },
    'harnessLab.stopEmbeddedEngine': { run: (host) => stopEmbeddedEngine(host) },
    'harnessLab.restartProxy': { run: (host) => restartProxy(host) },
  };
}

function batchContext(host: CommandHost): BatchCommandContext {
  // A batch without an engine URL setting runs its own embedded engine on each task's sampling policy
  // (policy.sampling.json, else policy.json): groups with contrast on a CPU. This window's embedded
  // engine follows one policy, so it is not offered for batches: the settings as the user set them.
  return { ...host, settings: () => configuredSettings() };
}

function harnessRunContext(host: CommandHost) {
  return {
    ...host,
    ensureProxy: async () => {
      const proxy = await startProxy(host);
      return { proxy, model: host.controller.runningModel ?? currentSettings().model };
    },
    openViewer: (sessionId: string) => host.viewer.open(sessionId, null),
    runsDirSetting: () => currentSettings().runsDir,
    enginePolicy: () => (host.engineSlot.current ? (host.engineSlot.current.policy ?? null) : undefined),
    hasEngine: () => host.controller.running !== undefined || currentSettings().engineUrl !== '',
  };
}

/** Everything an error says: message, stack and causes, for the log (the toast shows the first line). */
export function describeError(err: unknown): string {
  const parts: string[] = [];
  let e: unknown = err;
  for (let depth = 0; e !== undefined && depth < 5; depth++) {
    parts.push(e instanceof Error ? (e.stack ?? `${e.name}: ${e.message}`) : String(e));
    e = e instanceof Error ? e.cause : undefined;
    if (e !== undefined) parts.push('caused by:');
  }
  return parts.join('\n');
}

/** A command's errors become one message with Show Log (and the fix, for a NotConfiguredError); the log holds the whole error. */
async function report(host: CommandHost, name: string, err: unknown): Promise<void> {
  if (err instanceof vscode.CancellationError) return;
  const message = err instanceof Error ? err.message : String(err);
  host.log.error(`${name} failed: ${describeError(err)}`);
  const showLog = 'Show Log';
  // A harness CLI that is not installed: the fix is Install Harness… (the .vsix installs it itself).
  const missingHarness = /harness-lab harness install (\S+)`/.exec(message)?.[1];
  const fix =
    err instanceof NotConfiguredError
      ? err.fix
      : missingHarness
        ? { title: 'Install Harness…', command: 'harnessLab.installHarness', args: [missingHarness] }
        : undefined;
  const choice = await vscode.window.showErrorMessage(fix ? message : `Harness Lab: ${message}`, ...(fix ? [fix.title] : []), showLog);
  if (choice === showLog) host.log.show();
  else if (fix && choice === fix.title) await vscode.commands.executeCommand(fix.command, ...(fix.args ?? []));
}

export function registerCommands(host: CommandHost): vscode.Disposable[] {
  ownedEngine = () => host.engineSlot.url;
  const terminalsClosed = vscode.window.onDidCloseTerminal((t) => capturedTerminals.delete(t));
  return [
    terminalsClosed,
    ...Object.entries(createCommands()).map(([name, spec]) =>
      vscode.commands.registerCommand(name, async (...args: unknown[]) => {
        try {
          const blocked = spec.enabled?.(host);
          if (blocked) throw blocked;
          return await spec.run(host, ...args);
        } catch (err) {
          await report(host, name, err);
          return undefined;
        }
      }),
    ),
  ];
}
