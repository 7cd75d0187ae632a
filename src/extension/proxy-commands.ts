// Proxy commands: Start/Stop/Restart Proxy, Copy Proxy URL, Set Admin Key, the status bar's menu.
// startProxy is the one way a command gets the running proxy (it starts it first if it is not).
import * as vscode from 'vscode';
import { servedModel } from '../capture/engine-client.js';
import type { CaptureProxy } from '../capture/proxy.js';
import { staleTerminals } from './captured-terminals.js';
import { ADMIN_KEY_SECRET, copyToClipboard, currentSettings, type CommandHost } from './command-host.js';
import { NotConfiguredError, SET_ENGINE_URL } from './not-configured.js';
import type { HarnessLabSettings } from './settings.js';
import { quickActions } from './status-model.js';

/** The model the proxy announces: the setting, else the engine's only served model. */
export async function resolveModel(settings: HarnessLabSettings, token?: vscode.CancellationToken): Promise<string> {
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
export async function startProxy(host: CommandHost): Promise<CaptureProxy> {
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

/** Start Proxy: starts it (if it is not running) and says where it listens. */
export async function startProxyCommand(host: CommandHost): Promise<string> {
  const proxy = await startProxy(host);
  void vscode.window.showInformationMessage(`Harness Lab proxy listening on ${proxy.url}`);
  return proxy.url;
}

/**
 * Stop then start, on the same port (the controller binds its last port again), so every captured
 * terminal and copied snippet keeps working; the sessions and their keys come back from the store.
 */
export async function restartProxy(host: CommandHost): Promise<string> {
  const before = host.controller.running?.url;
  await host.controller.stop();
  const proxy = await startProxy(host);
  if (before && before !== proxy.url) staleTerminals(host, before, proxy.url);
  return proxy.url;
}

/** Copy Proxy URL (enabled only while the proxy runs). */
export async function copyProxyUrl(host: CommandHost): Promise<string> {
  const proxy = host.controller.running!; // enabled only while it runs
  const copied = await copyToClipboard(host, proxy.url);
  void vscode.window.showInformationMessage(copied ? `Copied ${proxy.url}` : `Proxy URL: ${proxy.url}`);
  return proxy.url;
}

export async function setAdminKey(host: CommandHost): Promise<void> {
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

export async function statusMenu(host: CommandHost): Promise<void> {
  const picked = await vscode.window.showQuickPick(quickActions(host.controller.state), { title: 'Harness Lab' });
  if (picked) await vscode.commands.executeCommand(picked.command);
}
