// Engine commands: Set Engine URL, Probe Engine, Start/Stop Embedded Engine. The embedded engine this
// window owns lives in its EngineSlot (workspace state), never in the Engine URL setting.
import * as vscode from 'vscode';
import { EngineClient } from '../capture/engine-client.js';
import { probeEngine } from '../capture/engine-probe.js';
import { listShippedPolicies } from '../engine/policy.js';
import { currentSettings, type CommandHost } from './command-host.js';
import { bundledCli, EngineProcess } from './embedded-engine-process.js';
import type { EngineNode } from './engines-view.js';
import { NotConfiguredError, SET_ENGINE_URL } from './not-configured.js';
import { resolveModel, restartProxy } from './proxy-commands.js';
import { SETTINGS_SECTION, readSettings, settingKey } from './settings.js';

export async function setEngineUrl(host: CommandHost): Promise<void> {
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

export async function probe(host: CommandHost, arg: unknown): Promise<void> {
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
export async function startEmbeddedEngine(host: CommandHost, arg: unknown): Promise<string | undefined> {
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
export async function stopEmbeddedEngine(host: CommandHost): Promise<boolean> {
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
