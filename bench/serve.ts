// bench/serve.ts: `harness-lab serve` under a trainer's fan-out, on local Docker.
//   node --import tsx bench/serve.ts [--quick] [--requests N] [--parallel P] [--fake-engine]
// N rollout requests at once (default 64; --quick 8), each its own OpenEnv session on /ws calling
// run_rollout on examples/tasks (hello-file and fix-script, the reference harness), with the server's
// session cap at N and P sandboxes at once (default 3). Meanwhile /health is polled every 50 ms.
// Reported: rollouts per minute, /health latency p50/p99/max during the run, and the server's own
// overhead per rollout (the client's round trip minus the time the rollout waited for a sandbox
// slot minus the sandbox run itself, i.e. protocol, session, capture bookkeeping, state and result
// building), next to the sandbox-level overhead of the same N rollouts run by `harness-lab batch`
// at the same --parallel. The policies answer through the embedded CPU engine (the tiny Qwen3 with
// the task's scripted policy), or the in-repo vLLM-shaped engine with --fake-engine. Measures only (no targets): a shared
// machine's load dominates absolute numbers. Writes bench-results/serve.json.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import WebSocket from 'ws';
import { summarize } from './stats.js';

const REPO = join(__dirname, '..');
const CLI = join(REPO, 'dist', 'cli.js');
const TASKS_DIR = join(REPO, 'examples', 'tasks');

const { values } = parseArgs({
  options: { quick: { type: 'boolean' }, requests: { type: 'string' }, parallel: { type: 'string' }, 'fake-engine': { type: 'boolean' } },
});
const embedded = !values['fake-engine'];
const quick = values.quick || process.env.BENCH_QUICK === '1';
const requests = Number(values.requests ?? (quick ? 8 : 64));
const parallel = Number(values.parallel ?? 3);
const env = { ...process.env, ...(embedded ? {} : { HARNESS_LAB_POLICY_ENGINE: 'fake' }) };

interface Served {
  ok: boolean;
  reward: number | null;
  trial_name: string;
  phase_timings: { queue_s: number; agent_s: number; verifier_s: number };
}

function rolloutOverheadMs(file: string): { ms: number; sandboxOverheadMs: number } {
  const r = JSON.parse(readFileSync(file, 'utf8')) as { ms: number; agent: { ms: number }; verifier: { ms: number } | null };
  return { ms: r.ms, sandboxOverheadMs: r.ms - r.agent.ms - (r.verifier?.ms ?? 0) };
}

function findFiles(dir: string, name: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory() && e.name !== 'capture' && e.name !== 'agent') walk(p);
      else if (e.name === name) out.push(p);
    }
  };
  if (existsSync(dir)) walk(dir);
  return out;
}

function rollout(url: string, taskIndex: number): Promise<{ result: Served; ms: number }> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${url.replace(/^http/, 'ws')}/ws`);
    ws.on('open', () =>
      ws.send(
        JSON.stringify({
          type: 'step',
          data: {
            type: 'call_tool',
            tool_name: 'run_rollout',
            arguments: {
              split: 'ex',
              task_index: taskIndex,
              harness: 'react',
              reward_key: 'reward',
              agent_timeout_sec: 300,
              sampling: { temperature: 1, top_p: 1, top_k: -1, min_p: 0 },
            },
          },
        }),
      ),
    );
    ws.on('message', (d) => {
      const f = JSON.parse(d.toString()) as {
        type: string;
        data: { observation?: { result: { content: { text: string }[] } }; message?: string };
      };
      const ms = performance.now() - t0;
      ws.send(JSON.stringify({ type: 'close' }));
      if (f.type !== 'observation') return reject(new Error(`error frame: ${JSON.stringify(f.data)}`));
      resolve({ result: JSON.parse(f.data.observation!.result.content[0]!.text) as Served, ms });
    });
    ws.on('error', reject);
  });
}

async function main(): Promise<void> {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing; run \`npm run build\` (npm run bench does)`);
  const load = loadavg()[0]!;
  process.stderr.write(
    `serve bench: ${requests} concurrent rollout requests, ${parallel} sandboxes at once; load ${load.toFixed(1)}${embedded ? '; embedded engine' : '; fake engine'}\n`,
  );
  const stateDir = mkdtempSync(join(tmpdir(), 'hl-bench-serve-'));
  const child = spawn(
    process.execPath,
    [
      CLI,
      'serve',
      '--dataset',
      `ex=${TASKS_DIR}`,
      '--port',
      '0',
      '--max-concurrent',
      String(requests),
      '--parallel',
      String(parallel),
      '--state-dir',
      stateDir,
    ],
    { env, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let log = '';
  child.stderr.on('data', (b: Buffer) => (log += b.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (b: Buffer) => {
      out += b.toString();
      const m = /harness-lab serve: (http:\/\/\S+) /.exec(out);
      if (m) resolve(m[1]!);
    });
    child.on('close', (code) => reject(new Error(`serve exited ${code}: ${log}`)));
  });

  const health: number[] = [];
  let polling = true;
  const poller = (async () => {
    while (polling) {
      const t = performance.now();
      await fetch(`${url}/health`).then((r) => r.text());
      health.push(performance.now() - t);
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  const t0 = performance.now();
  let results: { result: Served; ms: number }[];
  try {
    results = await Promise.all(Array.from({ length: requests }, (_, i) => rollout(url, i % 2)));
  } finally {
    polling = false;
    await poller;
    child.kill('SIGTERM');
  }
  const wallMs = performance.now() - t0;
  const runFiles = new Map(findFiles(join(stateDir, 'engines'), 'rollout.json').map((f) => [f.split('/').at(-3)!, f]));
  const serverOverhead: number[] = [];
  const sandboxOverhead: number[] = [];
  for (const r of results) {
    const file = runFiles.get(r.result.trial_name);
    if (!file) continue;
    const o = rolloutOverheadMs(file);
    sandboxOverhead.push(o.sandboxOverheadMs);
    serverOverhead.push(r.ms - r.result.phase_timings.queue_s * 1000 - o.ms);
  }
  const mean = (xs: number[]) => Math.round(xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length));

  // The same work through `harness-lab batch`: N rollouts (two tasks, N/2 each) at the same parallelism.
  const batchDir = join(mkdtempSync(join(tmpdir(), 'hl-bench-serve-batch-')), 'batch');
  const tb = performance.now();
  const batch = await new Promise<number | null>((resolve) => {
    const b = spawn(
      process.execPath,
      [
        CLI,
        'batch',
        'submit',
        '--tasks',
        join(TASKS_DIR, 'hello-file'),
        join(TASKS_DIR, 'fix-script'),
        '--harness',
        'react',
        '--group-size',
        String(Math.max(2, requests / 2)),
        '--parallel',
        String(parallel),
        '--out',
        batchDir,
      ],
      { env, stdio: 'ignore' },
    );
    b.on('close', resolve);
  });
  const batchWallMs = performance.now() - tb;
  const batchOverhead = findFiles(join(batchDir, 'attempts'), 'rollout.json').map((f) => rolloutOverheadMs(f).sandboxOverheadMs);

  const h = summarize(health);
  const row = {
    requests,
    parallel,
    ok: results.filter((r) => r.result.ok && r.result.reward === 1).length,
    wall_s: Math.round(wallMs / 100) / 10,
    rollouts_per_min: Math.round((requests / (wallMs / 60_000)) * 10) / 10,
    health_ms: { n: h.count, p50: Math.round(h.p50 * 10) / 10, p99: Math.round(h.p99 * 10) / 10, max: Math.round(h.max * 10) / 10 },
    server_overhead_ms_per_rollout: mean(serverOverhead),
    sandbox_overhead_ms_per_rollout: mean(sandboxOverhead),
    batch: {
      exit: batch,
      rollouts: batchOverhead.length,
      wall_s: Math.round(batchWallMs / 100) / 10,
      rollouts_per_min: Math.round((batchOverhead.length / (batchWallMs / 60_000)) * 10) / 10,
      sandbox_overhead_ms_per_rollout: mean(batchOverhead),
    },
  };
  process.stdout.write(`${JSON.stringify(row, null, 2)}\n`);
  mkdirSync(join(REPO, 'bench-results'), { recursive: true });
  writeFileSync(
    join(REPO, 'bench-results', 'serve.json'),
    `${JSON.stringify({ at: new Date().toISOString(), host: { load_1m_start: load, load_1m_end: loadavg()[0] }, engine: embedded ? 'embedded' : 'fake', row }, null, 2)}\n`,
  );
  if (row.ok !== requests) {
    process.stderr.write(`serve bench: ${requests - row.ok} rollout(s) without reward 1\n${log.slice(-3000)}\n`);
    process.exit(1);
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`serve bench: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
