// "Replay Rollout" and "Fork from This Turn": the rollout viewer's rollout run again with the real
// harness in a Docker sandbox (src/replay/replay-run.ts), with progress and Cancel. A replay opens
// beside the original with a match badge per call; a fork opens in the group view beside its original.
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as vscode from 'vscode';
import { defaultReplayOut } from '../replay/forks.js';
import { formatDifference } from '../replay/match.js';
import { formatReplayReport, runReplay, type ForkOptions, type ReplayReport } from '../replay/replay-run.js';
import { loadReplaySource, type ReplaySource } from '../replay/source.js';
import type { ViewerConnection } from './rollout-viewer-panel.js';

export interface ReplayCommandHost {
  /** The viewer in front, for the command palette. */
  activeViewer(): ViewerConnection | undefined;
  /** The engine URL the user set (a fork's default). */
  engineUrl(): string;
  log(message: string): void;
  openForks(rolloutFile: string): void;
}

/** The rollout a viewer shows, as a replay source: its file, or (a live session) a copy of its document. */
export function viewerReplaySource(viewer: ViewerConnection): ReplaySource {
  const shown = viewer.shown;
  if (!shown) throw new Error('the viewer shows no rollout yet');
  if (!shown.doc)
    throw new Error(
      'this viewer shows TrainingTrace lines, which keep no engine requests to replay; open the captured session or its rollout file',
    );
  if (shown.path && /\.(rollout\.json|json|json\.gz)$/.test(shown.path)) return loadReplaySource(shown.path);
  // A live session of a finished run: its run folder's document, so the replay knows the reward and
  // goes beside the run (and its forks are found there), rather than a copy in the temp folder.
  const outDir = shown.doc.metadata.out_dir;
  const runDoc = typeof outDir === 'string' ? join(outDir, 'session.rollout.json') : null;
  if (runDoc && existsSync(runDoc)) {
    const source = loadReplaySource(runDoc);
    if (source.session_id === shown.doc.session_id) return source;
  }
  const dir = join(tmpdir(), 'harness-lab-replay', shown.doc.session_id);
  mkdirSync(dir, { recursive: true });
  const file = join(dir, 'session.rollout.json');
  writeFileSync(file, JSON.stringify(shown.doc));
  return loadReplaySource(file);
}

function viewerOf(host: ReplayCommandHost, arg: unknown): ViewerConnection {
  const given = arg && typeof arg === 'object' && 'viewer' in arg ? (arg as { viewer: unknown }).viewer : arg;
  const viewer = given && typeof given === 'object' && 'shown' in given ? (given as ViewerConnection) : host.activeViewer();
  if (!viewer)
    throw new Error(
      "Replay works on the rollout viewer in front: open a captured rollout (a rollout folder's session.rollout.json, or a session) in the viewer first.",
    );
  return viewer;
}

async function withReplayProgress(
  title: string,
  run: (signal: AbortSignal, say: (message: string) => void) => Promise<ReplayReport>,
): Promise<ReplayReport | undefined> {
  return vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title, cancellable: true },
    async (progress, token) => {
      const abort = new AbortController();
      token.onCancellationRequested(() => abort.abort());
      const report = await run(abort.signal, (message) => progress.report({ message }));
      return abort.signal.aborted ? undefined : report;
    },
  );
}

function summary(r: ReplayReport): string {
  const c = r.counts;
  const calls = `${c.exact} exact, ${c.tolerated} tolerated, ${c.none} no match${r.kind === 'fork' ? `, ${c.live} live` : ''}`;
  const halt = r.halt
    ? ` Halted at call ${r.halt.position}: ${r.halt.difference ? `field ${r.halt.difference.path}` : r.halt.message}.`
    : '';
  return `${calls}; reward ${r.reward ?? 'null'} (original ${r.original.reward ?? 'null'}).${halt}`;
}

/** Replay Rollout: the harness again, answered from the record; the replay opens beside the original. */
export async function replayShownRollout(host: ReplayCommandHost, arg: unknown): Promise<ReplayReport | undefined> {
  const source = viewerReplaySource(viewerOf(host, arg));
  const report = await replayWithProgress(host, source, `replaying ${source.session_id}`, `replay of ${source.session_id}`);
  if (!report) return undefined;
  if (report.halt?.difference) host.log(formatDifference(report.halt.difference));
  await vscode.commands.executeCommand(
    'vscode.openWith',
    vscode.Uri.file(report.rollout_file),
    'harnessLab.rolloutFile',
    vscode.ViewColumn.Beside,
  );
  const text = `Replay of ${source.session_id}: ${summary(report)}`;
  if (report.ok) void vscode.window.showInformationMessage(text);
  else void vscode.window.showWarningMessage(text);
  return report;
}

/** Fork from This Turn: the calls before the turn from the record, the rest from a live engine; opens the fork view. */
export async function forkShownRollout(host: ReplayCommandHost, arg: unknown): Promise<ReplayReport | undefined> {
  const viewer = viewerOf(host, arg);
  const source = viewerReplaySource(viewer);
  const nodeId = arg && typeof arg === 'object' && 'nodeId' in arg ? String((arg as { nodeId: unknown }).nodeId) : undefined;
  const fromTurn = nodeId ? source.calls.findIndex((c) => c.call_id === nodeId) : -1;
  const picked = fromTurn >= 0 ? fromTurn : await pickTurn(source);
  if (picked === undefined) return undefined;
  const engineUrl = await vscode.window.showInputBox({
    title: `Fork from call ${picked}: the live engine`,
    prompt:
      'Calls before this one are answered from the record; this call and the rest by this engine (another checkpoint, or other sampling).',
    value: host.engineUrl() || 'http://127.0.0.1:8000',
    ignoreFocusOut: true,
    validateInput: (v) => (/^https?:\/\/\S+$/.test(v.trim()) ? undefined : 'an http(s) URL, e.g. http://127.0.0.1:8000'),
  });
  if (!engineUrl) return undefined;
  const seedText = await vscode.window.showInputBox({
    title: `Fork from call ${picked}: sampling seed (optional)`,
    prompt: "A seed pinned on the fork's live calls; empty to keep the engine's own.",
    ignoreFocusOut: true,
    validateInput: (v) => (v.trim() === '' || /^\d+$/.test(v.trim()) ? undefined : 'a whole number, or empty'),
  });
  if (seedText === undefined) return undefined;
  const fork: ForkOptions = {
    fromTurn: picked,
    engineUrl: engineUrl.trim(),
    ...(seedText.trim() ? { sampling: { seed: Number(seedText.trim()) } } : {}),
  };
  const what = `forking ${source.session_id} at call ${picked}`;
  const report = await replayWithProgress(host, source, what, `fork of ${source.session_id}`, fork);
  if (!report) return undefined;
  host.openForks(source.path);
  const text = `Fork of ${source.session_id} at call ${picked}: ${summary(report)}`;
  if (report.ok) void vscode.window.showInformationMessage(text);
  else void vscode.window.showWarningMessage(text);
  return report;
}

/** A replay (or a fork) in a cancellable progress notification, its report in the log; undefined when cancelled. */
async function replayWithProgress(
  host: ReplayCommandHost,
  source: ReplaySource,
  doing: string,
  what: string,
  fork?: ForkOptions,
): Promise<ReplayReport | undefined> {
  const report = await withReplayProgress(`Harness Lab: ${doing}`, (signal, say) =>
    runReplay({
      source,
      sandbox: 'docker',
      outDir: defaultReplayOut(source.path, source.rolloutDir),
      ...(fork ? { fork } : {}),
      signal,
      handleSignals: false,
      onStage: say,
      onCall: (c) => say(`call ${c.position}: ${c.level}`),
      log: host.log,
    }),
  );
  if (!report) {
    host.log(`${what}: cancelled`);
    return undefined;
  }
  host.log(formatReplayReport(report));
  return report;
}

async function pickTurn(source: ReplaySource): Promise<number | undefined> {
  const items = source.calls.map((c, i) => ({
    label: `call ${i}`,
    description: `${c.dialect} ${c.path}`,
    detail: c.finish_reason ? `finish ${c.finish_reason}` : undefined,
    i,
  }));
  const picked = await vscode.window.showQuickPick(items, { title: 'Fork from which call? (the calls before it come from the record)' });
  return picked?.i;
}
