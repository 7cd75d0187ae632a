// `harness-lab export`: a batch, a session or a directory of rollouts as trainer input, streamed one
// session at a time (memory follows the largest session and, for grouped formats, one group's rows),
// plus FILE.manifest.json saying what was kept, what was dropped and why.
import { writeJsonAtomic } from '../batch/state.js';
import { assertTrainable } from '../capture/rollout.js';
import { JsonlWriter } from './jsonl-writer.js';
import { sortVersions } from './policy-version.js';
import { rolloutFacts, trainingTraceLine, trlRow, verlRows, type AuxiliaryPath, type Built, type RolloutFacts } from './rows.js';
import { ExportContractError } from './contract.js';
import { planBatch, planRollouts, planSession, readRollout, type DroppedRollout, type ExportPlan, type RolloutUnit, type StoredRollout } from './source.js';

export const EXPORT_FORMATS = ['trainingtrace', 'trl', 'verl', 'paths'] as const;
export type ExportFormat = (typeof EXPORT_FORMATS)[number];
export const EXPORT_MANIFEST_SCHEMA_VERSION = 1;

export type ExportSource = { kind: 'batch'; dir: string } | { kind: 'session'; dataDir: string; sessionId: string } | { kind: 'rollouts'; dir: string };

export interface ExportOptions {
  format: ExportFormat;
  source: ExportSource;
  out: string;
  /** verl: groups with fewer exportable members are dropped (default 2; a group of one has no baseline). */
  minGroupSize?: number;
  /** Drop groups whose exported members all have the same reward (they carry no GRPO signal). */
  dropNoContrast?: boolean;
}

export interface DroppedGroup {
  group_id: string;
  reason: string;
  detail: string;
  members: number;
}

export interface ExportManifest {
  schema_version: typeof EXPORT_MANIFEST_SCHEMA_VERSION;
  format: ExportFormat;
  file: string;
  created_at: string;
  source: { kind: ExportSource['kind']; path: string };
  batch: { batch_id: string; group_size: number; harnesses: string[]; n_groups: number; n_rollouts: number; policy_version: string | null } | null;
  /** The batch's pinned sampling, else every distinct sampling the exported calls were sent with. */
  sampling: { pinned: Record<string, number> | null; observed: Record<string, unknown>[] };
  policy_versions: { present: string[]; newest: string | null; calls_by_version: Record<string, number> };
  grouping: { key: string; rows_per_group: number | null; consecutive: boolean } | null;
  counts: {
    rows: number;
    rollouts_kept: number;
    rollouts_dropped: Record<string, number>;
    groups_kept: number;
    groups_dropped: Record<string, number>;
    calls: number;
    trainable_tokens: number;
    bytes: number;
  };
  dropped_rollouts: DroppedRollout[];
  dropped_groups: DroppedGroup[];
  /** Paths of exported rollouts that are not rows of this format (subagents, title calls, ...). */
  auxiliary_paths: AuxiliaryPath[];
}

export class ExportUsageError extends Error {}

function sourcePlan(source: ExportSource): ExportPlan {
  if (source.kind === 'batch') return planBatch(source.dir);
  if (source.kind === 'session') return planSession(source.dataDir, source.sessionId);
  return planRollouts(source.dir);
}

type AnyRow = { trainable_tokens: number; value: unknown };

/** The format's rows for one rollout. `paths` is the lab's own per-path TrainingTrace (docs/training-trace.md). */
function buildRows(format: ExportFormat, r: StoredRollout, unit: RolloutUnit, facts: RolloutFacts): Built<AnyRow> {
  const ones = (mask: readonly number[]) => mask.reduce((a, b) => a + b, 0);
  if (format === 'paths') {
    try {
      assertTrainable(r.doc);
    } catch (err) {
      throw new ExportContractError(r.file, r.info.session_id, null, (err as Error).message);
    }
    return { ok: true, rows: r.doc.traces.map((t) => ({ trainable_tokens: t.trainable ? t.n_trainable : 0, value: t })), auxiliary: [], calls: [...r.calls] };
  }
  if (format === 'trainingtrace') {
    const b = trainingTraceLine(r, unit, facts);
    if (!b.ok) return b;
    return { ...b, rows: b.rows.map((l) => ({ trainable_tokens: l.trace.turns.reduce((a, t) => a + ones(t.loss_mask), 0), value: l })) };
  }
  if (format === 'trl') {
    const b = trlRow(r, unit, facts);
    if (!b.ok) return b;
    return { ...b, rows: b.rows.map((row) => ({ trainable_tokens: ones(row.env_mask), value: row })) };
  }
  const b = verlRows(r, unit, facts);
  if (!b.ok) return b;
  return { ...b, rows: b.rows.map((row) => ({ trainable_tokens: ones(row.response_mask), value: row })) };
}

const bump = (m: Record<string, number>, k: string, n = 1) => {
  m[k] = (m[k] ?? 0) + n;
};

export async function runExport(opts: ExportOptions): Promise<ExportManifest> {
  const { format, source, out } = opts;
  if ((format === 'trl' || format === 'verl') && source.kind !== 'batch') {
    throw new ExportUsageError(`--format ${format} needs --batch DIR: its rows carry the verifier's reward and the GRPO group, which only a batch has (use --format trainingtrace for a session or a directory of rollouts)`);
  }
  const plan = sourcePlan(source);
  const manifest = plan.manifest;
  const minGroup = opts.minGroupSize ?? 2;
  // Formats whose rows depend on the whole group see it before writing it (one group's rows in memory).
  const grouped = format === 'trl' || format === 'verl' || (opts.dropNoContrast === true && plan.kind === 'batch');

  const m: ExportManifest = {
    schema_version: EXPORT_MANIFEST_SCHEMA_VERSION,
    format,
    file: out,
    created_at: new Date().toISOString(),
    source: { kind: source.kind, path: source.kind === 'session' ? source.dataDir : source.dir },
    batch: manifest
      ? { batch_id: manifest.batch_id, group_size: manifest.group_size, harnesses: manifest.harnesses, n_groups: manifest.groups.length, n_rollouts: manifest.groups.reduce((a, g) => a + g.rollout_ids.length, 0), policy_version: manifest.policy_version }
      : null,
    sampling: { pinned: manifest ? { ...manifest.sampling } : null, observed: [] },
    policy_versions: { present: [], newest: null, calls_by_version: {} },
    grouping: manifest ? { key: format === 'verl' ? 'uid' : 'group_id', rows_per_group: format === 'trl' ? manifest.group_size : null, consecutive: true } : null,
    counts: { rows: 0, rollouts_kept: 0, rollouts_dropped: {}, groups_kept: 0, groups_dropped: {}, calls: 0, trainable_tokens: 0, bytes: 0 },
    dropped_rollouts: [],
    dropped_groups: [],
    auxiliary_paths: [],
  };
  const sampling = new Set<string>();
  const dropRollout = (d: DroppedRollout) => {
    m.dropped_rollouts.push(d);
    bump(m.counts.rollouts_dropped, d.reason);
  };

  const writer = new JsonlWriter(out);
  try {
    for (const group of plan.groups) {
      for (const d of group.dropped) dropRollout(d);
      type Kept = { unit: RolloutUnit; rows: AnyRow[]; auxiliary: AuxiliaryPath[]; versions: (string | null)[]; sampling: string[] };
      const kept: Kept[] = [];
      const flush = async (k: Kept) => {
        for (const row of k.rows) {
          await writer.write(row.value);
          m.counts.rows++;
          m.counts.trainable_tokens += row.trainable_tokens;
        }
        m.counts.rollouts_kept++;
        m.counts.calls += k.versions.length;
        for (const v of k.versions) bump(m.policy_versions.calls_by_version, v ?? 'unknown');
        for (const s of k.sampling) sampling.add(s);
        m.auxiliary_paths.push(...k.auxiliary);
      };
      for (const unit of group.units) {
        // One session in memory at a time: read, convert, hand the rows on, let it go.
        const r = readRollout(unit.file);
        const facts = rolloutFacts(r, unit, manifest?.policy_version ?? null);
        const built = buildRows(format, r, unit, facts);
        if (!built.ok) {
          dropRollout({ rollout_id: unit.rollout_id, group_id: unit.group_id, session_id: r.info.session_id, reason: built.reason, detail: built.detail });
          continue;
        }
        const k: Kept = {
          unit,
          rows: built.rows,
          auxiliary: built.auxiliary,
          versions: built.calls.map((c) => facts.versions.get(c.call_id) ?? null),
          sampling: [...new Set(built.calls.map((c) => JSON.stringify(c.sampling_params ?? {})))],
        };
        if (grouped) kept.push(k);
        else await flush(k);
      }
      if (!grouped) {
        if (group.group_id !== null) m.counts.groups_kept++;
        continue;
      }
      const gid = group.group_id!;
      let drop: { reason: string; detail: string } | null = null;
      if (format === 'trl' && kept.length !== group.expected) {
        drop = { reason: 'incomplete_group', detail: `${kept.length} of ${group.expected} members exportable; TRL views rewards as (-1, num_generations), so a group must have exactly ${group.expected} rows` };
      } else if (format === 'verl' && kept.length < minGroup) {
        drop = { reason: 'too_few_members', detail: `${kept.length} exportable member(s), fewer than ${minGroup}: no group baseline` };
      } else if (opts.dropNoContrast && kept.length > 0 && kept.every((k) => k.unit.reward !== null && k.unit.reward === kept[0]!.unit.reward)) {
        drop = { reason: 'no_contrast', detail: `every member has reward ${kept[0]!.unit.reward}: zero advantage for all` };
      }
      if (drop) {
        m.dropped_groups.push({ group_id: gid, ...drop, members: kept.length });
        bump(m.counts.groups_dropped, drop.reason);
        for (const k of kept) dropRollout({ rollout_id: k.unit.rollout_id, group_id: gid, session_id: k.unit.session_id, reason: `group_${drop.reason}`, detail: null });
        continue;
      }
      for (const k of kept) await flush(k);
      m.counts.groups_kept++;
    }
    m.counts.bytes = writer.bytes;
    await writer.commit();
  } catch (err) {
    await writer.abort();
    throw err;
  }
  const present = Object.keys(m.policy_versions.calls_by_version).filter((v) => v !== 'unknown');
  m.policy_versions.present = sortVersions(present);
  m.policy_versions.newest = m.policy_versions.present.at(-1) ?? null;
  m.sampling.observed = [...sampling].sort().map((s) => JSON.parse(s) as Record<string, unknown>);
  writeJsonAtomic(manifestPath(out), m);
  return m;
}

export const manifestPath = (out: string): string => `${out}.manifest.json`;
