// Soak benchmark (issue 16, part 3): N concurrent sessions for M minutes through the real capture
// proxy process (durable store, fsync on) against a zero-think-time engine. Sessions start, run
// multi-turn conversations (chat completions and Anthropic Messages, streamed and not) and end,
// and each is replaced at once by a new one, so N stay concurrent for the whole run.
//
// Baseline: the same sessions (by seed) straight to the engine and through the pass-through that
// parses (issue 16's floor), in short phases after the soak, each paced at the call rate the proxy
// sustained after its warm-up.
// Paced, because with zero think time a closed loop measures each path at its own saturation: an
// unpaced direct phase drove the engine ~1.5x faster than the proxy did and queued calls in the
// engine (direct p99 16 s at 1,000 sessions, above the proxy's), which made added latency negative.
// At the same call rate the engine sees the same load on every path, and added latency per minute
// = the proxy's percentile in that minute minus the paced direct path's.
//
// Reported: calls, errors by kind (must be zero), the proxy's RSS over time and its least-squares
// slope after the warm-up (the first 20% of the soak), p50/p99 latency and added latency per
// minute, CPU per call, /health latency, the load average. Exits 1 when there were errors or the
// slope exceeds the threshold.
//
//   node --import tsx bench/soak.ts [--minutes 10] [--sessions 1000] [--quick] [--baseline-s 30]
//        [--turns 2,10] [--dialects chat,anthropic] [--max-slope 2] [--heap-snapshots] [--out FILE]
import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { parseDialects, parseTurnRange, type SoakDialect, type SoakLoadResult } from './soak-load.js';
import { cpuMs, rssBytes, setBenchPriority, startNode, stopChild, watchProcess, type Started } from './processes.js';
import { nofileLimit, storedCalls } from './proxy-load.js';
import { fmtMs, formatTable, summarize, totalCount, type LatencySummary } from './stats.js';

const ROOT = join(__dirname, '..');
const MIB = 1024 * 1024;

/** The RSS slope is judged only over a fit window at least this long: a shorter one mostly sees the heap settle. */
export const MIN_JUDGED_FIT_S = 240;
/** Share of the soak counted as warm-up (JIT, heap sizing, the store's open files and encoders filling up). */
export const WARMUP_SHARE = 0.2;
/** Share of each baseline phase left out of its percentiles: the first connections of N sessions at once, and their SYN retransmits. */
export const BASELINE_WARMUP_SHARE = 1 / 3;

export interface SoakOptions {
  minutes: number;
  sessions: number;
  baselineS: number;
  bucketS: number;
  warmupS: number;
  turns: [number, number];
  dialects: SoakDialect[];
  streamShare: number;
  rampMs: number;
  systemBytes: number;
  /** MiB per minute of RSS growth after warm-up above which the run fails (when judged). */
  maxSlopeMibPerMin: number;
  rssIntervalMs: number;
  quick: boolean;
  proxyFromSource: boolean;
  heapSnapshots: boolean;
  nice?: number;
  out: string;
  log: (line: string) => void;
}

interface PhaseReport {
  path: 'direct' | 'passthrough';
  when: 'after';
  /** Calls per second the phase was paced at: the proxy's steady rate. */
  rate_per_s: number;
  calls_ok: number;
  errors: Record<string, number>;
  /** Calls that ended after the phase's warm-up (its first third): what the baseline pools. */
  latency: LatencySummary;
  latency_with_warmup: LatencySummary;
  cpu_ms_per_call: number | null;
  health: { p50: number; p99: number; polls: number } | null;
}

export interface SoakMinute {
  /** 1-based bucket number (a minute in a full run; see config.bucket_s). */
  minute: number;
  t_start_s: number;
  calls: number;
  calls_per_s: number;
  sessions_started: number;
  errors: Record<string, number>;
  p50_ms: number;
  p99_ms: number;
  added_p50_ms: number;
  added_p99_ms: number;
  rss_mib_end: number | null;
  cpu_ms_per_call: number | null;
  load_1m: number | null;
  warmup: boolean;
}

export interface SoakReport {
  bench: 'soak';
  started_at: string;
  host: { cpus: number; node: string; platform: string; load_1m_start: number; load_1m_end: number; load_1m_mean_soak: number | null };
  config: Omit<SoakOptions, 'log' | 'out'> & { bucket_s: number };
  totals: {
    calls: number;
    calls_by_kind: Record<string, number>;
    sessions_started: number;
    sessions_completed: number;
    sessions_verified: number;
    errors: Record<string, number>;
    errors_total: number;
    stored_calls: number;
    disk_mb: number;
    proxy_log_errors: number;
    proxy_log_warnings: number;
  };
  latency: LatencySummary;
  baseline: {
    method: string;
    phases: PhaseReport[];
    direct: LatencySummary;
    passthrough: LatencySummary;
    floor_added_p50_ms: number;
    floor_added_p99_ms: number;
  };
  added: { p50_ms: number; p99_ms: number; after_warmup_p50_ms: number; after_warmup_p99_ms: number };
  minutes: SoakMinute[];
  rss: {
    warmup_s: number;
    fit_from_s: number;
    fit_to_s: number;
    slope_mib_per_min: number;
    fit_r2: number;
    max_slope_mib_per_min: number;
    judged: boolean;
    /** The slope over the session and call rates after the warm-up: what each new session (or call) left behind. */
    growth_bytes_per_session: number;
    growth_bytes_per_call: number;
    /** Sessions the proxy knew (its /health count) at the last sample: every session created, ended or not. */
    sessions_known_end: number | null;
    start_mib: number;
    at_warmup_mib: number;
    end_mib: number;
    peak_mib: number;
    /** [seconds since the soak started, RSS MiB, sessions the proxy knows (from /health) or null] */
    samples: [number, number, number | null][];
  };
  cpu: {
    proxy_ms_per_call: number;
    passthrough_ms_per_call: number | null;
    ratio_to_passthrough: number | null;
    engine_ms_per_call_soak: number;
    client_loop_delay_p99_ms: number;
  };
  health: {
    polls: number;
    errors: Record<string, number>;
    p50_ms: number;
    p99_ms: number;
    max_ms: number;
    passthrough_p99_ms: number | null;
  };
  heap_snapshots: string[];
  pass: boolean;
  failures: string[];
}

const round1 = (v: number) => Math.round(v * 10) / 10;
const round2 = (v: number) => Math.round(v * 100) / 100;

/** Least-squares line through (x, y): slope, intercept and r². */
export function leastSquares(points: readonly (readonly [number, number])[]): { slope: number; intercept: number; r2: number } {
  const n = points.length;
  if (n < 2) return { slope: Number.NaN, intercept: Number.NaN, r2: Number.NaN };
  let sx = 0;
  let sy = 0;
  for (const [x, y] of points) {
    sx += x;
    sy += y;
  }
  const mx = sx / n;
  const my = sy / n;
  let sxx = 0;
  let sxy = 0;
  let syy = 0;
  for (const [x, y] of points) {
    sxx += (x - mx) ** 2;
    sxy += (x - mx) * (y - my);
    syy += (y - my) ** 2;
  }
  const slope = sxx === 0 ? Number.NaN : sxy / sxx;
  return { slope, intercept: my - slope * mx, r2: syy === 0 ? 1 : (sxy * sxy) / (sxx * syy) };
}

function dirMb(dir: string): number {
  const sessions = join(dir, 'sessions');
  let bytes = 0;
  try {
    for (const name of readdirSync(sessions)) bytes += statSync(join(sessions, name)).size;
  } catch {
    return 0;
  }
  return round1(bytes / 1e6);
}

const tsx = (script: string, args: string[]) => ['--import', 'tsx', join(ROOT, 'bench', script), ...args];

async function runClient(args: string[], timeoutMs: number): Promise<{ result: SoakLoadResult; client: Started }> {
  const client = await startNode('soak client', tsx('soak-load.ts', args), (l) => l.startsWith('{'), { timeoutMs });
  await new Promise<void>((resolve) => (client.child.exitCode !== null ? resolve() : client.child.once('exit', () => resolve())));
  return { result: JSON.parse(client.line) as SoakLoadResult, client };
}

export async function runSoak(o: SoakOptions): Promise<SoakReport> {
  const limit = nofileLimit();
  if (limit !== null && limit < o.sessions * 2 + 256)
    throw new Error(
      `ulimit -n is ${limit}; ${o.sessions} sessions need at least ${o.sessions * 2 + 256} open files per process. Raise it (ulimit -n 20000) and run again.`,
    );
  const cliPath = join(ROOT, 'dist', 'cli.js');
  const entry = o.proxyFromSource ? ['--import', 'tsx', join(ROOT, 'src', 'cli', 'main.ts')] : [cliPath];
  if (!o.proxyFromSource && !statSync(cliPath, { throwIfNoEntry: false }))
    throw new Error(`${cliPath} is missing; run npm run build (or pass --proxy-from-source)`);
  if (o.nice !== undefined) setBenchPriority(o.nice);

  const started_at = new Date().toISOString();
  const loadStart = loadavg()[0]!;
  const durationMs = Math.round(o.minutes * 60_000);
  const bucketMs = Math.round(o.bucketS * 1000);
  const children: Started[] = [];
  const onSignal = () => {
    for (const c of children) c.child.kill('SIGKILL');
    process.exit(130);
  };
  process.once('SIGINT', onSignal);
  const dataDir = mkdtempSync(join(tmpdir(), 'hl-bench-soak-'));
  try {
    const engine = await startNode('fake engine', tsx('fake-engine-process.ts', ['--think-ms', '0']), (l) => l.startsWith('{'));
    children.push(engine);
    const { url: engineUrl, model } = JSON.parse(engine.line) as { url: string; model: string };
    // Issue 16's floor: the pass-through that parses the request and the answer (see passthrough.ts).
    const passthrough = await startNode('pass-through', tsx('passthrough.ts', ['--engine-url', engineUrl, '--parse']), (l) =>
      l.startsWith('{'),
    );
    children.push(passthrough);
    const passthroughUrl = (JSON.parse(passthrough.line) as { url: string }).url;
    o.log(
      `soak: ${o.sessions} sessions for ${o.minutes} min through the proxy, ${o.turns.join('-')} turns per session, dialects ${o.dialects.join(', ')}, engine think 0 ms; baseline phases of ${o.baselineS} s after, paced at the proxy's steady call rate`,
    );

    const common = [
      '--sessions',
      String(o.sessions),
      '--turns',
      o.turns.join(','),
      '--model',
      model,
      '--ramp-ms',
      String(o.rampMs),
      '--system-bytes',
      String(o.systemBytes),
      '--seed',
      '1',
    ];
    const phases: (PhaseReport & { samples: number[] })[] = [];
    const baselinePhase = async (path: 'direct' | 'passthrough', rate: number) => {
      o.log(`soak: ${path} baseline (after, paced at ${round1(rate)} calls/s) ...`);
      const url = path === 'direct' ? engineUrl : passthroughUrl;
      const watch = path === 'passthrough' ? watchProcess(passthrough.pid, 1000) : undefined;
      const phaseMs = Math.round(o.baselineS * 1000);
      const { result } = await runClient(
        [
          '--mode',
          path,
          '--url',
          url,
          ...common,
          '--duration-ms',
          String(phaseMs),
          '--bucket-ms',
          String(phaseMs),
          '--dialects',
          'chat',
          '--keep-samples',
          '--warmup-ms',
          String(Math.round(phaseMs * BASELINE_WARMUP_SHARE)),
          '--rate',
          String(rate),
          ...(path === 'passthrough' ? ['--health-url', `${url}/health`] : []),
        ],
        phaseMs + 10 * 60_000,
      );
      const cpu = watch?.stop().cpuMs;
      phases.push({
        path,
        when: 'after',
        rate_per_s: round1(rate),
        calls_ok: result.calls_ok,
        errors: result.errors,
        latency: result.after_warmup,
        latency_with_warmup: result.latency,
        cpu_ms_per_call: cpu === undefined || !result.calls_ok ? null : round2(cpu / result.calls_ok),
        health: result.health ? { p50: result.health.latency.p50, p99: result.health.latency.p99, polls: result.health.polls } : null,
        samples: result.samples_ms ?? [],
      });
    };

    // ---- the soak ----
    const heapDir = join(ROOT, 'bench-results', 'heap');
    if (o.heapSnapshots) mkdirSync(heapDir, { recursive: true });
    const proxyNodeArgs = o.heapSnapshots ? ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${heapDir}`] : [];
    const proxy = await startNode(
      'proxy',
      [...proxyNodeArgs, ...entry, 'proxy', '--engine-url', engineUrl, '--model', model, '--data-dir', dataDir],
      (l) => l.startsWith('proxy listening on '),
      { timeoutMs: 60_000 },
    );
    children.push(proxy);
    const proxyUrl = proxy.line.slice('proxy listening on '.length).trim();
    o.log(`soak: proxy ${proxyUrl} (pid ${proxy.pid}, data dir ${dataDir}) ...`);

    const samples: { at: number; rss: number; cpu: number; load: number; known: number | null }[] = [];
    let healthTick = 0;
    const sample = async () => {
      const rss = rssBytes(proxy.pid);
      const cpu = cpuMs(proxy.pid);
      if (rss === undefined || cpu === undefined) return;
      let known: number | null = null;
      if (healthTick++ % 10 === 0) {
        try {
          known =
            ((await (await fetch(`${proxyUrl}/health`, { signal: AbortSignal.timeout(5_000) })).json()) as { sessions?: number })
              .sessions ?? null;
        } catch {
          known = null; // the client's poller counts /health failures
        }
      }
      samples.push({ at: Date.now(), rss, cpu, load: loadavg()[0]!, known });
    };
    await sample();
    const sampler = setInterval(() => void sample(), o.rssIntervalMs);
    const engineCpuStart = cpuMs(engine.pid) ?? 0;
    const snapshots: string[] = [];
    const snapshotTimers: NodeJS.Timeout[] = [];
    if (o.heapSnapshots) {
      // One at the end of the warm-up, one just before the end: what grew between them is what the slope measures.
      for (const atMs of [o.warmupS * 1000, Math.max(o.warmupS * 1000 + 1000, durationMs - 5_000)]) {
        snapshotTimers.push(
          setTimeout(() => {
            process.kill(proxy.pid, 'SIGUSR2');
            snapshots.push(`at ${Math.round(atMs / 1000)} s`);
          }, atMs + 2_000),
        );
      }
    }
    let soak: SoakLoadResult;
    try {
      soak = (
        await runClient(
          [
            '--mode',
            'proxy',
            '--url',
            proxyUrl,
            ...common,
            '--duration-ms',
            String(durationMs),
            '--bucket-ms',
            String(bucketMs),
            '--dialects',
            o.dialects.join(','),
            '--stream-share',
            String(o.streamShare),
            '--warmup-ms',
            String(Math.round(o.warmupS * 1000)),
            '--health-url',
            `${proxyUrl}/health`,
          ],
          durationMs + 10 * 60_000,
        )
      ).result;
    } finally {
      clearInterval(sampler);
      for (const t of snapshotTimers) clearTimeout(t);
    }
    await sample();
    const engineCpu = (cpuMs(engine.pid) ?? engineCpuStart) - engineCpuStart;
    const proxyStderr = proxy.stderr();
    await stopChild(proxy.child);
    children.splice(children.indexOf(proxy), 1);
    const stored = storedCalls(dataDir);
    const diskMb = dirMb(dataDir);
    // The data dir goes in the finally block, after the baselines: removing a few GB of session
    // files keeps the disk busy for minutes, which the after-phases would pay for.
    if (o.heapSnapshots)
      for (const name of readdirSync(heapDir).filter((n) => n.endsWith('.heapsnapshot'))) snapshots.push(join(heapDir, name));

    // The rate the proxy sustained once warm: what the baselines are paced at.
    const steadyRate = soak.after_warmup.count / Math.max(1, (durationMs - o.warmupS * 1000) / 1000);
    await baselinePhase('passthrough', steadyRate);
    await baselinePhase('direct', steadyRate);

    // ---- evaluate ----
    const pooled = (path: 'direct' | 'passthrough') => summarize(phases.filter((p) => p.path === path).flatMap((p) => p.samples));
    const direct = pooled('direct');
    const pt = pooled('passthrough');
    const soakStart = soak.started_at_ms;
    const rel = samples.map((s) => ({ ...s, t: (s.at - soakStart) / 1000 }));
    const inSoak = rel.filter((s) => s.t >= 0 && s.t <= durationMs / 1000 + 1);
    const fitFrom = o.warmupS;
    const fitTo = durationMs / 1000;
    const fitPoints = inSoak.filter((s) => s.t >= fitFrom).map((s) => [s.t / 60, s.rss / MIB] as [number, number]);
    const fit = leastSquares(fitPoints);
    const judged = fitTo - fitFrom >= MIN_JUDGED_FIT_S;
    const nearest = (t: number) =>
      inSoak.reduce<(typeof inSoak)[number] | undefined>(
        (best, s) => (!best || Math.abs(s.t - t) < Math.abs(best.t - t) ? s : best),
        undefined,
      );

    const minutes: SoakMinute[] = soak.buckets.map((b, i) => {
      const from = nearest(b.t_start_s);
      const to = nearest(i === soak.buckets.length - 1 ? fitTo : b.t_start_s + bucketMs / 1000);
      const loads = inSoak.filter((s) => s.t >= b.t_start_s && s.t < b.t_start_s + bucketMs / 1000).map((s) => s.load);
      const last = i === soak.buckets.length - 1;
      const seconds = (last ? durationMs - i * bucketMs : bucketMs) / 1000;
      return {
        minute: i + 1,
        t_start_s: b.t_start_s,
        calls: b.calls_ok,
        calls_per_s: round1(b.calls_ok / seconds),
        sessions_started: b.sessions_started,
        errors: b.errors,
        p50_ms: b.latency.p50,
        p99_ms: b.latency.p99,
        added_p50_ms: round1(b.latency.p50 - direct.p50),
        added_p99_ms: round1(b.latency.p99 - direct.p99),
        rss_mib_end: to ? round1(to.rss / MIB) : null,
        cpu_ms_per_call: from && to && b.calls_ok ? round2((to.cpu - from.cpu) / b.calls_ok) : null,
        load_1m: loads.length ? round2(loads.reduce((a, c) => a + c, 0) / loads.length) : null,
        warmup: b.t_start_s < o.warmupS,
      };
    });

    const proxyCpu = (samples.at(-1)?.cpu ?? 0) - (nearest(0)?.cpu ?? samples[0]?.cpu ?? 0);
    const ptPhases = phases.filter((p) => p.path === 'passthrough' && p.cpu_ms_per_call !== null);
    const ptCpu = ptPhases.length ? round2(ptPhases.reduce((a, p) => a + p.cpu_ms_per_call!, 0) / ptPhases.length) : null;
    const proxyCpuPerCall = soak.calls_ok ? round2(proxyCpu / soak.calls_ok) : Number.NaN;
    const errorLines = proxyStderr.split('\n').filter((l) => l.startsWith('[error]'));
    const warnLines = proxyStderr.split('\n').filter((l) => l.startsWith('[warn]'));

    const failures: string[] = [];
    const soakErrors = totalCount(soak.errors);
    if (soakErrors > 0) failures.push(`proxy soak: ${soakErrors} error(s) ${JSON.stringify(soak.errors)}`);
    for (const p of phases)
      if (totalCount(p.errors) > 0)
        failures.push(`${p.path} baseline (${p.when}): ${totalCount(p.errors)} error(s) ${JSON.stringify(p.errors)}`);
    if (soak.health && totalCount(soak.health.errors) > 0)
      failures.push(`/health: ${totalCount(soak.health.errors)} failed poll(s) ${JSON.stringify(soak.health.errors)}`);
    if (errorLines.length) failures.push(`the proxy logged ${errorLines.length} error line(s), e.g. ${errorLines[0]!.slice(0, 300)}`);
    if (soakErrors === 0 && stored !== soak.calls_ok) failures.push(`the store holds ${stored} calls, ${soak.calls_ok} were answered`);
    if (soak.calls_ok === 0) failures.push('no call was answered');
    if (judged && !(fit.slope <= o.maxSlopeMibPerMin))
      failures.push(`RSS grew ${round2(fit.slope)} MiB/min after the warm-up (threshold ${o.maxSlopeMibPerMin} MiB/min)`);
    if (judged && fitPoints.length < 10) failures.push(`only ${fitPoints.length} RSS samples after the warm-up`);

    const rssMib = inSoak.map((s) => s.rss / MIB);
    const steadyBuckets = soak.buckets.filter((b) => b.t_start_s >= fitFrom);
    const steadyMinutes = (steadyBuckets.length * bucketMs) / 60_000;
    const perMinute = (n: number) => (steadyMinutes > 0 ? n / steadyMinutes : Number.NaN);
    const sessionsPerMin = perMinute(steadyBuckets.reduce((n, b) => n + b.sessions_started, 0));
    const callsPerMin = perMinute(steadyBuckets.reduce((n, b) => n + b.calls_ok, 0));
    const atWarmup = nearest(fitFrom);
    const report: SoakReport = {
      bench: 'soak',
      started_at,
      host: {
        cpus: cpus().length,
        node: process.version,
        platform: `${process.platform}-${process.arch}`,
        load_1m_start: round2(loadStart),
        load_1m_end: round2(loadavg()[0]!),
        load_1m_mean_soak: inSoak.length ? round2(inSoak.reduce((a, s) => a + s.load, 0) / inSoak.length) : null,
      },
      config: {
        minutes: o.minutes,
        sessions: o.sessions,
        baselineS: o.baselineS,
        bucketS: o.bucketS,
        bucket_s: o.bucketS,
        warmupS: o.warmupS,
        turns: o.turns,
        dialects: o.dialects,
        streamShare: o.streamShare,
        rampMs: o.rampMs,
        systemBytes: o.systemBytes,
        maxSlopeMibPerMin: o.maxSlopeMibPerMin,
        rssIntervalMs: o.rssIntervalMs,
        quick: o.quick,
        proxyFromSource: o.proxyFromSource,
        heapSnapshots: o.heapSnapshots,
        ...(o.nice !== undefined ? { nice: o.nice } : {}),
      },
      totals: {
        calls: soak.calls_ok,
        calls_by_kind: soak.calls_by_kind,
        sessions_started: soak.sessions_started,
        sessions_completed: soak.sessions_completed,
        sessions_verified: soak.sessions_verified,
        errors: soak.errors,
        errors_total: soakErrors,
        stored_calls: stored,
        disk_mb: diskMb,
        proxy_log_errors: errorLines.length,
        proxy_log_warnings: warnLines.length,
      },
      latency: soak.latency,
      baseline: {
        method: `direct (client -> engine) and pass-through (client -> node:http forwarder that parses the request and the answer -> engine) phases of ${o.baselineS} s each, run with the same sessions (same seed) after the soak against the same engine process, each paced at the call rate the proxy sustained after its warm-up (so the engine sees the same load on every path; unpaced, a zero-think closed loop measures each path at its own saturation); each phase's first third is its warm-up (connection setup of ${o.sessions} sessions at once) and left out. added = proxy percentile in a bucket minus the paced direct percentile.`,
        phases: phases.map(({ samples: _samples, ...p }) => p),
        direct,
        passthrough: pt,
        floor_added_p50_ms: round1(pt.p50 - direct.p50),
        floor_added_p99_ms: round1(pt.p99 - direct.p99),
      },
      added: {
        p50_ms: round1(soak.latency.p50 - direct.p50),
        p99_ms: round1(soak.latency.p99 - direct.p99),
        after_warmup_p50_ms: round1(soak.after_warmup.p50 - direct.p50),
        after_warmup_p99_ms: round1(soak.after_warmup.p99 - direct.p99),
      },
      minutes,
      rss: {
        warmup_s: o.warmupS,
        fit_from_s: fitFrom,
        fit_to_s: fitTo,
        slope_mib_per_min: round2(fit.slope),
        fit_r2: round2(fit.r2),
        max_slope_mib_per_min: o.maxSlopeMibPerMin,
        judged,
        growth_bytes_per_session: Math.round((fit.slope * MIB) / sessionsPerMin),
        growth_bytes_per_call: Math.round((fit.slope * MIB) / callsPerMin),
        sessions_known_end: [...inSoak].reverse().find((s) => s.known !== null)?.known ?? null,
        start_mib: round1(rssMib[0] ?? Number.NaN),
        at_warmup_mib: atWarmup ? round1(atWarmup.rss / MIB) : Number.NaN,
        end_mib: round1(rssMib.at(-1) ?? Number.NaN),
        peak_mib: round1(Math.max(...rssMib)),
        samples: inSoak.map((s) => [round1(s.t), round1(s.rss / MIB), s.known]),
      },
      cpu: {
        proxy_ms_per_call: proxyCpuPerCall,
        passthrough_ms_per_call: ptCpu,
        ratio_to_passthrough: ptCpu ? round2(proxyCpuPerCall / ptCpu) : null,
        engine_ms_per_call_soak: soak.calls_ok ? round2(engineCpu / soak.calls_ok) : Number.NaN,
        client_loop_delay_p99_ms: soak.client_loop_delay_p99_ms,
      },
      health: {
        polls: soak.health?.polls ?? 0,
        errors: soak.health?.errors ?? {},
        p50_ms: soak.health?.latency.p50 ?? Number.NaN,
        p99_ms: soak.health?.latency.p99 ?? Number.NaN,
        max_ms: soak.health?.latency.max ?? Number.NaN,
        passthrough_p99_ms: phases.find((p) => p.health)?.health?.p99 ?? null,
      },
      heap_snapshots: snapshots,
      pass: failures.length === 0,
      failures,
    };
    mkdirSync(dirname(o.out), { recursive: true });
    writeFileSync(o.out, `${JSON.stringify(report, null, 2)}\n`);
    return report;
  } finally {
    process.off('SIGINT', onSignal);
    for (const c of children.reverse()) await stopChild(c.child);
    rmSync(dataDir, { recursive: true, force: true });
  }
}

export function formatSoakReport(r: SoakReport): string {
  const unit = r.config.bucket_s === 60 ? 'minute' : `bucket (${r.config.bucket_s} s)`;
  const rows = [
    [unit, 'calls', 'calls/s', 'sessions', 'errors', 'p50', 'p99', 'added p50', 'added p99', 'RSS MiB', 'CPU ms/call', 'load 1m'],
    ...r.minutes.map((m) => [
      `${m.minute}${m.warmup ? ' (warm-up)' : ''}`,
      String(m.calls),
      m.calls_per_s.toFixed(1),
      String(m.sessions_started),
      String(totalCount(m.errors)),
      fmtMs(m.p50_ms),
      fmtMs(m.p99_ms),
      fmtMs(m.added_p50_ms),
      fmtMs(m.added_p99_ms),
      m.rss_mib_end === null ? '-' : m.rss_mib_end.toFixed(0),
      m.cpu_ms_per_call === null ? '-' : m.cpu_ms_per_call.toFixed(2),
      m.load_1m === null ? '-' : m.load_1m.toFixed(1),
    ]),
  ];
  const t = r.totals;
  const b = r.baseline;
  const lines = [
    formatTable(rows),
    "(latencies in ms; added = the proxy minus the direct path paced at its steady call rate; RSS at the bucket's end)",
    `calls ${t.calls} (${Object.entries(t.calls_by_kind)
      .map(([k, n]) => `${k} ${n}`)
      .join(
        ', ',
      )}); sessions started ${t.sessions_started}, completed ${t.sessions_completed}, verified against GET /sessions/<id> ${t.sessions_verified}; stored calls ${t.stored_calls} (${t.disk_mb} MB on disk)`,
    `errors ${t.errors_total}${t.errors_total ? ` ${JSON.stringify(t.errors)}` : ''}; proxy log: ${t.proxy_log_errors} error line(s), ${t.proxy_log_warnings} warning line(s)`,
    `baseline: direct p50/p99 ${fmtMs(b.direct.p50)}/${fmtMs(b.direct.p99)} ms, pass-through ${fmtMs(b.passthrough.p50)}/${fmtMs(b.passthrough.p99)} ms (floor added ${fmtMs(b.floor_added_p50_ms)}/${fmtMs(b.floor_added_p99_ms)} ms); proxy over the soak ${fmtMs(r.latency.p50)}/${fmtMs(r.latency.p99)} ms, added ${fmtMs(r.added.p50_ms)}/${fmtMs(r.added.p99_ms)} ms`,
    `RSS: start ${r.rss.start_mib} MiB, ${r.rss.at_warmup_mib} MiB after the warm-up (${r.rss.warmup_s} s), end ${r.rss.end_mib} MiB, peak ${r.rss.peak_mib} MiB; slope after warm-up ${r.rss.slope_mib_per_min} MiB/min (least squares over ${r.rss.samples.filter((s) => s[0] >= r.rss.fit_from_s).length} samples, r² ${r.rss.fit_r2}; threshold ${r.rss.max_slope_mib_per_min} MiB/min, ${r.rss.judged ? 'judged' : `not judged: the fit window is under ${MIN_JUDGED_FIT_S} s`}); that is ${r.rss.growth_bytes_per_session} bytes per new session, ${r.rss.growth_bytes_per_call} per call; the proxy knew ${r.rss.sessions_known_end ?? '-'} sessions at the end`,
    `CPU per call: proxy ${r.cpu.proxy_ms_per_call} ms, pass-through ${r.cpu.passthrough_ms_per_call ?? '-'} ms (ratio ${r.cpu.ratio_to_passthrough ?? '-'}), engine ${r.cpu.engine_ms_per_call_soak} ms; client loop delay p99 ${r.cpu.client_loop_delay_p99_ms} ms`,
    `/health (proxy, fresh connection every 50 ms): ${r.health.polls} polls, p50 ${fmtMs(r.health.p50_ms)} ms, p99 ${fmtMs(r.health.p99_ms)} ms, max ${fmtMs(r.health.max_ms)} ms; pass-through p99 ${fmtMs(r.health.passthrough_p99_ms)} ms`,
    `load average: ${r.host.load_1m_start} before, ${r.host.load_1m_mean_soak ?? '-'} mean during the soak, ${r.host.load_1m_end} after (${r.host.cpus} cores)`,
    r.pass
      ? `PASS: zero errors, every answered call stored, ${r.rss.judged ? 'RSS slope within the threshold' : 'RSS slope not judged (short run)'}`
      : `FAIL:\n  ${r.failures.join('\n  ')}`,
  ];
  if (r.host.load_1m_start > r.host.cpus)
    lines.push(
      `warning: load average ${r.host.load_1m_start.toFixed(1)} on ${r.host.cpus} cores before the run: other jobs competed for the CPU, so latencies are inflated`,
    );
  return lines.join('\n');
}

function positiveNumber(text: string, name: string, allowZero = false): number {
  const n = Number(text);
  if (!Number.isFinite(n) || n < 0 || (!allowZero && n === 0))
    throw new Error(`--${name} must be a ${allowZero ? 'non-negative' : 'positive'} number, got '${text}'`);
  return n;
}

export function parseSoakArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): SoakOptions {
  const { values } = parseArgs({
    args: argv,
    options: {
      minutes: { type: 'string' },
      sessions: { type: 'string' },
      quick: { type: 'boolean', default: false },
      'baseline-s': { type: 'string' },
      'bucket-s': { type: 'string' },
      'warmup-s': { type: 'string' },
      turns: { type: 'string', default: '2,10' },
      dialects: { type: 'string', default: 'chat,anthropic' },
      'stream-share': { type: 'string', default: '0.5' },
      'ramp-ms': { type: 'string' },
      'system-bytes': { type: 'string', default: '2000' },
      'max-slope': { type: 'string', default: '2' },
      'rss-interval-ms': { type: 'string', default: '1000' },
      'proxy-from-source': { type: 'boolean', default: false },
      'heap-snapshots': { type: 'boolean', default: false },
      nice: { type: 'string' },
      out: { type: 'string' },
    },
  });
  const quick = values.quick || env.BENCH_QUICK === '1';
  const minutes = positiveNumber(values.minutes ?? (quick ? '1' : '10'), 'minutes');
  const sessions = positiveNumber(values.sessions ?? (quick ? '100' : '1000'), 'sessions');
  if (!Number.isInteger(sessions)) throw new Error(`--sessions must be a whole number, got '${values.sessions}'`);
  // Minute buckets; a run shorter than 6 minutes gets six buckets instead, so it still shows a trend.
  const bucketS = positiveNumber(values['bucket-s'] ?? String(minutes >= 6 ? 60 : Math.max(1, Math.round((minutes * 60) / 6))), 'bucket-s');
  const streamShare = positiveNumber(values['stream-share'], 'stream-share', true);
  if (streamShare > 1) throw new Error(`--stream-share must be between 0 and 1, got '${values['stream-share']}'`);
  let nice: number | undefined;
  if (values.nice !== undefined) {
    nice = Number(values.nice);
    if (!Number.isInteger(nice) || nice < -20 || nice > 19)
      throw new Error(`--nice must be an integer from -20 to 19, got '${values.nice}'`);
  }
  return {
    minutes,
    sessions,
    baselineS: positiveNumber(values['baseline-s'] ?? (quick ? '10' : '30'), 'baseline-s'),
    bucketS,
    warmupS: positiveNumber(values['warmup-s'] ?? String(Math.round(minutes * 60 * WARMUP_SHARE)), 'warmup-s', true),
    turns: parseTurnRange(values.turns),
    dialects: parseDialects(values.dialects),
    streamShare,
    rampMs: positiveNumber(values['ramp-ms'] ?? (quick ? '1000' : '5000'), 'ramp-ms', true),
    systemBytes: positiveNumber(values['system-bytes'], 'system-bytes', true),
    maxSlopeMibPerMin: positiveNumber(values['max-slope'], 'max-slope'),
    rssIntervalMs: positiveNumber(values['rss-interval-ms'], 'rss-interval-ms'),
    quick,
    proxyFromSource: values['proxy-from-source'],
    heapSnapshots: values['heap-snapshots'],
    ...(nice !== undefined ? { nice } : {}),
    out: values.out ?? join(ROOT, 'bench-results', 'soak.json'),
    log: (line) => process.stderr.write(`${line}\n`),
  };
}

if (process.argv[1]?.endsWith('soak.ts')) {
  (async () => {
    const options = parseSoakArgs(process.argv.slice(2));
    const report = await runSoak(options);
    process.stderr.write(
      `\nsoak (${report.config.sessions} sessions, ${report.config.minutes} min, ${report.host.cpus} cores)\n${formatSoakReport(report)}\nJSON: ${options.out}\n`,
    );
    process.exitCode = report.pass ? 0 : 1;
  })().catch((err: unknown) => {
    process.stderr.write(`soak: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 2;
  });
}
