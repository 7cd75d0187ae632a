// Finding the forks of a rollout: every rollout folder whose replay.json says it forked that session.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { z } from 'zod';
import type { ForkMember } from '../protocol/group-data.js';
import { REPLAY_REPORT_FILE } from './replay-run.js';
import { loadReplaySource } from './source.js';

const ReplayReportFileSchema = z.looseObject({
  kind: z.enum(['replay', 'fork']),
  original: z.looseObject({ session_id: z.string() }),
  from_turn: z.int().nullable(),
  session_id: z.string(),
  rollout_file: z.string(),
  reward: z.number().nullable(),
  out_dir: z.string(),
  status: z.string().optional(),
});
export type ReplayReportFile = z.infer<typeof ReplayReportFileSchema>;

const RolloutStatusSchema = z.looseObject({ status: z.string() });

/** The status a run folder's rollout.json records (`ok`, `errored`), or null when there is none to read. */
function rolloutStatus(rolloutDir: string | null): string | null {
  if (!rolloutDir) return null;
  try {
    const parsed = RolloutStatusSchema.safeParse(JSON.parse(readFileSync(join(rolloutDir, 'rollout.json'), 'utf8')));
    return parsed.success ? parsed.data.status : null;
  } catch {
    return null; // no readable run record: the member's class is then read from its reward alone
  }
}

/** A replay.json, or null when the file is missing or not one. */
export function readReplayReport(dir: string): ReplayReportFile | null {
  const file = join(dir, REPLAY_REPORT_FILE);
  if (!existsSync(file)) return null;
  try {
    const parsed = ReplayReportFileSchema.safeParse(JSON.parse(readFileSync(file, 'utf8')));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}

function runFolders(root: string, depth: number, out: string[]): void {
  let names: string[];
  try {
    names = readdirSync(root);
  } catch {
    return;
  }
  if (names.includes(REPLAY_REPORT_FILE)) out.push(root);
  if (depth === 0) return;
  for (const name of names) {
    if (name.startsWith('.')) continue;
    const path = join(root, name);
    try {
      if (statSync(path).isDirectory()) runFolders(path, depth - 1, out);
    } catch {
      // a folder removed while walking
    }
  }
}

/**
 * Where replays and forks of a rollout go unless told otherwise, and where its forks are looked for:
 * beside the original's rollout folder (`<out>/<task>/`, as `harness-lab rollout --out <out>` lays them out), or a
 * `replays/` folder beside a rollout file that is not in a rollout folder.
 */
export function defaultReplayRoot(rolloutPath: string, rolloutDir: string | null): string {
  return rolloutDir ? dirname(dirname(rolloutDir)) : join(dirname(rolloutPath), 'replays');
}

/** The `--out` for a replay whose forks `forkMembers` finds by default (the rollouts root above the task folder). */
export function defaultReplayOut(rolloutPath: string, rolloutDir: string | null): string {
  return rolloutDir ? dirname(defaultReplayRoot(rolloutPath, rolloutDir)) : defaultReplayRoot(rolloutPath, rolloutDir);
}

/**
 * The original as a member, and its forks found under `roots` (default: the task folder of the
 * original's run, i.e. `<out>/<task>/`, where `replay --out <out>` puts them), ordered by fork turn.
 */
export function forkMembers(
  originalArg: string,
  roots?: readonly string[],
): { original: ForkMember; forks: (ForkMember & { report: ReplayReportFile })[] } {
  const source = loadReplaySource(originalArg);
  const searchRoots = roots?.length ? roots.map((r) => resolve(r)) : [defaultReplayRoot(source.path, source.rolloutDir)];
  const dirs: string[] = [];
  for (const root of searchRoots) runFolders(root, 3, dirs);
  const forks = dirs
    .map((d) => readReplayReport(d))
    .filter((r): r is ReplayReportFile => r !== null && r.kind === 'fork' && r.original.session_id === source.session_id)
    .sort((a, b) => (a.from_turn ?? 0) - (b.from_turn ?? 0) || a.out_dir.localeCompare(b.out_dir))
    .map((r) => ({
      label: `fork@${r.from_turn} ${r.session_id.slice(0, 9)}`,
      rolloutFile: r.rollout_file,
      reward: r.reward,
      status: r.status ?? null,
      report: r,
    }));
  return {
    original: { label: 'original', rolloutFile: source.path, reward: source.reward, status: rolloutStatus(source.rolloutDir) },
    forks,
  };
}
