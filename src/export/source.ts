// Where exports and the audit read rollouts from: a batch directory (src/batch/state.ts), one session
// of a data dir, or a directory of captured sessions / rollout documents.
//
// Rollouts are read through src/capture/rollout-file.ts (readRolloutFile, the one reader), one session
// at a time, so memory follows the largest session, not the batch.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { readRolloutFile, RolloutFileError, type StoredRollout } from '../capture/rollout-file.js';
import { sessionFileOf } from '../capture/store.js';
import { batchPaths, readManifest, readRolloutStates, type BatchManifest, type RolloutClass, type RolloutState } from '../batch/state.js';

export class ExportInputError extends Error {
  constructor(
    readonly file: string,
    message: string,
  ) {
    super(`${file}: ${message}`);
    this.name = 'ExportInputError';
  }
}

/** A session file as the capture store writes it (`<data-dir>/sessions/<id>.jsonl`) or a rollout document, errors in an export's terms. */
export function readRollout(file: string): StoredRollout {
  if (!existsSync(file)) throw new ExportInputError(file, 'no such file');
  try {
    return readRolloutFile(file);
  } catch (err) {
    if (err instanceof RolloutFileError) throw new ExportInputError(file, err.detail);
    throw err;
  }
}

/** One rollout an export may read; batch facts are null for sources without a batch. */
export interface RolloutUnit {
  rollout_id: string;
  group_id: string | null;
  member: number | null;
  task: string | null;
  harness: string | null;
  /** The verifier's reward; null when unknown (never 0 for unknown). */
  reward: number | null;
  class: RolloutClass | null;
  policy_version: string | null;
  session_id: string;
  file: string;
}

export interface DroppedRollout {
  rollout_id: string;
  group_id: string | null;
  session_id: string | null;
  reason: string;
  detail: string | null;
}

export interface UnitGroup {
  group_id: string | null;
  task: string | null;
  harness: string | null;
  /** Planned members (the batch's group size); null without a batch. */
  expected: number | null;
  units: RolloutUnit[];
  /** Members that never enter an export, with why. */
  dropped: DroppedRollout[];
}

export interface ExportPlan {
  kind: 'batch' | 'session' | 'rollouts';
  dir: string;
  manifest: BatchManifest | null;
  groups: UnitGroup[];
}

/** Why a rollout state keeps a rollout out of every export, or null when it may be exported. */
export function excludedReason(s: RolloutState): { reason: string; detail: string | null } | null {
  if (s.state === 'discarded') return { reason: `discarded_${s.class ?? 'unknown'}`, detail: s.error };
  if (s.state !== 'done') return { reason: 'unfinished', detail: `state ${s.state}` };
  if (!s.trainable) return { reason: 'not_trainable', detail: s.error };
  if (!s.session_id) return { reason: 'no_session', detail: 'the rollout state names no capture session' };
  return null;
}

/** What every per-member table says of a rollout first (the audit, the group view): who, its outcome, whether exports keep it. */
export function memberOutcome(s: RolloutState) {
  const why = excludedReason(s);
  return {
    rollout_id: s.rollout_id,
    member: s.member,
    state: s.state,
    class: s.class,
    reward: s.reward,
    kept: why === null,
    excluded: why?.reason ?? null,
  };
}

export function planBatch(dir: string): ExportPlan & { states: RolloutState[] } {
  const manifest = readManifest(dir);
  const states = readRolloutStates(dir, manifest);
  const byId = new Map(states.map((s) => [s.rollout_id, s]));
  const capture = batchPaths(dir).capture;
  const groups: UnitGroup[] = manifest.groups.map((g) => {
    const group: UnitGroup = {
      group_id: g.group_id,
      task: g.task,
      harness: g.harness,
      expected: g.rollout_ids.length,
      units: [],
      dropped: [],
    };
    for (const id of g.rollout_ids) {
      const s = byId.get(id)!;
      const why = excludedReason(s);
      if (why) {
        group.dropped.push({ rollout_id: id, group_id: g.group_id, session_id: s.session_id, ...why });
        continue;
      }
      group.units.push({
        rollout_id: id,
        group_id: g.group_id,
        member: s.member,
        task: s.task,
        harness: s.harness,
        reward: s.reward,
        class: s.class,
        policy_version: s.policy_version ?? manifest.policy_version,
        session_id: s.session_id!,
        file: sessionFileOf(capture, s.session_id!),
      });
    }
    return group;
  });
  return { kind: 'batch', dir, manifest, groups, states };
}

function unitForFile(file: string, sessionId: string): RolloutUnit {
  return {
    rollout_id: sessionId,
    group_id: null,
    member: null,
    task: null,
    harness: null,
    reward: null,
    class: null,
    policy_version: null,
    session_id: sessionId,
    file,
  };
}

export function planSession(dataDir: string, sessionId: string): ExportPlan {
  const file = sessionFileOf(dataDir, sessionId);
  if (!existsSync(file)) throw new ExportInputError(file, `no session '${sessionId}' in ${dataDir}`);
  return {
    kind: 'session',
    dir: dataDir,
    manifest: null,
    groups: [{ group_id: null, task: null, harness: null, expected: null, units: [unitForFile(file, sessionId)], dropped: [] }],
  };
}

/** Captured session files (`*.jsonl`, in DIR or DIR/sessions) and rollout documents (`*.rollout.json`). */
export function planRollouts(dir: string): ExportPlan {
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new ExportInputError(dir, 'not a directory');
  const files: string[] = [];
  for (const d of [dir, join(dir, 'sessions')]) {
    if (!existsSync(d) || !statSync(d).isDirectory()) continue;
    for (const name of readdirSync(d).sort()) if (name.endsWith('.jsonl') || name.endsWith('.rollout.json')) files.push(join(d, name));
  }
  if (files.length === 0)
    throw new ExportInputError(dir, 'no captured sessions (*.jsonl) or rollout documents (*.rollout.json) here or under sessions/');
  const units = files.map((f) => unitForFile(f, basename(f).replace(/\.(rollout\.json|jsonl)$/, '')));
  return {
    kind: 'rollouts',
    dir,
    manifest: null,
    groups: [{ group_id: null, task: null, harness: null, expected: null, units, dropped: [] }],
  };
}
