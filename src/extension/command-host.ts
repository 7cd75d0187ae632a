// What every command handler gets (CommandHost, built once at activation) and the settings in use:
// the Engine URL setting, or this window's embedded engine while it runs. Shared by the feature files
// (proxy-, session-, engine-, viewer-commands.ts); the table that names every command is commands.ts.
import * as vscode from 'vscode';
import type { CaptureProxy } from '../capture/proxy.js';
import type { EngineSlot } from './embedded-engine-process.js';
import type { GroupViewPanels } from './group-view-panel.js';
import type { Logger } from './logger.js';
import type { ProxyController } from './proxy-controller.js';
import type { ReadonlyDocuments } from './readonly-docs.js';
import type { RolloutViewerPanels } from './rollout-viewer-panel.js';
import { SETTINGS_SECTION, readSettings, type HarnessLabSettings } from './settings.js';
import type { TrainingRuns } from './training-runs.js';

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
export function configuredSettings(): HarnessLabSettings {
  const config = vscode.workspace.getConfiguration(SETTINGS_SECTION);
  return readSettings((key) => config.get(key));
}

/** The embedded engine this window owns, if it runs: it stands in for the Engine URL setting while it does. */
let ownedEngine: () => string | undefined = () => undefined;

/** Called once at registration: from then on currentSettings() follows this window's embedded engine. */
export function followOwnedEngine(url: () => string | undefined): void {
  ownedEngine = url;
}

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

/** Browsers can refuse clipboard access (no focus, no permission); the caller still shows the text. */
export async function copyToClipboard(host: CommandHost, text: string): Promise<boolean> {
  try {
    await vscode.env.clipboard.writeText(text);
    return true;
  } catch (err) {
    host.log.warn(`could not write the clipboard: ${String(err)}`);
    return false;
  }
}
