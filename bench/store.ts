// `store`: what the capture store costs as a training run's proxy records many sessions, and how
// fast that proxy comes back after a restart. Two runs (issue 16): 500 sessions of 40 turns (20,000
// calls) and 10,000 sessions of 50 calls, short messages, through a real proxy process (durable
// store, fsync) against the fake engine with zero think time, 50 sessions active at a time. The
// second run defaults to 1,000 sessions: 10,000 (`--runs 10000x50`) takes about 1.5 h on a 2-core box.
//
// Reported per run: disk bytes per captured token (prompt + completion tokens of every call) and per
// unique token (each session's last prompt + completion: the floor any lossless store needs), peak
// RSS while recording, and after a restart on that data dir: time from spawn to the first answered
// call and the RSS then, each beside the same restart on an empty data dir.
//
//   node --import tsx bench/store.ts                      both runs
//   node --import tsx bench/store.ts --quick              50x40 and 500x50
//   node --import tsx bench/store.ts --runs 500x40        only the named shapes (SESSIONSxCALLS)
//   node --import tsx bench/store.ts --cli /tmp/main/dist/cli.js --label before   another build's proxy
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { rssBytes, startNode, stopChild, watchProcess, type Started } from './processes.js';

const ROOT = join(__dirname, '..');
const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: process.env.BENCH_QUICK === '1' },
    runs: { type: 'string' },
    concurrency: { type: 'string', default: '50' },
    cli: { type: 'string' },
    label: { type: 'string', default: 'current' },
    /** CPU-profile the recording proxy (bench-results/profiles/store-<label>-*.cpuprofile). */
    profile: { type: 'boolean', default: false },
  },
});
const quick = values.quick!;
const shapes = (values.runs ?? (quick ? '50x40,200x50' : '500x40,1000x50')).split(',').map((s) => {
  const [sessions, calls] = s.split('x').map(Number);
  if (!Number.isInteger(sessions) || !Number.isInteger(calls) || sessions! < 1 || calls! < 1)
    throw new Error(`--runs wants SESSIONSxCALLS, got '${s}'`);
  return { sessions: sessions!, calls: calls! };
});
const concurrency = Number(values.concurrency);
const cliPath = values.cli ?? join(ROOT, 'dist', 'cli.js');
const proxyEntry = existsSync(cliPath) ? [cliPath] : ['--import', 'tsx', join(ROOT, 'src', 'cli', 'main.ts')];
const log = (m: string) => process.stderr.write(`${m}\n`);

interface Answer {
  choices: { message: { content: string | null } }[];
  usage: { prompt_tokens: number; completion_tokens: number };
}

async function post(url: string, body: unknown, key?: string): Promise<unknown> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status !== 200 && res.status !== 201) throw new Error(`${url}: ${res.status} ${text.slice(0, 300)}`);
  return JSON.parse(text);
}

/** One agent-style session of `calls` turns with short messages; returns its captured and unique tokens. */
async function runSession(proxyUrl: string, k: number, calls: number): Promise<{ captured: number; unique: number }> {
  const { session_id: key } = (await post(`${proxyUrl}/sessions`, { metadata: { bench: 'store', k } })) as { session_id: string };
  const messages: { role: string; content: string }[] = [
    { role: 'system', content: 'You are a careful agent. Answer briefly.' },
    { role: 'user', content: `Task ${k}: list the files and report.` },
  ];
  let captured = 0;
  let unique = 0;
  for (let t = 0; t < calls; t++) {
    const answer = (await post(`${proxyUrl}/v1/chat/completions`, { model: 'bench', messages, max_tokens: 16 }, key)) as Answer;
    captured += answer.usage.prompt_tokens + answer.usage.completion_tokens;
    unique = answer.usage.prompt_tokens + answer.usage.completion_tokens;
    messages.push({ role: 'assistant', content: answer.choices[0]?.message.content ?? '' }, { role: 'user', content: `ok ${t}` });
  }
  return { captured, unique };
}

function dirBytes(dir: string): { bytes: number; files: number } {
  const sessions = join(dir, 'sessions');
  if (!existsSync(sessions)) return { bytes: 0, files: 0 };
  let bytes = 0;
  let files = 0;
  for (const name of readdirSync(sessions)) {
    bytes += statSync(join(sessions, name)).size;
    files++;
  }
  return { bytes, files };
}

async function startProxy(
  engineUrl: string,
  model: string,
  dataDir: string,
  profileName?: string,
): Promise<{ proxy: Started; url: string }> {
  const profileDir = join(ROOT, 'bench-results', 'profiles');
  if (profileName) mkdirSync(profileDir, { recursive: true });
  const profile = profileName ? ['--cpu-prof', '--cpu-prof-dir', profileDir, '--cpu-prof-name', `${profileName}.cpuprofile`] : [];
  const proxy = await startNode(
    'proxy',
    [...profile, ...proxyEntry, 'proxy', '--engine-url', engineUrl, '--model', model, '--data-dir', dataDir],
    (l) => l.startsWith('proxy listening on '),
    { timeoutMs: 10 * 60_000 },
  );
  return { proxy, url: proxy.line.slice('proxy listening on '.length).trim() };
}

/** Spawn to first answered call (a new session's first turn) on `dataDir`, and the RSS then. */
async function restart(
  engineUrl: string,
  model: string,
  dataDir: string,
): Promise<{ first_answer_ms: number; listening_ms: number; rss_mib: number; sessions_listed: number }> {
  const t0 = performance.now();
  const { proxy, url } = await startProxy(engineUrl, model, dataDir);
  const listening = performance.now() - t0;
  try {
    await runSession(url, -1, 1);
    const first = performance.now() - t0;
    const rss = rssBytes(proxy.pid) ?? 0;
    const listed = ((await (await fetch(`${url}/sessions`)).json()) as { sessions: unknown[] }).sessions.length;
    return {
      first_answer_ms: Math.round(first),
      listening_ms: Math.round(listening),
      rss_mib: +(rss / 2 ** 20).toFixed(1),
      sessions_listed: listed,
    };
  } finally {
    await stopChild(proxy.child);
  }
}

async function main(): Promise<void> {
  const engine = await startNode(
    'fake engine',
    ['--import', 'tsx', join(ROOT, 'bench', 'fake-engine-process.ts'), '--think-ms', '0'],
    (l) => l.startsWith('{'),
  );
  const { url: engineUrl, model } = JSON.parse(engine.line) as { url: string; model: string };
  const results = [];
  try {
    for (const shape of shapes) {
      const dataDir = mkdtempSync(join(tmpdir(), 'hl-bench-store-'));
      const emptyDir = mkdtempSync(join(tmpdir(), 'hl-bench-store-empty-'));
      try {
        log(`store [${values.label}]: ${shape.sessions} sessions x ${shape.calls} calls, ${concurrency} active`);
        const { proxy, url } = await startProxy(
          engineUrl,
          model,
          dataDir,
          values.profile ? `store-${values.label}-${shape.sessions}x${shape.calls}` : undefined,
        );
        const t0 = performance.now();
        const watch = watchProcess(proxy.pid, 200);
        let next = 0;
        let captured = 0;
        let unique = 0;
        await Promise.all(
          Array.from({ length: Math.min(concurrency, shape.sessions) }, async () => {
            while (next < shape.sessions) {
              const r = await runSession(url, next++, shape.calls);
              captured += r.captured;
              unique += r.unique;
            }
          }),
        );
        const rec = watch.stop();
        const recordMs = performance.now() - t0;
        const rssEnd = rssBytes(proxy.pid) ?? 0;
        await stopChild(proxy.child);
        const disk = dirBytes(dataDir);
        log(`  recorded in ${(recordMs / 1000).toFixed(1)} s; ${(disk.bytes / 1e6).toFixed(1)} MB; restarting`);
        const restarted = await restart(engineUrl, model, dataDir);
        const empty = await restart(engineUrl, model, emptyDir);
        const result = {
          sessions: shape.sessions,
          calls_per_session: shape.calls,
          calls: shape.sessions * shape.calls,
          record_s: +(recordMs / 1000).toFixed(1),
          cpu_ms_per_call: +(rec.cpuMs / (shape.sessions * shape.calls)).toFixed(2),
          captured_tokens: captured,
          unique_tokens: unique,
          disk_mb: +(disk.bytes / 1e6).toFixed(1),
          disk_bytes_per_captured_token: +(disk.bytes / captured).toFixed(2),
          disk_bytes_per_unique_token: +(disk.bytes / unique).toFixed(1),
          rss_recording_peak_mib: +(rec.rssPeakBytes / 2 ** 20).toFixed(1),
          rss_recording_end_mib: +(rssEnd / 2 ** 20).toFixed(1),
          restart: restarted,
          restart_empty: empty,
        };
        log(`  ${JSON.stringify(result)}`);
        if (restarted.sessions_listed !== shape.sessions + 1)
          throw new Error(`the restarted proxy lists ${restarted.sessions_listed} sessions, expected ${shape.sessions + 1}`);
        results.push(result);
      } finally {
        rmSync(dataDir, { recursive: true, force: true });
        rmSync(emptyDir, { recursive: true, force: true });
      }
    }
  } finally {
    await stopChild(engine.child);
  }
  const report = {
    bench: 'store',
    label: values.label,
    at: new Date().toISOString(),
    quick,
    concurrency,
    proxy: proxyEntry.join(' '),
    load_1m: loadavg()[0],
    results,
  };
  mkdirSync(join(ROOT, 'bench-results'), { recursive: true });
  writeFileSync(join(ROOT, 'bench-results', `store-${values.label}.json`), `${JSON.stringify(report, null, 2)}\n`);
  process.stdout.write(`${JSON.stringify(report)}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`bench store: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
