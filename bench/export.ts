// Export benchmark: a synthetic 100,000-call batch (about 1 GB of session files, written through the
// capture store's own writer), exported in each trainer format, against reading the same files raw.
// Each measurement runs in its own node process, so its peak RSS is its own.
//   node --import tsx bench/export.ts [--calls 100000] [--calls-per-session 20] [--quick] [--keep] [--out FILE]
// Target: exporting stays within a fixed memory bound (it streams: one session at a time), whatever
// the batch size. Results: bench-results/export.json.
import { spawnSync } from 'node:child_process';
import { createReadStream, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { batchPaths, trainingSampling, writeJsonAtomic, writeRolloutState, type BatchManifest } from '../src/batch/state.js';
import { CaptureStore } from '../src/capture/store.js';
import { runExport, type ExportFormat } from '../src/export/export.js';
import { generateRollout } from './rollout-generator.js';

const args = process.argv.slice(2);
const flag = (name: string, fallback: number) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};
const quick = args.includes('--quick') || process.env.BENCH_QUICK === '1';
const CALLS = flag('calls', quick ? 10_000 : 100_000);
const PER_SESSION = flag('calls-per-session', 20);
const GROUP = 4;
/** Peak RSS allowed for one export process: far below the batch, so it cannot be holding it. */
const RSS_TARGET_MIB = 400;

interface Measure {
  mode: string;
  wall_ms: number;
  input_mb: number;
  input_mb_s: number;
  output_mb: number;
  rows: number;
  peak_rss_mib: number;
}

function dirBytes(dir: string): number {
  return readdirSync(dir).reduce((a, n) => a + statSync(join(dir, n)).size, 0);
}

async function generate(dir: string): Promise<{ sessions: number; calls: number; bytes: number }> {
  const paths = batchPaths(dir);
  mkdirSync(paths.rollouts, { recursive: true });
  const store = new CaptureStore(paths.capture);
  const nSessions = Math.ceil(CALLS / PER_SESSION);
  const groups: BatchManifest['groups'] = [];
  const now = '2026-01-01T00:00:00.000Z';
  let calls = 0;
  for (let s = 0; s < nSessions; s++) {
    // calls-2 main-agent calls plus a two-call subagent: PER_SESSION calls per session.
    const g = generateRollout({ seed: s + 1, calls: PER_SESSION - 2, firstPrompt: 400, sampled: 40, glue: 40, subagent: true });
    const sid = `s${String(s).padStart(6, '0')}`;
    const gi = Math.floor(s / GROUP);
    const rid = `r${String(s).padStart(6, '0')}`;
    if (s % GROUP === 0)
      groups.push({ group_id: `g${String(gi).padStart(5, '0')}`, task: `task-${gi}`, harness: 'bench', rollout_ids: [] });
    groups.at(-1)!.rollout_ids.push(rid);
    const writes = [
      store.append(sid, {
        type: 'session',
        ...g.session,
        session_id: sid,
        metadata: { policy_version: 'step-3', group_id: groups.at(-1)!.group_id, rollout_id: rid },
      }),
    ];
    for (const r of g.records) writes.push(store.append(sid, { type: 'call', ...r, session_id: sid }));
    await Promise.all(writes);
    calls += g.records.length;
    writeRolloutState(dir, {
      rollout_id: rid,
      group_id: groups.at(-1)!.group_id,
      member: s % GROUP,
      task: `task-${gi}`,
      harness: 'bench',
      state: 'done',
      class: s % 2 ? 'completed' : 'policy_failure',
      reward: s % 2 ? 1 : 0,
      rewards: {},
      trainable: true,
      session_id: sid,
      attempts: [
        { attempt: 0, session_id: sid, started_at: now, ended_at: now, out_dir: `attempts/${rid}/0`, outcome: 'finished', trainable: true },
      ],
      policy_version: 'step-3',
      queued_at: now,
      started_at: now,
      ended_at: now,
      duration_ms: 1,
      error: null,
      backend_ref: null,
      n_calls: g.records.length,
    });
  }
  await store.close();
  const manifest: BatchManifest = {
    schema_version: 1,
    batch_id: 'bench-export',
    created_at: now,
    backend: 'docker',
    harnesses: ['bench'],
    group_size: GROUP,
    tasks: groups.map((g) => ({ name: g.task, dir: g.task })),
    groups,
    sampling: trainingSampling(1),
    policy_version: 'step-3',
    timeout_sec: 600,
    on_timeout: 'discard',
    parallel: 1,
    engine_url: null,
    model: null,
    k8s: null,
  };
  writeJsonAtomic(paths.manifest, manifest);
  return { sessions: nSessions, calls, bytes: dirBytes(join(paths.capture, 'sessions')) };
}

/** Child: one measurement, printed as one JSON line. */
async function child(mode: string, dir: string, out: string): Promise<void> {
  const sessions = join(batchPaths(dir).capture, 'sessions');
  const input = dirBytes(sessions);
  const t0 = performance.now();
  let rows = 0;
  let output = 0;
  if (mode === 'raw-bytes' || mode === 'raw-parse') {
    for (const name of readdirSync(sessions).sort()) {
      const stream = createReadStream(join(sessions, name));
      if (mode === 'raw-bytes') {
        for await (const chunk of stream) output += (chunk as Buffer).length;
      } else {
        for await (const line of createInterface({ input: stream, crlfDelay: Infinity })) {
          if (!line) continue;
          // Every line is parsed (that is the floor measured); rows count records, not the store's
          // `sum` index lines, whose number depends on how appends were batched.
          const type = (JSON.parse(line) as { type?: string }).type;
          output += type ? 0 : 1;
          if (type !== 'sum') rows++;
        }
      }
    }
  } else {
    const m = await runExport({ format: mode as ExportFormat, source: { kind: 'batch', dir }, out });
    rows = m.counts.rows;
    output = m.counts.bytes;
  }
  const wall = performance.now() - t0;
  const r: Measure = {
    mode,
    wall_ms: Math.round(wall),
    input_mb: +(input / 1e6).toFixed(1),
    input_mb_s: +(input / 1e6 / (wall / 1000)).toFixed(1),
    output_mb: +(output / 1e6).toFixed(1),
    rows,
    peak_rss_mib: Math.round(process.resourceUsage().maxRSS / 1024),
  };
  process.stdout.write(`${JSON.stringify(r)}\n`);
}

async function main(): Promise<void> {
  if (args[0] === '--child') return child(args[1]!, args[2]!, args[3]!);
  const root = mkdtempSync(join(tmpdir(), 'hl-bench-export-'));
  const dir = join(root, 'batch');
  try {
    process.stderr.write(`generating ${CALLS} calls (${PER_SESSION} per session) into ${dir} through CaptureStore.append ...\n`);
    const t0 = performance.now();
    const gen = await generate(dir);
    process.stderr.write(
      `  ${gen.sessions} sessions, ${gen.calls} calls, ${(gen.bytes / 1e6).toFixed(0)} MB in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`,
    );
    const results: Measure[] = [];
    for (const mode of ['raw-bytes', 'raw-parse', 'trainingtrace', 'trl', 'verl']) {
      const out = join(root, `${mode}.jsonl`);
      const r = spawnSync(process.execPath, ['--import', 'tsx', __filename, '--child', mode, dir, out], {
        encoding: 'utf8',
        maxBuffer: 1 << 20,
      });
      if (r.status !== 0) throw new Error(`${mode} failed (exit ${r.status}): ${r.stderr}`);
      const m = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as Measure;
      results.push(m);
      rmSync(out, { force: true });
      process.stderr.write(
        `  ${mode.padEnd(14)} ${String(m.wall_ms).padStart(7)} ms  ${String(m.input_mb_s).padStart(7)} MB/s in  ${String(m.output_mb).padStart(7)} MB out  peak RSS ${m.peak_rss_mib} MiB\n`,
      );
    }
    const exports = results.filter((r) => !r.mode.startsWith('raw'));
    const pass = exports.every((r) => r.peak_rss_mib <= RSS_TARGET_MIB);
    const report = {
      bench: 'export',
      quick,
      calls: gen.calls,
      sessions: gen.sessions,
      batch_mb: +(gen.bytes / 1e6).toFixed(1),
      target: { peak_rss_mib: RSS_TARGET_MIB },
      results,
      pass,
      load_1m: (await import('node:os')).loadavg()[0],
    };
    const outIdx = args.indexOf('--out');
    const outFile = outIdx >= 0 ? args[outIdx + 1]! : join('bench-results', 'export.json');
    mkdirSync(dirname(outFile), { recursive: true });
    writeFileSync(outFile, `${JSON.stringify(report, null, 2)}\n`);
    process.stderr.write(
      `${pass ? 'PASS' : 'FAIL'}: every export peaked at or under ${RSS_TARGET_MIB} MiB RSS on a ${(gen.bytes / 1e6).toFixed(0)} MB batch\n`,
    );
    if (!pass) process.exitCode = 1;
  } finally {
    if (!args.includes('--keep')) rmSync(root, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench export: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
