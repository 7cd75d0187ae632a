// The captured terminals this window opened (Open Captured Terminal), with the proxy URL their
// environment names, so a proxy that comes back on another port can say which terminals went stale.
import * as vscode from 'vscode';
import type { CommandHost } from './command-host.js';

/** Captured terminals opened in this window, with the proxy URL their environment names. */
const capturedTerminals = new Map<vscode.Terminal, string>();

/** Remembers a captured terminal and the proxy URL its environment names. */
export function noteCapturedTerminal(terminal: vscode.Terminal, proxyUrl: string): void {
  capturedTerminals.set(terminal, proxyUrl);
}

/** Forgets each captured terminal when it closes (owned by the command registration). */
export function forgetClosedTerminals(): vscode.Disposable {
  return vscode.window.onDidCloseTerminal((t) => capturedTerminals.delete(t));
}

/** The proxy came back on another port: the terminals that name the old one are told so. */
export function staleTerminals(host: CommandHost, oldUrl: string, newUrl: string): void {
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
