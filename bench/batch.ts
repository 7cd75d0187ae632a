// bench/batch.ts: rollout batches on local Docker.
//   node --import tsx bench/batch.ts [--quick] [--levels 1,2,4] [--group-size G] [--embedded]
//                                    [--pacing-levels 4,16]
// The same tasks (examples/tasks: hello-file and fix-script, the reference harness) run as one
// `harness-lab batch submit` per --parallel level, and, side by side, as sequential
// `harness-lab rollout -n G` per task. Per path: wall time, rollouts per minute, and the lab's own
// overhead per rollout: the rollout's wall time minus the time spent in the harness (agent phase)
// and in the verifier, i.e. image lookup, container create/start/remove, config writes, tests copy,
// capture bookkeeping, state writes. The scripted policies answer through the in-repo vLLM-shaped
// engine (HARNESS_LAB_POLICY_ENGINE=fake) unless --embedded, so the numbers are the lab's, not the
// CPU model's. Then sandbox pacing (#30): a batch per --pacing-levels level with the start cap on
// (--max-starting 4, the default) and off (--max-starting 0), side by side in one run, as rollouts
// per minute. Measures only (no targets): a shared machine's load dominates absolute numbers.
// Writes bench-results/batch.json.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const REPO = join(__dirname, '..');
const CLI = join(REPO, 'dist', 'cli.js');
const TASKS = ['hello-file', 'fix-script'].map((t) => join(REPO, 'examples', 'tasks', t));

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean' },
    levels: { type: 'string' },
    'group-size': { type: 'string' },
    embedded: { type: 'boolean' },
    'pacing-levels': { type: 'string' },
  },
});
const quick = values.quick || process.env.BENCH_QUICK === '1';
const levels = (values.levels ?? (quick ? '1,2' : '1,2,4')).split(',').map(Number);
const groupSize = Number(values['group-size'] ?? (quick ? 2 : 4));
const pacingLevels = (values['pacing-levels'] ?? (quick ? '2' : '4,16')).split(',').map(Number);
const env = { ...process.env, ...(values.embedded ? {} : { HARNESS_LAB_POLICY_ENGINE: 'fake' }) };

function harnessLab(args: string[]): Promise<{ code: number | null; ms: number; out: string }> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.stderr.on('data', (b: Buffer) => (out += b.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, ms: performance.now() - t0, out }));
  });
}

interface RolloutTimes {
  ms: number;
  agentMs: number;
  verifierMs: number;
  ok: boolean;
}

/** Every rollout.json under a directory (runRollout writes one per rollout, for `run` and for batches). */
function rolloutRecords(dir: string): RolloutTimes[] {
  const out: RolloutTimes[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory() && e.name !== 'capture' && e.name !== '.capture' && e.name !== 'agent') walk(p);
      else if (e.name === 'rollout.json') {
        // Scored, whatever the reward: batches follow the tasks' sampling policies, whose slips score
        // 0 (hello-file) or 0.25 (fix-script) with the same calls as the right move.
        const r = JSON.parse(readFileSync(p, 'utf8'));
        out.push({ ms: r.ms, agentMs: r.agent.ms, verifierMs: r.verifier?.ms ?? 0, ok: r.status === 'ok' && typeof r.reward === 'number' });
      }
    }
  };
  walk(dir);
  return out;
}

function summarise(path: string, parallel: number, wallMs: number, records: RolloutTimes[]) {
  const n = records.length;
  const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
  const overhead = records.map((r) => r.ms - r.agentMs - r.verifierMs);
  return {
    path,
    rollouts: n,
    ok: records.filter((r) => r.ok).length,
    wall_s: Math.round(wallMs / 100) / 10,
    rollouts_per_min: Math.round((n / (wallMs / 60_000)) * 10) / 10,
    rollout_ms_mean: Math.round(mean(records.map((r) => r.ms))),
    agent_ms_mean: Math.round(mean(records.map((r) => r.agentMs))),
    verifier_ms_mean: Math.round(mean(records.map((r) => r.verifierMs))),
    lab_overhead_ms_per_rollout: Math.round(mean(overhead)),
    /** Wall time per rollout not spent in any rollout (process start, engine and proxy start, teardown), amortised. */
    fixed_ms_per_rollout: Math.round((wallMs - records.reduce((a, r) => a + r.ms, 0) / parallel) / Math.max(1, n)),
  };
}

async function main(): Promise<void> {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing; run \`npm run build\` (npm run bench does)`);
  const load = loadavg()[0]!;
  process.stderr.write(
    `batch bench: ${TASKS.length} tasks x react x ${groupSize}, levels ${levels.join(', ')}; load ${load.toFixed(1)}${values.embedded ? '; embedded engine' : '; fake engine'}\n`,
  );
  const rows: ReturnType<typeof summarise>[] = [];

  const seqOut = mkdtempSync(join(tmpdir(), 'hl-bench-run-'));
  let seqMs = 0;
  for (const task of TASKS) {
    const r = await harnessLab(['rollout', '--task', task, '--harness', 'react', '-n', String(groupSize), '--out', seqOut]);
    if (r.code !== 0) throw new Error(`harness-lab rollout failed:\n${r.out}`);
    seqMs += r.ms;
  }
  rows.push(summarise('sequential harness-lab rollout', 1, seqMs, rolloutRecords(seqOut)));

  for (const p of levels) {
    const dir = join(mkdtempSync(join(tmpdir(), 'hl-bench-batch-')), 'batch');
    const r = await harnessLab([
      'batch',
      'submit',
      '--tasks',
      ...TASKS,
      '--harness',
      'react',
      '--group-size',
      String(groupSize),
      '--parallel',
      String(p),
      '--out',
      dir,
    ]);
    if (r.code !== 0) throw new Error(`harness-lab batch submit failed:\n${r.out}`);
    rows.push(summarise(`batch --parallel ${p}`, p, r.ms, rolloutRecords(join(dir, 'attempts'))));
  }

  // Pacing: the same batch with the start cap on and off, alternated per level so load drifts hit both.
  for (const p of pacingLevels)
    for (const cap of [4, 0]) {
      const dir = join(mkdtempSync(join(tmpdir(), 'hl-bench-pacing-')), 'batch');
      const size = Math.max(groupSize, Math.ceil(p / TASKS.length));
      const r = await harnessLab([
        'batch',
        'submit',
        '--tasks',
        ...TASKS,
        '--harness',
        'react',
        '--group-size',
        String(size),
        '--parallel',
        String(p),
        '--max-starting',
        String(cap),
        '--out',
        dir,
      ]);
      if (r.code !== 0) throw new Error(`harness-lab batch submit failed:\n${r.out}`);
      rows.push(summarise(`--parallel ${p} start cap ${cap || 'off'}`, p, r.ms, rolloutRecords(join(dir, 'attempts'))));
    }

  const head = `${'path'.padEnd(28)} rollouts  ok  wall s  per min  rollout ms  agent ms  verifier ms  lab overhead ms  fixed ms`;
  const lines = rows.map(
    (r) =>
      `${r.path.padEnd(28)} ${String(r.rollouts).padStart(8)} ${String(r.ok).padStart(3)} ${String(r.wall_s).padStart(7)} ${String(r.rollouts_per_min).padStart(8)} ${String(r.rollout_ms_mean).padStart(11)} ${String(r.agent_ms_mean).padStart(9)} ${String(r.verifier_ms_mean).padStart(12)} ${String(r.lab_overhead_ms_per_rollout).padStart(16)} ${String(r.fixed_ms_per_rollout).padStart(9)}`,
  );
  process.stdout.write(`${head}\n${lines.join('\n')}\n`);
  mkdirSync(join(REPO, 'bench-results'), { recursive: true });
  writeFileSync(
    join(REPO, 'bench-results', 'batch.json'),
    `${JSON.stringify({ at: new Date().toISOString(), host: { load_1m_start: load, load_1m_end: loadavg()[0] }, group_size: groupSize, engine: values.embedded ? 'embedded' : 'fake', rows }, null, 2)}\n`,
  );
  const bad = rows.filter((r) => r.ok !== r.rollouts);
  if (bad.length) {
    process.stderr.write(`batch bench: rollouts the verifier did not score in ${bad.map((r) => r.path).join(', ')}\n`);
    process.exit(1);
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`batch bench: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
