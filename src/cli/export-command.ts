// `harness-lab export`: trainer input from a batch, a session or a directory of rollouts. The logic is
// src/export/export.ts; this file only reads flags and reports.
import { existsSync } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import { BatchFileError } from '../batch/state.js';
import { ExportContractError } from '../export/contract.js';
import { EXPORT_FORMATS, ExportUsageError, manifestPath, runExport, type ExportFormat, type ExportSource } from '../export/export.js';
import { ExportInputError } from '../export/source.js';
import { defineCommand, UsageError } from './args.js';

const USAGE = `usage: harness-lab export [--format trainingtrace|trl|verl|paths|collected|replay] SOURCE --out FILE.jsonl

SOURCE is one of
  --batch DIR                  a batch directory (batch.json, rollouts/, capture/)
  --session ID --data-dir DIR  one captured session of a data dir
  --rollouts DIR               captured session files (*.jsonl, here or under sessions/) or *.rollout.json

Formats (docs/exports.md):
  trainingtrace  one line per rollout: {rollout_id, group_id, session_id, reward, ..., trace: TRL TrainingTrace}
  trl            one row per rollout for GRPOTrainer.rollout_func (prompt_ids, completion_ids, logprobs,
                 env_mask, reward, group_id); exactly group-size rows per group, consecutive (needs --batch)
  verl           AgentLoopOutput rows, one per segment, keyed {uid}_{session}_{index}; reward on the final
                 segment (needs --batch)
  paths          the lab's own TrainingTrace, one per root-to-leaf path (default; docs/training-trace.md)
  collected      what \`batch collect\` writes: each trainable path inside its batch facts, from finished
                 groups with 2+ trainable members (needs --batch)
  replay         every captured engine request with its start time relative to the first, for
                 \`harness-lab replay-load FILE --engine-url URL --speed N\` (docs/replay.md); a rollout
                 captured token in also keeps its records (render info, prompt and sampled ids,
                 logprobs, answers), so \`harness-lab replay FILE\` replays it token in

Options:
  --min-group-size N   verl, collected: drop groups with fewer exportable members (default 2)
  --drop-no-contrast   drop groups whose members all have the same reward

Also writes FILE.manifest.json: batch, policy versions, sampling, counts kept and dropped per reason.
Discarded rollouts never enter an export. A call that breaks the capture contract (empty prompt ids,
NaN or missing logprobs, mask length mismatch) stops the export (exit 1) and names file, session and call.`;

export const exportCommand = defineCommand({
  name: 'export',
  summary: 'write trainer input (TrainingTrace, TRL, veRL) from a batch or sessions',
  usage: USAGE,
  flags: {
    format: { type: 'string', short: 'f', default: 'paths' },
    batch: { type: 'string' },
    session: { type: 'string' },
    'data-dir': { type: 'string' },
    rollouts: { type: 'string' },
    // Checked after the source, so `--data-dir DIR` alone says what it lacks first (--session).
    out: { type: 'string', short: 'o' },
    'min-group-size': { type: 'integer', default: 2 },
    'drop-no-contrast': { type: 'boolean' },
  },
  run: async ({ flags }) => {
    const format = flags.format as ExportFormat;
    if (flags.format === 'replay') return exportReplay(flags);
    if (!EXPORT_FORMATS.includes(format))
      throw new UsageError(`--format must be one of ${EXPORT_FORMATS.join(', ')}, got '${flags.format}'`);
    const given = [flags.batch && '--batch', flags.session && '--session', flags.rollouts && '--rollouts'].filter(Boolean);
    if (given.length === 0 && flags['data-dir']) throw new UsageError('--session is required', { showUsage: true });
    if (given.length !== 1)
      throw new UsageError(
        `give exactly one source (--batch, --session or --rollouts), got ${given.length ? given.join(' and ') : 'none'}`,
        { showUsage: true },
      );
    let source: ExportSource;
    if (flags.batch) source = { kind: 'batch', dir: flags.batch };
    else if (flags.rollouts) source = { kind: 'rollouts', dir: flags.rollouts };
    else {
      if (!flags['data-dir'])
        throw new UsageError('--session needs --data-dir DIR (the proxy data dir holding sessions/)', { showUsage: true });
      source = { kind: 'session', dataDir: flags['data-dir'], sessionId: flags.session! };
    }
    const out = flags.out;
    if (!out) throw new UsageError('--out is required', { showUsage: true });
    if (!existsSync(dirname(resolve(out)))) throw new UsageError(`--out ${out}: the directory ${dirname(resolve(out))} does not exist`);
    try {
      const m = await runExport({ format, source, out, minGroupSize: flags['min-group-size'], dropNoContrast: flags['drop-no-contrast'] });
      const dropped = Object.entries(m.counts.rollouts_dropped).map(([k, n]) => `${n} ${k}`);
      const groups = Object.entries(m.counts.groups_dropped).map(([k, n]) => `${n} ${k}`);
      process.stdout.write(
        `wrote ${m.counts.rows} ${format} row(s) from ${m.counts.rollouts_kept} rollout(s) to ${out} (${(m.counts.bytes / 1e6).toFixed(1)} MB, ${m.counts.trainable_tokens} trainable tokens)\n` +
          (dropped.length ? `dropped rollouts: ${dropped.join(', ')}\n` : '') +
          (groups.length ? `dropped groups: ${groups.join(', ')}\n` : '') +
          `manifest: ${manifestPath(out)}\n`,
      );
      return 0;
    } catch (err) {
      if (err instanceof ExportUsageError) throw new UsageError(err.message);
      if (err instanceof ExportContractError || err instanceof ExportInputError || err instanceof BatchFileError) {
        process.stderr.write(`harness-lab export: ${err.message}\n`);
        return 1;
      }
      throw err;
    }
  },
});

/** `--format replay`: the load file of src/replay/load.ts from the same sources (kept rollouts only for a batch). */
async function exportReplay(flags: {
  batch?: string;
  session?: string;
  'data-dir'?: string;
  rollouts?: string;
  out?: string;
}): Promise<number> {
  const { planBatch, planRollouts, planSession, readRollout } = await import('../export/source.js');
  const { writeLoadFile } = await import('../replay/load.js');
  const { rewardBeside } = await import('../replay/source.js');
  const { ROLLOUT_DOCUMENT_FILE } = await import('../sandbox/rollout-runner.js');
  const given = [flags.batch && '--batch', flags.session && '--session', flags.rollouts && '--rollouts'].filter(Boolean);
  if (given.length !== 1)
    throw new UsageError(`give exactly one source (--batch, --session or --rollouts), got ${given.length ? given.join(' and ') : 'none'}`, {
      showUsage: true,
    });
  if (flags.session && !flags['data-dir'])
    throw new UsageError('--session needs --data-dir DIR (the proxy data dir holding sessions/)', { showUsage: true });
  const out = flags.out;
  if (!out) throw new UsageError('--out is required', { showUsage: true });
  try {
    const plan = flags.batch
      ? planBatch(flags.batch)
      : flags.rollouts
        ? planRollouts(flags.rollouts)
        : planSession(flags['data-dir']!, flags.session!);
    const units = plan.groups.flatMap((g) => g.units);
    // A token-in capture's lines carry what its replay reads (load.ts), so the session and its outcome go along.
    const rollouts = units.map((u) => {
      const stored = readRollout(u.file);
      const { session_id, metadata, capture_level } = stored.doc;
      return {
        rollout_id: u.rollout_id,
        file: u.file,
        calls: stored.calls,
        session_id,
        metadata,
        capture_level,
        // A rollout folder's document has its outcome beside it; other files of a folder share no rollout.json.
        reward: u.reward ?? (basename(u.file) === ROLLOUT_DOCUMENT_FILE ? rewardBeside(u.file) : null),
      };
    });
    const { requests, span_ms, replayable } = writeLoadFile(out, rollouts);
    process.stdout.write(
      `wrote ${requests} request(s) from ${rollouts.length} rollout(s) spanning ${(span_ms / 1000).toFixed(1)} s to ${out}\n` +
        (replayable
          ? `${replayable} rollout(s) captured token in, with their records: \`harness-lab replay ${out}\` replays them token in\n`
          : ''),
    );
    return 0;
  } catch (err) {
    if (err instanceof ExportInputError || err instanceof BatchFileError) {
      process.stderr.write(`harness-lab export: ${err.message}\n`);
      return 1;
    }
    throw err;
  }
}
