// Opening rollouts from disk for the viewer, the report and `atif-check`: a rollout document
// (`*.rollout.json`), a captured session file (the store's `<session>.jsonl`) or TrainingTrace lines
// (`*.jsonl` from `harness-lab export`), plus the harness's ATIF trajectory when one is attached or found.
import { existsSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import type { RolloutDocument } from '../capture/rollout.js';
import { CaptureSession } from '../capture/sessions.js';
import { loadSessionFile } from '../capture/store.js';
import { AtifParseError, joinContinuations, parseAtif, type AtifTrajectory } from '../harness/atif.js';
import { atifCheck, type AtifCheckResult } from '../harness/atif-check.js';
import { attachRescore, rescorePathFor } from './rescore-attach.js';
import { CallRecordSchema, RolloutFileError, viewerDataFromFile } from '../capture/rollout-file.js';
import { viewerDataFromRollout, type ViewerData } from '../protocol/viewer-data.js';

export interface LoadedRollout {
  data: ViewerData;
  /** Null for TrainingTrace files, which hold no raw calls (no ATIF check possible). */
  doc: RolloutDocument | null;
  path: string;
}

function firstLine(text: string): unknown {
  const line = text.split('\n').find((l) => l.trim());
  try {
    return line ? JSON.parse(line) : null;
  } catch {
    return null;
  }
}

/** A rollout from a file's text; `path` decides the format and names the file in errors. */
export function rolloutFromText(text: string, path: string): LoadedRollout {
  const head = firstLine(text);
  if (/\.jsonl$/i.test(path) && head && typeof head === 'object' && (head as { type?: unknown }).type === 'session') {
    return sessionRollout(path);
  }
  const { data, doc } = viewerDataFromFile(text, path);
  return { data, doc, path };
}

/** A captured session file, as the proxy's store writes it. */
function sessionRollout(path: string): LoadedRollout {
  const loaded = loadSessionFile(path);
  if (!loaded) throw new RolloutFileError(`${basename(path)}: no session header line; not a Harness Lab capture`);
  loaded.calls.forEach((c, i) => {
    const res = CallRecordSchema.safeParse(c);
    if (!res.success) throw new RolloutFileError(`${basename(path)}: call ${i} is malformed: ${res.error.issues[0]?.path.join('.')}: ${res.error.issues[0]?.message}`);
  });
  const doc = CaptureSession.fromStore(loaded).rollout({ includeDiscarded: true, includeTraces: false });
  return { data: viewerDataFromRollout(doc, { key: path, title: `${basename(path)} (session ${loaded.info.session_id})` }), doc, path };
}

export function loadRollout(path: string): LoadedRollout {
  const abs = resolve(path);
  if (!existsSync(abs)) throw new RolloutFileError(`no such file: ${path}`);
  const rollout = rolloutFromText(readFileSync(abs, 'utf8'), abs);
  // A `harness-lab rescore` report next to the rollout colours its sampled tokens by drift.
  attachRescore(rollout.data, rescorePathFor(abs));
  return rollout;
}

/** Where a harness's trajectory usually sits relative to a rollout file (Harbor trial layout included). */
export function findTrajectory(rolloutPath: string): string | null {
  const dir = dirname(resolve(rolloutPath));
  const stem = basename(rolloutPath).replace(/\.(rollout\.json|jsonl|json)$/i, '');
  const candidates = [join(dir, `${stem}.trajectory.json`), join(dir, 'trajectory.json'), join(dir, 'agent', 'trajectory.json'), join(dir, '..', 'agent', 'trajectory.json')];
  return candidates.find((c) => existsSync(c)) ?? null;
}

/** A trajectory file with its continuation files (context-summarisation splits) joined. */
export async function loadTrajectory(path: string): Promise<AtifTrajectory> {
  const abs = resolve(path);
  if (!existsSync(abs)) throw new AtifParseError(`no such trajectory file: ${path}`);
  const first = parseAtif(await readFile(abs, 'utf8'), basename(abs));
  return joinContinuations(first, async (ref) => {
    const file = resolve(dirname(abs), ref);
    return existsSync(file) ? parseAtif(await readFile(file, 'utf8'), basename(file)) : null;
  });
}

/** Run the cross-check of a loaded rollout against a trajectory file. */
export async function checkTrajectory(rollout: LoadedRollout, trajectoryPath: string): Promise<AtifCheckResult> {
  if (!rollout.doc) throw new RolloutFileError(`${basename(rollout.path)} holds TrainingTrace lines, which do not keep every captured call; cross-check the rollout document or the session file instead`);
  return atifCheck(rollout.doc, await loadTrajectory(trajectoryPath));
}
