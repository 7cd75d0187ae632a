// A webview that never says `ready` is loaded again. VS Code (and code-server) sometimes leave a
// webview blank: its service worker fails to register or to serve the page's script after a window
// reload (microsoft/vscode#125993, #89038), so the script that would say `ready` never runs, and the
// user sees an empty tab that no message can fill. Setting the html again makes a fresh iframe,
// which loads. The watchdog counts only while the panel is visible (a hidden webview without
// retainContextWhenHidden is not loaded, and is loaded again when shown), tries `MAX_RELOADS`
// times, then says once what the user can do (Developer: Reload Webviews). Nothing here imports vscode.
import { Disposable, toDisposable, type IDisposable } from './lifecycle.js';

/** What the watchdog needs of a vscode.WebviewPanel. */
export interface WatchedPanel {
  readonly visible: boolean;
  onDidChangeViewState(listener: () => void): IDisposable;
}

export interface WebviewWatchdogOptions {
  /** How long a visible webview may take to say `ready` (its script loaded and ran). */
  timeoutMs?: number;
  maxReloads?: number;
  /** Sets the webview's html again (a fresh nonce, so VS Code makes a fresh iframe). */
  reload(): void;
  log(message: string): void;
  /** Every reload failed: tell the user (once). */
  giveUp(): void;
}

// Generous: a loaded machine (two e2e workbenches on two cores) boots the viewer in seconds, not 15.
export const READY_TIMEOUT_MS = 15_000;
export const MAX_RELOADS = 3;

export class WebviewWatchdog extends Disposable {
  private timer: NodeJS.Timeout | undefined;
  private isReady = false;
  private reloads = 0;
  private gaveUp = false;
  private wasVisible: boolean;

  constructor(
    private readonly panel: WatchedPanel,
    private readonly name: string,
    private readonly opts: WebviewWatchdogOptions,
  ) {
    super();
    this.wasVisible = panel.visible;
    this._register(toDisposable(() => this.disarm()));
    this._register(
      panel.onDidChangeViewState(() => {
        const visible = this.panel.visible;
        // Shown again: VS Code loads the page again, and it says `ready` again.
        if (visible && !this.wasVisible) this.loading();
        if (!visible) this.disarm();
        this.wasVisible = visible;
      }),
    );
  }

  /** The html was (re)set: the webview should say `ready` soon. */
  loading(): void {
    this.isReady = false;
    this.arm();
  }

  /** The webview said `ready`: its script runs. */
  ready(): void {
    this.isReady = true;
    this.reloads = 0;
    this.disarm();
  }

  private arm(): void {
    this.disarm();
    if (this.isReady || this.gaveUp || !this.panel.visible) return;
    this.timer = setTimeout(() => this.expired(), this.opts.timeoutMs ?? READY_TIMEOUT_MS);
  }

  private disarm(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  private expired(): void {
    this.timer = undefined;
    if (this.isReady || !this.panel.visible) return;
    const max = this.opts.maxReloads ?? MAX_RELOADS;
    if (this.reloads >= max) {
      this.gaveUp = true;
      this.opts.log(`${this.name}: the webview never loaded its script (${max} reloads); it stays blank`);
      this.opts.giveUp();
      return;
    }
    this.reloads++;
    this.opts.log(`${this.name}: the webview did not load its script; loading it again (${this.reloads}/${max})`);
    this.opts.reload();
    this.arm();
  }
}
