// What the status bar item shows for a proxy state and engine health (pure, for unit tests).
import type { CaptureLevel } from '../capture/types.js';
import type { EngineReachability, ProxyState } from './proxy-controller.js';

export interface StatusView {
  text: string;
  tooltip: string;
  /** ThemeColor id for the background, or undefined for the default. */
  background: 'statusBarItem.warningBackground' | 'statusBarItem.errorBackground' | undefined;
}

/** `captureLevel`: the engine's grade (the proxy grades it at start; Probe Engine again). */
export function statusView(
  state: ProxyState,
  engineUrl: string,
  engine: EngineReachability,
  captureLevel: CaptureLevel | null = null,
): StatusView {
  switch (state.kind) {
    case 'stopped':
      return { text: '$(debug-disconnect) Harness Lab: off', tooltip: 'Capture proxy stopped. Click for actions.', background: undefined };
    case 'starting':
      return { text: '$(loading~spin) Harness Lab: starting', tooltip: 'Capture proxy starting…', background: undefined };
    case 'failed':
      return {
        text: '$(error) Harness Lab: failed',
        tooltip: `Capture proxy failed: ${state.message}`,
        background: 'statusBarItem.errorBackground',
      };
    case 'running': {
      const unreachable = engine === 'unreachable';
      return {
        text: `${unreachable ? '$(warning)' : '$(radio-tower)'} Harness Lab :${state.port}`,
        tooltip: [
          `Capture proxy on ${state.url}`,
          `Engine ${engineUrl || '(none)'}: ${engine}${captureLevel ? `, capture level ${captureLevel}` : ', not graded yet'}`,
          'Click for actions.',
        ].join('\n'),
        background: unreachable ? 'statusBarItem.warningBackground' : undefined,
      };
    }
  }
}

export interface QuickAction {
  id: 'start' | 'stop' | 'copyUrl' | 'newSession' | 'terminal' | 'probe' | 'log';
  label: string;
  command: string;
}

/** The status-bar quick pick: what makes sense in this state. */
export function quickActions(state: ProxyState): QuickAction[] {
  const running = state.kind === 'running';
  const actions: QuickAction[] = running
    ? [
        { id: 'stop', label: '$(debug-stop) Stop Proxy', command: 'harnessLab.stopProxy' },
        { id: 'copyUrl', label: '$(copy) Copy Proxy URL', command: 'harnessLab.copyProxyUrl' },
        { id: 'newSession', label: '$(add) New Capture Session', command: 'harnessLab.newSession' },
        { id: 'terminal', label: '$(terminal) Open Captured Terminal', command: 'harnessLab.openCapturedTerminal' },
      ]
    : [{ id: 'start', label: '$(play) Start Proxy', command: 'harnessLab.startProxy' }];
  actions.push({ id: 'probe', label: '$(pulse) Probe Engine', command: 'harnessLab.probeEngine' });
  actions.push({ id: 'log', label: '$(output) Show Log', command: 'harnessLab.showLog' });
  return actions;
}
