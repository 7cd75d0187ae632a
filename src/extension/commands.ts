// Every "Harness Lab: ..." command, in one table (createCommands): its name, its handler and when it
// is enabled. registerCommands is the only place in the extension that registers a command; every
// handler's error becomes one message in the user's terms (never "command not found"), and a
// NotConfiguredError gets the button that sets the missing thing up. The shape follows rust-analyzer
// (editors/code: main.ts createCommands, ctx.ts CommandFactory). The handlers live by feature:
// proxy-commands.ts, session-commands.ts, engine-commands.ts, viewer-commands.ts, replay-commands.ts,
// task-rollout-commands.ts, batch-commands.ts, batch-review-commands.ts, lab-tools-commands.ts and
// training-runs.ts; what they share is command-host.ts.
import { showCurvesFromFileCommand } from './curves-file-command.js';
import * as vscode from 'vscode';
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
import { forgetClosedTerminals } from './captured-terminals.js';
import { configuredSettings, currentSettings, followOwnedEngine, type CommandHost } from './command-host.js';
import { probe, setEngineUrl, startEmbeddedEngine, stopEmbeddedEngine } from './engine-commands.js';
import { runTaskWithHarness, validateHarnessWiring } from './task-rollout-commands.js';
import { installHarnessCommand, openLabTerminal } from './lab-tools-commands.js';
import { NotConfiguredError } from './not-configured.js';
import { NotRunningError } from './proxy-controller.js';
import { copyProxyUrl, restartProxy, setAdminKey, startProxy, startProxyCommand, statusMenu } from './proxy-commands.js';
import { forkShownRollout, replayShownRollout, type ReplayCommandHost } from './replay-commands.js';
import {
  copySessionKey,
  deleteSession,
  exportSession,
  newSession,
  openCall,
  openCapturedTerminal,
  openSession,
} from './session-commands.js';
import type { TrainingRunNode, TrainingRunServerNode } from './training-runs-model.js';
import { openRolloutViewer, rescoreShownRollout } from './viewer-commands.js';

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
    // The proxy (proxy-commands.ts)
    'harnessLab.startProxy': { run: (host) => startProxyCommand(host) },
    'harnessLab.stopProxy': { run: (host) => host.controller.stop() },
    'harnessLab.restartProxy': { run: (host) => restartProxy(host) },
    'harnessLab.copyProxyUrl': { enabled: proxyRunning('copy its URL'), run: (host) => copyProxyUrl(host) },
    'harnessLab.setAdminKey': { run: (host) => setAdminKey(host) },
    'harnessLab.statusMenu': { run: (host) => statusMenu(host) },
    'harnessLab.showLog': { run: async (host) => host.log.show() },
    // Sessions (session-commands.ts)
    'harnessLab.newSession': { run: (host) => newSession(host) },
    'harnessLab.openCapturedTerminal': { run: async (host) => (await openCapturedTerminal(host)).sessionId },
    'harnessLab.copySessionKey': { run: (host, arg) => copySessionKey(host, arg) },
    'harnessLab.openSession': { run: (host, arg) => openSession(host, arg) },
    'harnessLab.openCall': { run: (host, arg) => openCall(host, arg) },
    'harnessLab.exportSession': { run: (host, arg) => exportSession(host, arg) },
    'harnessLab.deleteSession': { run: (host, arg) => deleteSession(host, arg) },
    'harnessLab.refreshSessions': { run: async (host) => host.refreshSessions() },
    // Engines (engine-commands.ts)
    'harnessLab.setEngineUrl': { run: (host) => setEngineUrl(host) },
    'harnessLab.probeEngine': { run: (host, arg) => probe(host, arg) },
    'harnessLab.startEmbeddedEngine': { run: (host, arg) => startEmbeddedEngine(host, arg) },
    'harnessLab.stopEmbeddedEngine': { run: (host) => stopEmbeddedEngine(host) },
    'harnessLab.refreshEngines': { run: async (host) => host.refreshEngines() },
    // The rollout viewer (viewer-commands.ts), replay and fork (replay-commands.ts)
    'harnessLab.openRolloutViewer': { run: (host, arg) => openRolloutViewer(host, arg) },
    'harnessLab.rescoreRollout': { run: (host) => rescoreShownRollout(host) },
    'harnessLab.replayRollout': { run: (host, arg) => replayShownRollout(replayHost(host), arg) },
    'harnessLab.forkFromTurn': { run: (host, arg) => forkShownRollout(replayHost(host), arg) },
    // A harness on a task (task-rollout-commands.ts), the lab terminal and harness installs (lab-tools-commands.ts)
    'harnessLab.validateHarness': { run: (host, arg) => validateHarnessWiring(taskRolloutContext(host), arg) },
    'harnessLab.runTaskWithHarness': { run: (host, arg) => runTaskWithHarness(taskRolloutContext(host), arg) },
    'harnessLab.refreshTasks': { run: async (host) => host.refreshTasks() },
    'harnessLab.openLabTerminal': { run: async (host) => (await openLabTerminal(host)).commands },
    'harnessLab.installHarness': { run: (host, arg) => installHarnessCommand(host, arg) },
    // Batches (batch-commands.ts, batch-review-commands.ts)
    'harnessLab.submitBatch': { run: (host, arg) => submitRolloutBatch(batchContext(host), arg) },
    'harnessLab.cancelBatch': { run: (host, arg) => cancelBatchCommand(batchContext(host), arg) },
    'harnessLab.resumeBatch': { run: (host, arg) => resumeBatchCommand(batchContext(host), arg) },
    'harnessLab.teardownBatch': { run: (host, arg) => teardownBatchCommand(batchContext(host), arg) },
    'harnessLab.deleteBatch': { run: (host, arg) => deleteBatchCommand(batchContext(host), arg) },
    'harnessLab.exportBatch': {
      run: (host, arg, preset) =>
        exportBatchCommand(batchContext(host), arg, preset as { format?: 'trl' | 'verl' | 'trainingtrace'; out?: string } | undefined),
    },
    'harnessLab.openBatchRollout': { run: (_host, arg) => openBatchRollout(arg) },
    'harnessLab.auditBatch': { run: (host, arg) => auditBatchCommand(host, arg) },
    'harnessLab.openGroupView': { run: (host, arg) => openGroupViewCommand(host, arg) },
    'harnessLab.refreshBatches': { run: async (host) => host.refreshBatches() },
    // Training runs (training-runs.ts)
    'harnessLab.startTrainingRun': { run: (host) => host.trainingRuns.start() },
    'harnessLab.refreshTrainingRuns': { run: async (host) => host.trainingRuns.refresh() },
    'harnessLab.showTrainingRunLogs': {
      run: (host, arg) => {
        // A run's row shows the trainer's log; its rollout server's row, the server's.
        const node = arg as TrainingRunNode | TrainingRunServerNode | undefined;
        return node?.kind === 'server' ? host.trainingRuns.showServerLog(node.run) : host.trainingRuns.showLogs(node?.name, node?.runKind);
      },
    },
    'harnessLab.cancelTrainingRun': { run: (host, arg) => host.trainingRuns.cancel(arg as TrainingRunNode | undefined) },
    'harnessLab.showCurvesFromFile': { run: (host, arg, selected) => showCurvesFromFileCommand(host.trainingRuns.curves, arg, selected) },
    'harnessLab.showTrainingCurves': {
      run: (host, arg, selected) =>
        host.trainingRuns.showCurves(arg as TrainingRunNode | undefined, selected as TrainingRunNode[] | undefined),
    },
  };
}

function batchContext(host: CommandHost): BatchCommandContext {
  // A batch without an engine URL setting runs its own embedded engine on each task's sampling policy
  // (policy.sampling.json, else policy.json): groups with contrast on a CPU. This window's embedded
  // engine follows one policy, so it is not offered for batches: the settings as the user set them.
  return { ...host, settings: () => configuredSettings() };
}

function taskRolloutContext(host: CommandHost) {
  return {
    ...host,
    ensureProxy: async () => {
      const proxy = await startProxy(host);
      return { proxy, model: host.controller.runningModel ?? currentSettings().model };
    },
    openViewer: (sessionId: string) => host.viewer.open(sessionId, null),
    rolloutsDirSetting: () => currentSettings().rolloutsDir,
    enginePolicy: () => (host.engineSlot.current ? (host.engineSlot.current.policy ?? null) : undefined),
    hasEngine: () => host.controller.running !== undefined || currentSettings().engineUrl !== '',
  };
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
  followOwnedEngine(() => host.engineSlot.url);
  return [
    forgetClosedTerminals(),
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
