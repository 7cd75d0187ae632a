// The match badges of a replay's rollout in the viewer: `replay.json` beside the rollout file says,
// per call, which rung of the ladder it reached and which recorded call answered it.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { z } from 'zod';
import type { ViewerData } from '../protocol/viewer-data.js';

const Diff = z.looseObject({ path: z.string(), rules: z.array(z.string()).optional() });
const ReplayCallsSchema = z.looseObject({
  calls: z.array(
    z.looseObject({
      position: z.int().nonnegative(),
      level: z.enum(['exact', 'tolerated', 'none', 'live']),
      recorded_index: z.int().nullable(),
      tolerated: z.array(Diff),
      tool_outputs: z.array(Diff),
      first_difference: Diff.nullable(),
    }),
  ),
});

/** Puts each call's match on its turn; returns how many turns got one (0 when the rollout is not a replay's). */
export function attachReplayMatches(data: ViewerData, rolloutPath: string): number {
  const file = join(dirname(rolloutPath), 'replay.json');
  if (!rolloutPath || !existsSync(file)) return 0;
  let parsed;
  try {
    parsed = ReplayCallsSchema.safeParse(JSON.parse(readFileSync(file, 'utf8')));
  } catch {
    return 0;
  }
  if (!parsed.success) return 0;
  const byPosition = new Map(parsed.data.calls.map((c) => [c.position, c]));
  let n = 0;
  for (const turn of data.turns) {
    const c = byPosition.get(turn.index);
    if (!c) continue;
    const notes = [
      ...c.tolerated.map((d) => `tolerated ${d.path}${d.rules?.length ? ` (${d.rules.join(', ')})` : ''}`),
      ...c.tool_outputs.map((d) => `tool output changed: ${d.path}`),
      ...(c.first_difference ? [`first difference: ${c.first_difference.path}`] : []),
    ];
    turn.match = { level: c.level, recorded_index: c.recorded_index, notes };
    n++;
  }
  return n;
}
