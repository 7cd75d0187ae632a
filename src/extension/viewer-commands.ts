// Viewer commands: Open Rollout Viewer and Rescore Rollout (the rollout viewer in front). Replay and
// Fork are replay-commands.ts; the viewer panels themselves are rollout-viewer-panel.ts.
import * as vscode from 'vscode';
import type { RescoreReport } from '../export/rescore.js';
import { currentSettings, type CommandHost } from './command-host.js';
import { viewerTargetOf } from './rollout-viewer-panel.js';
import { pickSession } from './session-commands.js';

/** Opens a session's rollout in the viewer, at a call when given one from the Sessions tree. */
export async function openRolloutViewer(host: CommandHost, arg: unknown): Promise<string | undefined> {
  const target = viewerTargetOf(arg) ?? {
    sessionId: await pickSession(host, undefined, 'Session to open in the rollout viewer'),
    focus: null,
  };
  if (!target.sessionId) return undefined;
  host.viewer.open(target.sessionId, target.focus);
  return target.sessionId;
}

/** Rescore the rollout in the viewer in front against an engine's weights: drift colours in place. */
export async function rescoreShownRollout(host: CommandHost): Promise<RescoreReport | undefined> {
  const viewer = host.viewer.activeConnection();
  if (!viewer)
    throw new Error('Rescore works on the rollout viewer in front: open a session (Sessions view) or a rollout file in the viewer first.');
  const settings = currentSettings();
  const engineUrl = await vscode.window.showInputBox({
    title: 'Rescore Rollout: engine with the weights to compare',
    prompt:
      "The sampled tokens are teacher-forced through this engine (vLLM's prompt_logprobs, or the embedded engine); each is coloured by exp(rescored - captured logprob).",
    value: settings.engineUrl || 'http://127.0.0.1:8000',
    ignoreFocusOut: true,
    validateInput: (v) => (/^https?:\/\/\S+$/.test(v.trim()) ? undefined : 'an http(s) URL, e.g. http://127.0.0.1:8000'),
  });
  if (!engineUrl) return undefined;
  const r = await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: `Harness Lab: rescoring against ${engineUrl.trim()}` },
    () => viewer.rescore(engineUrl.trim(), settings.model || null),
  );
  const s = r.report.summary;
  const mean = s.mean_ratio === null ? '-' : s.mean_ratio.toFixed(4);
  const past = s.share_past === null ? '-' : `${(s.share_past * 100).toFixed(1)}%`;
  const skipped = r.report.skipped.length ? `; ${r.report.skipped.length} call(s) skipped (${r.report.skipped[0]!.reason})` : '';
  host.log.info(
    `rescore of ${r.report.session_id} against ${r.report.engine_url}: mean ratio ${mean}, ${past} of ${s.tokens} tokens past ±${r.report.threshold}${skipped}${r.saved ? `; report ${r.saved}` : ''}`,
  );
  void vscode.window.showInformationMessage(
    `Drift: mean ratio ${mean}; ${past} of ${s.tokens} sampled tokens past ±${r.report.threshold} in ${r.covered} call(s)${skipped}.${r.saved ? ` Report saved as ${r.saved}.` : ''}`,
  );
  return r.report;
}
