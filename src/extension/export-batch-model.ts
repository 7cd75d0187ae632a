// Export Batch's choices and its report, without vscode: the trainer formats a batch exports to (the
// CLI's `export --batch`, src/export/export.ts), where the file goes by default, and what the export's
// manifest says was kept and dropped, read back with zod (the lab wrote it; it is a file on disk).
import { readdirSync, readFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { z } from 'zod';
import { batchDirs } from './batches-model.js';

export const BATCH_EXPORT_FORMATS = [
  {
    format: 'trl',
    label: 'TRL',
    detail: 'GRPOTrainer rollout_func rows: prompt_ids, completion_ids, logprobs, env_mask, reward; G consecutive rows per group',
  },
  {
    format: 'verl',
    label: 'veRL',
    detail: 'AgentLoopOutput rows (prompt_ids, response_ids, response_mask, response_logprobs, reward_score), uid per group',
  },
  { format: 'trainingtrace', label: 'TrainingTrace', detail: 'one line per rollout: ids, group, reward and the TRL TrainingTrace' },
] as const;
export type BatchExportFormat = (typeof BATCH_EXPORT_FORMATS)[number]['format'];

/** `<batches folder>/<batch id>.<format>.jsonl`: beside the batch, not inside it (the Batches view reads batch folders). */
export function defaultExportFile(batchDir: string, batchId: string, format: BatchExportFormat): string {
  return join(dirname(batchDir), `${batchId || basename(batchDir)}.${format}.jsonl`);
}

/** The `harness-lab export` arguments for a batch. */
export function exportArgs(batchDir: string, format: BatchExportFormat, out: string): string[] {
  return ['export', '--format', format, '--batch', batchDir, '--out', out];
}

const Counts = z.record(z.string(), z.number());
export const ExportManifestSummarySchema = z
  .object({
    format: z.string(),
    file: z.string(),
    counts: z
      .object({
        rows: z.number(),
        rollouts_kept: z.number(),
        rollouts_dropped: Counts,
        groups_kept: z.number(),
        groups_dropped: Counts,
        trainable_tokens: z.number(),
        bytes: z.number(),
      })
      .loose(),
  })
  .loose();
export type ExportManifestSummary = z.infer<typeof ExportManifestSummarySchema>;

export function readExportManifest(file: string): ExportManifestSummary {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new Error(`the export's manifest ${file} cannot be read: ${(err as Error).message}`);
  }
  const parsed = ExportManifestSummarySchema.safeParse(raw);
  if (!parsed.success)
    throw new Error(`${file} is not an export manifest: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  return parsed.data;
}

const list = (m: Record<string, number>) =>
  Object.entries(m)
    .filter(([, n]) => n > 0)
    .map(([k, n]) => `${n} ${k}`)
    .join(', ');

/** One sentence: rows written, rollouts and groups kept, what was dropped and why. */
export function exportSummary(m: ExportManifestSummary, label: string): string {
  const c = m.counts;
  const droppedRollouts = list(c.rollouts_dropped);
  const droppedGroups = list(c.groups_dropped);
  return [
    `${c.rows} ${label} row(s) from ${c.rollouts_kept} rollout(s) in ${c.groups_kept} group(s), ${c.trainable_tokens} trainable tokens`,
    `dropped rollouts: ${droppedRollouts || 'none'}`,
    `dropped groups: ${droppedGroups || 'none'}`,
  ].join('; ');
}

export interface LocalExport {
  /** The exported file (the manifest's `file`). */
  file: string;
  manifest: string;
  format: string;
  batchId: string | null;
  rows: number;
}

const LocalManifestSchema = z
  .object({
    format: z.string(),
    file: z.string(),
    batch: z.object({ batch_id: z.string() }).loose().nullable().optional(),
    counts: z.object({ rows: z.number() }).loose(),
  })
  .loose();

/** Export manifests (`*.jsonl.manifest.json`) in the folders and their batch folders, for linking a training run to what it reads. */
export function findLocalExports(folders: string[]): LocalExport[] {
  const out: LocalExport[] = [];
  const scan = (dir: string) => {
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      return;
    }
    for (const n of names.filter((f) => f.endsWith('.manifest.json'))) {
      const manifest = join(dir, n);
      try {
        const m = LocalManifestSchema.parse(JSON.parse(readFileSync(manifest, 'utf8')));
        out.push({ file: resolve(dir, m.file), manifest, format: m.format, batchId: m.batch?.batch_id ?? null, rows: m.counts.rows });
      } catch {
        // not an export manifest: skip
      }
    }
  };
  for (const f of folders) {
    scan(f);
    for (const d of batchDirs(f)) scan(d);
  }
  return out;
}
