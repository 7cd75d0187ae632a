// Session commands: New Capture Session, Open Captured Terminal, Copy Session Key, Open Session, Open
// Call, Export Session, Delete Session. A session's key is minted here and kept only in this window.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import * as vscode from 'vscode';
import type { CaptureProxy } from '../capture/proxy.js';
import type { SessionInfo } from '../capture/types.js';
import { noteCapturedTerminal } from './captured-terminals.js';
import { copyToClipboard, currentSettings, type CommandHost } from './command-host.js';
import { startProxy } from './proxy-commands.js';
import type { CallNode, SessionNode } from './sessions-model.js';
import { capturedTerminalEnv, codexConfigToml, envSnippets, harnessConfigFiles, type CaptureTarget } from './terminal-env.js';

function sessionIdOf(arg: unknown): string | undefined {
  if (typeof arg === 'string') return arg;
  if (arg && typeof arg === 'object' && typeof (arg as SessionNode).sessionId === 'string') return (arg as SessionNode).sessionId;
  return undefined;
}

/** The session a command acts on: its argument (a Sessions tree node or an id), else a quick pick. */
export async function pickSession(host: CommandHost, arg: unknown, placeHolder: string): Promise<string | undefined> {
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

export async function newSession(host: CommandHost): Promise<string | undefined> {
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

export async function openCapturedTerminal(host: CommandHost): Promise<{ sessionId: string; terminal: vscode.Terminal }> {
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
  noteCapturedTerminal(terminal, proxy.url);
  terminal.show();
  host.log.info(`captured terminal opened for session ${info.session_id}`);
  return { sessionId: info.session_id, terminal };
}

/** Copy Session Key: the key this window minted for a session; an unkeyed session's key is its id. */
export async function copySessionKey(host: CommandHost, arg: unknown): Promise<string | undefined> {
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
}

/** Open Session: the session's row and calls as read-only JSON. */
export async function openSession(host: CommandHost, arg: unknown): Promise<void> {
  const sessionId = await pickSession(host, arg, 'Session to open');
  if (!sessionId) return;
  const row = host.controller.listSessions().find((s) => s.session_id === sessionId);
  await host.docs.show(
    `session ${sessionId}.json`,
    `${JSON.stringify({ ...row, calls: host.controller.getCalls(sessionId) }, null, 2)}\n`,
    'json',
  );
}

/** Open Call (a call's context menu in the Sessions view): its record as read-only JSON. */
export async function openCall(host: CommandHost, arg: unknown): Promise<void> {
  const node = arg as CallNode | undefined;
  if (!node || node.kind !== 'call') throw new Error('Open Call needs a call from the Sessions view.');
  const rec = host.controller.getCalls(node.sessionId).find((c) => c.call_id === node.callId);
  if (!rec) throw new Error(`Call ${node.callId} is no longer in session ${node.sessionId}.`);
  await host.docs.show(`call ${rec.index} ${rec.call_id}.json`, `${JSON.stringify(rec, null, 2)}\n`, 'json');
}

export async function exportSession(host: CommandHost, arg: unknown): Promise<vscode.Uri | undefined> {
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
async function revealOrOpen(choice: string | undefined, uri: vscode.Uri): Promise<void> {
  if (choice === 'Open') await vscode.commands.executeCommand('vscode.open', uri);
  if (choice === 'Reveal') await vscode.commands.executeCommand('revealInExplorer', uri);
}

export async function deleteSession(host: CommandHost, arg: unknown): Promise<boolean> {
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
