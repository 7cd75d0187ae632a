// Attaching a `harness-lab rescore` report to a loaded rollout, so the viewer colours each sampled
// token by its drift ratio. The report sits next to the rollout as `<stem>.rescore.json`.
import { existsSync, readFileSync } from 'node:fs';
import { basename } from 'node:path';
import type { ViewerData } from '../protocol/viewer-data.js';
import { RescoreReportSchema, type RescoreReport } from '../export/rescore.js';

export function rescorePathFor(rolloutPath: string): string {
  return `${rolloutPath.replace(/(\.rollout\.json|\.jsonl|\.json)$/, '')}.rescore.json`;
}

/**
 * Sets `drift` on every turn the report covers. A report of another session, or one that does not
 * parse, is ignored with the reason returned (the rollout still opens).
 */
export function attachRescore(data: ViewerData, file: string): string | null {
  if (!existsSync(file)) return `no rescore report at ${file}`;
  let parsed;
  try {
    parsed = RescoreReportSchema.safeParse(JSON.parse(readFileSync(file, 'utf8')));
  } catch (err) {
    return `${basename(file)}: not JSON (${(err as Error).message})`;
  }
  if (!parsed.success)
    return `${basename(file)}: not a rescore report (${parsed.error.issues[0]?.path.join('.')}: ${parsed.error.issues[0]?.message})`;
  if (data.session_id && parsed.data.session_id !== data.session_id)
    return `${basename(file)} is for session ${parsed.data.session_id}, not ${data.session_id}`;
  applyRescore(data, parsed.data);
  return null;
}

/** Sets `drift` on every turn a rescore report covers (a turn whose sampled tokens it scored, all of them). */
export function applyRescore(
  data: ViewerData,
  report: { threshold: number; calls: readonly Pick<RescoreReport['calls'][number], 'call_id' | 'ratio'>[] },
): number {
  const byCall = new Map(report.calls.map((c) => [c.call_id, c.ratio]));
  let covered = 0;
  for (const t of data.turns) {
    const ratios = byCall.get(t.node_id);
    if (ratios && ratios.length === t.sampled_ids.length) {
      t.drift = { ratios, threshold: report.threshold };
      covered++;
    }
  }
  return covered;
}
