// `harness-lab export`: a batch, a session or a directory of rollouts as trainer input, streamed one
// session at a time (memory follows the largest session and, for grouped formats, one group's rows),
// plus FILE.manifest.json saying what was kept, what was dropped and why.
import { writeJsonAtomic } from '../batch/state.js';
import { assertTrainable } from '../capture/rollout.js';
import { JsonlWriter } from './jsonl-writer.js';
import { sortVersions } from './policy-version.js';
import {
  assertTrainingCapture,
  rolloutFacts,
  trainingTraceLine,
  trlRow,
  verlRows,
  type AuxiliaryPath,
  type Built,
  type RolloutFacts,
} from './rows.js';
import { ExportContractError } from './contract.js';
import {
  planBatch,
  planRollouts,
  planSession,
  readRollout,
  type DroppedRollout,
  type ExportPlan,
  type RolloutUnit,
  type UnitGroup,
} from './source.js';
import type { StoredRollout } from '../capture/rollout-file.js';
import type { TrainingTrace } from '../capture/trace.js';
import type { BatchManifest } from '../batch/state.js';

export type ExportFormat = 'trainingtrace' | 'trl' | 'verl' | 'paths' | 'collected';
export const EXPORT_MANIFEST_SCHEMA_VERSION = 1;

export type ExportSource =
  { kind: 'batch'; dir: string } | { kind: 'session'; dataDir: string; sessionId: string } | { kind: 'rollouts'; dir: string };

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
  batch: {
    batch_id: string;
    group_size: number;
    harnesses: string[];
    n_groups: number;
    n_rollouts: number;
    policy_version: string | null;
  } | null;
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
const ones = (mask: readonly number[]) => mask.reduce((a, b) => a + b, 0);

/** Why a whole group stays out, or null; `kept` are the members whose rows were built. */
type GroupRule = (
  kept: readonly { unit: RolloutUnit }[],
  group: UnitGroup,
  opts: ExportOptions,
) => { reason: string; detail: string } | null;

/** One export format: what it needs, how a rollout becomes rows, and when a group is kept. */
interface FormatSpec {
  /** Its rows carry a batch's reward and GRPO group, so only a batch can be exported in it. */
  needsBatch: boolean;
  /** The key trainers group rows by, and whether the group's size is the row count per group. */
  groupKey: 'group_id' | 'uid';
  rowsPerGroupIsSize: boolean;
  rows(r: StoredRollout, unit: RolloutUnit, facts: RolloutFacts, manifest: BatchManifest | null): Built<AnyRow>;
  /** Group rules applied in order; a format with any is written a group at a time. */
  groupRules: GroupRule[];
}

const noContrast: GroupRule = (kept, _g, opts) =>
  opts.dropNoContrast && kept.length > 0 && kept.every((k) => k.unit.reward !== null && k.unit.reward === kept[0]!.unit.reward)
    ? { reason: 'no_contrast', detail: `every member has reward ${kept[0]!.unit.reward}: zero advantage for all` }
    : null;
const fewerThan =
  (what: string): GroupRule =>
  (kept, _g, opts) => {
    const min = opts.minGroupSize ?? 2;
    return kept.length < min
      ? { reason: 'too_few_members', detail: `${kept.length} ${what} member(s), fewer than ${min}: no group baseline` }
      : null;
  };

/** `paths`: the lab's own per-path TrainingTrace (docs/training-trace.md), every path of the rollout. */
function pathRows(r: StoredRollout): AnyRow[] {
  try {
    assertTrainable(r.doc);
  } catch (err) {
    throw new ExportContractError(r.file, r.info.session_id, null, (err as Error).message);
  }
  return r.doc.traces.map((t) => ({ trainable_tokens: t.trainable ? t.n_trainable : 0, value: t }));
}

/** The formats `harness-lab export --format` and `batch collect` write, and the one writer below reads. */
export const EXPORT_FORMAT_SPECS: Record<ExportFormat, FormatSpec> = {
  paths: {
    needsBatch: false,
    groupKey: 'group_id',
    rowsPerGroupIsSize: false,
    rows: (r) => ({ ok: true, rows: pathRows(r), auxiliary: [], calls: [...r.calls] }),
    groupRules: [noContrast],
  },
  trainingtrace: {
    needsBatch: false,
    groupKey: 'group_id',
    rowsPerGroupIsSize: false,
    rows: (r, unit, facts) => {
      const b = trainingTraceLine(r, unit, facts);
      if (!b.ok) return b;
      return { ...b, rows: b.rows.map((l) => ({ trainable_tokens: l.trace.turns.reduce((a, t) => a + ones(t.loss_mask), 0), value: l })) };
    },
    groupRules: [noContrast],
  },
  trl: {
    needsBatch: true,
    groupKey: 'group_id',
    rowsPerGroupIsSize: true,
    rows: (r, unit, facts) => {
      const b = trlRow(r, unit, facts);
      if (!b.ok) return b;
      return { ...b, rows: b.rows.map((row) => ({ trainable_tokens: ones(row.env_mask), value: row })) };
    },
    groupRules: [
      (kept, g) =>
        kept.length !== g.expected
          ? {
              reason: 'incomplete_group',
              detail: `${kept.length} of ${g.expected} members exportable; TRL views rewards as (-1, num_generations), so a group must have exactly ${g.expected} rows`,
            }
          : null,
      noContrast,
    ],
  },
  verl: {
    needsBatch: true,
    groupKey: 'uid',
    rowsPerGroupIsSize: false,
    rows: (r, unit, facts) => {
      const b = verlRows(r, unit, facts);
      if (!b.ok) return b;
      return { ...b, rows: b.rows.map((row) => ({ trainable_tokens: ones(row.response_mask), value: row })) };
    },
    groupRules: [fewerThan('exportable'), noContrast],
  },
  // `batch collect`: every trainable path as a TrainingTrace inside the rollout's batch facts, from
  // finished groups with at least two trainable members (never padded).
  collected: {
    needsBatch: true,
    groupKey: 'group_id',
    rowsPerGroupIsSize: false,
    rows: (r, unit, _facts, manifest) => {
      assertTrainingCapture(r);
      const rows = r.doc.traces
        .filter((t) => t.trainable)
        .map((t) => ({ trainable_tokens: t.n_trainable, value: collectedLine(manifest!, unit, t) }));
      return { ok: true, rows, auxiliary: [], calls: [...r.calls] };
    },
    groupRules: [
      (_kept, g) => {
        const pending = g.dropped.filter((d) => d.reason === 'unfinished').length;
        return pending ? { reason: 'unfinished', detail: `${pending} member(s) not finished` } : null;
      },
      fewerThan('trainable'),
      noContrast,
    ],
  },
};

export const EXPORT_FORMATS = Object.keys(EXPORT_FORMAT_SPECS) as ExportFormat[];

/** A `collected` line: the rollout's batch facts around an unchanged TrainingTrace (strict readers reject extra trace fields). */
export interface CollectedLine {
  batch_id: string;
  group_id: string | null;
  rollout_id: string;
  member: number | null;
  task: string | null;
  harness: string | null;
  class: string | null;
  reward: number | null;
  policy_version: string | null;
  sampling: BatchManifest['sampling'];
  trace: TrainingTrace;
}

function collectedLine(manifest: BatchManifest, u: RolloutUnit, trace: TrainingTrace): CollectedLine {
  const { rollout_id, group_id, member, task, harness, class: cls, reward, policy_version } = u;
  return {
    batch_id: manifest.batch_id,
    group_id,
    rollout_id,
    member,
    task,
    harness,
    class: cls,
    reward,
    policy_version,
    sampling: manifest.sampling,
    trace,
  };
}

const bump = (m: Record<string, number>, k: string, n = 1) => {
  m[k] = (m[k] ?? 0) + n;
};

export async function runExport(opts: ExportOptions): Promise<ExportManifest> {
  const { format, source, out } = opts;
  const spec = EXPORT_FORMAT_SPECS[format];
  if (spec.needsBatch && source.kind !== 'batch') {
    throw new ExportUsageError(
      `--format ${format} needs --batch DIR: its rows carry the verifier's reward and the GRPO group, which only a batch has (use --format trainingtrace for a session or a directory of rollouts)`,
    );
  }
  const plan = sourcePlan(source);
  const manifest = plan.manifest;
  // Formats whose rows depend on the whole group see it before writing it (one group's rows in memory).
  const rules = spec.groupRules.filter((rule) => rule !== noContrast || opts.dropNoContrast === true);
  const grouped = plan.kind === 'batch' && rules.length > 0;

  const m: ExportManifest = {
    schema_version: EXPORT_MANIFEST_SCHEMA_VERSION,
    format,
    file: out,
    created_at: new Date().toISOString(),
    source: { kind: source.kind, path: source.kind === 'session' ? source.dataDir : source.dir },
    batch: manifest
      ? {
          batch_id: manifest.batch_id,
          group_size: manifest.group_size,
          harnesses: manifest.harnesses,
          n_groups: manifest.groups.length,
          n_rollouts: manifest.groups.reduce((a, g) => a + g.rollout_ids.length, 0),
          policy_version: manifest.policy_version,
        }
      : null,
    sampling: { pinned: manifest ? { ...manifest.sampling } : null, observed: [] },
    policy_versions: { present: [], newest: null, calls_by_version: {} },
    grouping: manifest
      ? { key: spec.groupKey, rows_per_group: spec.rowsPerGroupIsSize ? manifest.group_size : null, consecutive: true }
      : null,
    counts: {
      rows: 0,
      rollouts_kept: 0,
      rollouts_dropped: {},
      groups_kept: 0,
      groups_dropped: {},
      calls: 0,
      trainable_tokens: 0,
      bytes: 0,
    },
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
        const built = spec.rows(r, unit, facts, manifest);
        if (!built.ok) {
          dropRollout({
            rollout_id: unit.rollout_id,
            group_id: unit.group_id,
            session_id: r.info.session_id,
            reason: built.reason,
            detail: built.detail,
          });
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
      for (const rule of rules) if ((drop = rule(kept, group, opts))) break;
      if (drop) {
        m.dropped_groups.push({ group_id: gid, ...drop, members: kept.length });
        bump(m.counts.groups_dropped, drop.reason);
        for (const k of kept)
          dropRollout({
            rollout_id: k.unit.rollout_id,
            group_id: gid,
            session_id: k.unit.session_id,
            reason: `group_${drop.reason}`,
            detail: null,
          });
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
