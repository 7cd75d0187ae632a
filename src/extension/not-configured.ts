// The one error for "a command cannot run yet because something is not set up": it carries the
// command that sets it up, so the command table shows one message with that fix as its button.
// No vscode import: the proxy controller throws it too.

export interface SetupFix {
  /** The button's label. */
  title: string;
  /** The command the button runs. */
  command: string;
  /** Its arguments (e.g. the settings query of workbench.action.openSettings). */
  args?: unknown[];
}

export const SET_ENGINE_URL: SetupFix = { title: 'Set Engine URL', command: 'harnessLab.setEngineUrl' };
export const START_PROXY: SetupFix = { title: 'Start Proxy', command: 'harnessLab.startProxy' };

export class NotConfiguredError extends Error {
  constructor(
    message: string,
    readonly fix: SetupFix,
  ) {
    super(message);
    this.name = 'NotConfiguredError';
  }
}
