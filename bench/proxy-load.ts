// Proxy load benchmark: for each concurrency level, the same multi-turn load runs against the
// engine directly, through two bare pass-throughs (one that pipes bytes, and issue 16's floor, one
// that parses: parse, forward, answer) and through the capture proxy (durable store, fsync on), all
// against one fake engine process. Reports errors, latency percentiles, the
// proxy's added latency relative to the pass-through's, /health latency under load and proxy memory.
//
//   node --import tsx bench/proxy-load.ts [--levels 64,512,1000] [--turns 3] [--think-ms 500,1500]
//                                         [--rounds 2] [--quick] [--profile] [--perf] [--proxy-from-source]
//                                         [--proxy-node-arg=--trace-gc ...] [--out FILE]
import { execSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { mergeLoadResults, type LoadResult } from './load-generator.js';
import { msPerCallByCategory, perfUnavailable, recordPerf, type PerfBreakdown } from './perf-profile.js';
import { listenOverflows, parseThinkMs, setBenchPriority, startNode, stopChild, watchProcess, type Started } from './processes.js';
import { fmtMs, fmtRatio, formatTable, totalCount, type LatencySummary } from './stats.js';

const ROOT = join(__dirname, '..');

/** A full run's warm-up of each path (and of each fresh proxy process): this many sessions at most, 3 turns. */
export const WARMUP_SESSIONS = 1000;

/**
 * sessions: where the latency ratios are judged (or the top level, if a run stops below it);
 * maxAddedRatio / maxAddedP99Ratio: proxy added p50 / p99 over the pass-through's; maxCpuRatio: the
 * proxy's CPU time per call over the pass-through's (judged at the same level); errors must be zero
 * at every level, up to `errorFreeSessions` in a full run.
 */
export const TARGETS = {
  sessions: 1000,
  maxAddedRatio: 1.5,
  maxAddedP99Ratio: 2,
  maxCpuRatio: 1.5,
  maxHealthP99Ms: 100,
  errorFreeSessions: 2000,
} as const;

export interface ProxyLoadOptions {
  levels: number[];
  turns: number;
  /** Engine think time: "ms" or "min,max". */
  thinkMs: string;
  rampMs: number;
  systemBytes: number;
  /** Share of proxy sessions that ask for SSE streams (0..1). */
  streamShare: number;
  /** Repetitions of each level (paths alternate order per round); their samples are pooled. */
  rounds: number;
  quick: boolean;
  /** Write a V8 CPU profile of each proxy process to bench-results/profiles/. */
  profile: boolean;
  /** Record each measured proxy load with Linux perf (CPU, every thread, kernel included) and report where it went. */
  perf: boolean;
  /** Run the proxy from src/ through tsx instead of dist/cli.js (tests; no build needed). */
  proxyFromSource: boolean;
  /** Nice value for the orchestrator and all its children (negative needs root): a shared machine's other jobs then yield. */
  nice?: number;
  /** Extra node flags for the proxy process (e.g. --trace-gc); its output then goes to bench-results/logs/. */
  proxyNodeArgs: string[];
  out: string;
  log: (line: string) => void;
}

interface ProcessStats {
  rss_start_mb: number;
  rss_peak_mb: number;
  cpu_ms: number;
  /** CPU ms per answered call (all threads, user + system). */
  cpu_ms_per_call: number;
  /** CPU ms per thread name, per round on average: where the time went (main loop, thread pool, io_uring, acceptor). */
  cpu_ms_by_thread: Record<string, { user: number; sys: number }>;
}

export interface AddedLatency {
  /** The byte pipe's added latency (reported, not judged). */
  pipe_p50_ms: number;
  pipe_p99_ms: number;
  passthrough_p50_ms: number;
  proxy_p50_ms: number;
  ratio_p50: number;
  passthrough_p99_ms: number;
  proxy_p99_ms: number;
  ratio_p99: number;
}

export interface LevelReport {
  sessions: number;
  direct: LoadResult;
  /** The byte-piping pass-through: no parsing at all (reported beside the floor, not judged). */
  pipe: LoadResult & { process: ProcessStats };
  /** The floor: the pass-through that parses the request and the answer (passthrough.ts --parse). */
  passthrough: LoadResult & { process: ProcessStats; perf_rounds?: PerfBreakdown[] };
  /** `process` covers the calls; `registration` the sessions' POST /sessions before them. */
  proxy: LoadResult & {
    process: ProcessStats;
    stored_calls: number;
    registration: { cpu_ms: number; cpu_ms_per_session: number };
    perf_rounds?: PerfBreakdown[];
  };
  added: AddedLatency;
  /** The same over calls after each session's first (connections already open). */
  added_later_turns: AddedLatency;
  /** Proxy CPU per call over the pass-through's. */
  cpu_ratio: number;
  /** Proxy CPU per call over the byte pipe's. */
  cpu_ratio_pipe: number;
  /** With --perf: CPU ms per call by perf category, the pass-through's and the proxy's (where the difference goes). */
  perf_ms_per_call?: { passthrough: Record<string, number>; proxy: Record<string, number> };
  health_p50_ms: number;
  health_p99_ms: number;
  proxy_rss_peak_mb: number;
  pass: boolean;
  failures: string[];
}

export interface ProxyLoadReport {
  bench: 'proxy-load';
  started_at: string;
  /** load_1m_*: the 1-minute load average before and after; above the core count, other jobs competed for the CPU. */
  host: { cpus: number; node: string; platform: string; nofile_limit: number | null; load_1m_start: number; load_1m_end: number };
  config: Omit<ProxyLoadOptions, 'log' | 'out'>;
  targets: typeof TARGETS & { latency_evaluated_at: number | null };
  levels: LevelReport[];
  pass: boolean;
  failures: string[];
}

const round2 = (v: number) => Math.round(v * 100) / 100;
const mb = (bytes: number) => Math.round((bytes / 1024 / 1024) * 10) / 10;

export function nofileLimit(): number | null {
  try {
    const text = execSync('ulimit -n', { shell: '/bin/sh', encoding: 'utf8' }).trim();
    return text === 'unlimited' ? Number.POSITIVE_INFINITY : Number(text);
  } catch {
    return null;
  }
}

const tsx = (script: string, args: string[]) => ['--import', 'tsx', join(ROOT, 'bench', script), ...args];

function jsonLine(line: string): boolean {
  return line.startsWith('{');
}

async function runLoadGenerator(args: string[], gate?: () => void): Promise<LoadResult> {
  const overflowsBefore = listenOverflows();
  const gen = await startNode(
    'load generator',
    tsx('load-generator.ts', [...args, ...(gate ? ['--gate'] : [])]),
    gate ? (l) => l.startsWith('{"registered"') : jsonLine,
    { timeoutMs: 15 * 60_000 },
  );
  if (gate) {
    gate();
    gen.child.stdin!.write('go\n');
  }
  await new Promise<void>((resolve) => (gen.child.exitCode !== null ? resolve() : gen.child.once('exit', () => resolve())));
  const result = JSON.parse(gen.lastLine()) as LoadResult;
  const overflowsAfter = listenOverflows();
  if (overflowsBefore !== undefined && overflowsAfter !== undefined) result.listen_overflows = overflowsAfter - overflowsBefore;
  return result;
}

/** Counts the call lines the proxy's durable store holds: every answered call must be on disk. */
export function storedCalls(dataDir: string): number {
  const dir = join(dataDir, 'sessions');
  if (!existsSync(dir)) return 0;
  let calls = 0;
  for (const name of readdirSync(dir)) {
    for (const line of readFileSync(join(dir, name), 'utf8').split('\n')) if (line.startsWith('{"type":"call"')) calls++;
  }
  return calls;
}

export async function runProxyLoad(o: ProxyLoadOptions): Promise<ProxyLoadReport> {
  parseThinkMs(o.thinkMs); // fail before starting anything
  const limit = nofileLimit();
  const top = Math.max(...o.levels);
  // Each side of a connection is a descriptor: the proxy holds one per client plus one per engine socket.
  if (limit !== null && limit < top * 2 + 256)
    throw new Error(
      `ulimit -n is ${limit}; ${top} sessions need at least ${top * 2 + 256} open files per process. Raise it (ulimit -n 20000) and run again.`,
    );
  const cliPath = join(ROOT, 'dist', 'cli.js');
  if (!o.proxyFromSource && !existsSync(cliPath)) throw new Error(`${cliPath} is missing; run npm run build (or pass --proxy-from-source)`);

  if (o.perf) {
    const why = perfUnavailable();
    if (why) throw new Error(`--perf: ${why}`);
  }
  if (o.nice !== undefined) setBenchPriority(o.nice);
  const started_at = new Date().toISOString();
  const loadStart = loadavg()[0]!;
  const children: Started[] = [];
  /** The proxies' data dirs, removed when the bench ends (see proxyRun). */
  const dataDirs: string[] = [];
  const onSignal = () => {
    for (const c of children) c.child.kill('SIGKILL');
    process.exit(130);
  };
  process.once('SIGINT', onSignal);
  try {
    const engine = await startNode('fake engine', tsx('fake-engine-process.ts', ['--think-ms', o.thinkMs]), jsonLine);
    children.push(engine);
    const { url: engineUrl, model } = JSON.parse(engine.line) as { url: string; model: string };
    o.log(`engine ${engineUrl} (think ${o.thinkMs} ms); levels ${o.levels.join(', ')}, ${o.turns} turns per session`);

    const common = [
      '--turns',
      String(o.turns),
      '--model',
      model,
      '--ramp-ms',
      String(o.rampMs),
      '--system-bytes',
      String(o.systemBytes),
      '--stream-share',
      String(o.streamShare),
    ];
    // Every path is warmed up before it is measured, the proxy and the pass-throughs each in a fresh
    // process per run (the engine once, it is the same for every path): a few dozen
    // calls left the proxy's code half optimized (V8 still compiling ~14% of its CPU during the
    // measured load at 1,000 sessions), which is start-up cost, not the cost per call of a proxy
    // that runs for days. A full run warms with the level's sessions (up to WARMUP_SESSIONS) x 3 turns.
    const warmup = (mode: string, url: string, sessions: number) =>
      runLoadGenerator([
        '--mode',
        mode,
        '--url',
        url,
        '--sessions',
        String(o.quick ? Math.min(32, sessions) : Math.min(WARMUP_SESSIONS, sessions)),
        ...common,
        '--turns',
        o.quick ? '1' : '3',
      ]);
    const seed = (n: number) => engine.child.stdin!.write(`seed ${n}\n`);

    await warmup('direct', engineUrl, top);

    const profileDir = join(ROOT, 'bench-results', 'profiles');
    if (o.profile || o.perf) mkdirSync(profileDir, { recursive: true });

    /**
     * One pass-through run: a fresh process, warmed up exactly as each proxy is, then the measured
     * load. A pass-through kept from run to run was warmer at each level than the fresh proxy it
     * was compared with (V8 goes on optimizing functions for thousands of calls: TurboFan was 7% of
     * a proxy's CPU after its 3,000-call warm-up), so the ratio charged the proxy for being younger.
     */
    const hopRun = async (
      path: 'pipe' | 'passthrough',
      sessions: number,
      round: number,
      args: (mode: string, url: string) => string[],
    ): Promise<{ result: LoadResult; stats: WatchStats; perf?: PerfBreakdown }> => {
      // With --perf the floor is recorded like the proxy, so their costs can be put side by side.
      const profiled = o.perf && path === 'passthrough';
      const started = await startNode(
        path,
        [
          ...(profiled ? ['--perf-basic-prof'] : []),
          ...tsx('passthrough.ts', ['--engine-url', engineUrl, ...(path === 'passthrough' ? ['--parse'] : [])]),
        ],
        jsonLine,
      );
      children.push(started);
      const url = (JSON.parse(started.line) as { url: string }).url;
      try {
        await warmup(path, url, sessions);
        seed(sessions * 100 + round);
        const watch = watchProcess(started.pid);
        const recording = profiled ? recordPerf(started.pid, join(profileDir, `${path}-${sessions}-r${round}.perf.data`)) : undefined;
        const result = await runLoadGenerator(args(path, url));
        const stats = watch.stop();
        const perf = await recording?.stop();
        return { result, stats, ...(perf ? { perf } : {}) };
      } finally {
        await stopChild(started.child);
        children.splice(children.indexOf(started), 1);
      }
    };

    const entry = o.proxyFromSource ? ['--import', 'tsx', join(ROOT, 'src', 'cli', 'main.ts')] : [cliPath];

    /** One proxy run: a fresh proxy process and data dir, a warm-up, then the measured load. */
    const proxyRun = async (
      sessions: number,
      round: number,
      args: (mode: string, url: string) => string[],
    ): Promise<{ result: LoadResult; stats: WatchStats; registration: WatchStats; stored: number; perf?: PerfBreakdown }> => {
      const dataDir = mkdtempSync(join(tmpdir(), 'hl-bench-proxy-'));
      const nodeArgs = [
        ...o.proxyNodeArgs,
        ...(o.profile ? ['--cpu-prof', '--cpu-prof-dir', profileDir, '--cpu-prof-name', `proxy-${sessions}-r${round}.cpuprofile`] : []),
        ...(o.perf ? ['--perf-basic-prof'] : []),
      ];
      let logFile: string | undefined;
      if (nodeArgs.length) {
        mkdirSync(join(ROOT, 'bench-results', 'logs'), { recursive: true });
        logFile = join(ROOT, 'bench-results', 'logs', `proxy-${sessions}-r${round}.log`);
      }
      const proxy = await startNode(
        'proxy',
        [...nodeArgs, ...entry, 'proxy', '--engine-url', engineUrl, '--model', model, '--data-dir', dataDir],
        (l) => l.startsWith('proxy listening on '),
        { logFile },
      );
      children.push(proxy);
      const proxyUrl = proxy.line.slice('proxy listening on '.length).trim();
      try {
        await warmup('proxy', proxyUrl, sessions);
        const warmCalls = storedCalls(dataDir);
        seed(sessions * 100 + round);
        // The sessions' registrations (POST /sessions, a durable session line and a new file each)
        // are measured apart from the calls: CPU per captured call is the calls' CPU, as the
        // pass-through's is, and what a session costs to create is reported beside it.
        const registering = watchProcess(proxy.pid);
        let registered: WatchStats | undefined;
        let watch: ReturnType<typeof watchProcess> | undefined;
        let recording: ReturnType<typeof recordPerf> | undefined;
        const result = await runLoadGenerator(args('proxy', proxyUrl), () => {
          registered = registering.stop();
          watch = watchProcess(proxy.pid);
          recording = o.perf ? recordPerf(proxy.pid, join(profileDir, `proxy-${sessions}-r${round}.perf.data`)) : undefined;
        });
        const stats = watch!.stop();
        const perf = await recording?.stop();
        if (totalCount(result.errors) > 0 && proxy.stderr().includes('[error]'))
          o.log(`proxy stderr (tail):\n${proxy.stderr().slice(-2000)}`);
        return { result, stats, registration: registered!, stored: storedCalls(dataDir) - warmCalls, ...(perf ? { perf } : {}) };
      } finally {
        await stopChild(proxy.child);
        children.splice(children.indexOf(proxy), 1);
        // Removed when the bench ends, not now: ext4 skips inodes freed in the last seconds when it
        // picks one for a new file, and right after thousands of removals the next proxy's session
        // files cost it a scan (perf: ext4's recently_deleted at 7% of the proxy's CPU) that a
        // training run's proxy, whose directory only grows, never pays.
        dataDirs.push(dataDir);
      }
    };

    const levels: LevelReport[] = [];
    for (const sessions of o.levels) {
      const loadArgs = (mode: string, url: string) => [
        '--mode',
        mode,
        '--url',
        url,
        '--sessions',
        String(sessions),
        ...common,
        '--health-url',
        `${url}/health`,
      ];
      const runs: Record<'direct' | 'pipe' | 'passthrough' | 'proxy', LoadResult[]> = { direct: [], pipe: [], passthrough: [], proxy: [] };
      const hopStats: Record<'pipe' | 'passthrough', WatchStats[]> = { pipe: [], passthrough: [] };
      const pxStats: WatchStats[] = [];
      const registrations: WatchStats[] = [];
      let stored = 0;
      const perfRounds: PerfBreakdown[] = [];
      const floorPerfRounds: PerfBreakdown[] = [];
      for (let round = 0; round < o.rounds; round++) {
        // Alternate the order (ABC, CBA, ...) so a drift in background load hits every path alike.
        const order =
          round % 2 === 0 ? (['direct', 'pipe', 'passthrough', 'proxy'] as const) : (['proxy', 'passthrough', 'pipe', 'direct'] as const);
        for (const path of order) {
          o.log(`[${sessions}${o.rounds > 1 ? ` round ${round + 1}/${o.rounds}` : ''}] ${path} ...`);
          if (path === 'direct') {
            seed(sessions * 100 + round);
            runs.direct.push(await runLoadGenerator(loadArgs('direct', engineUrl)));
          } else if (path === 'pipe' || path === 'passthrough') {
            const run = await hopRun(path, sessions, round, loadArgs);
            runs[path].push(run.result);
            hopStats[path].push(run.stats);
            if (run.perf) floorPerfRounds.push(run.perf);
          } else {
            const run = await proxyRun(sessions, round, loadArgs);
            runs.proxy.push(run.result);
            pxStats.push(run.stats);
            registrations.push(run.registration);
            stored += run.stored;
            if (run.perf) perfRounds.push(run.perf);
          }
        }
      }
      const level = evaluate(
        sessions,
        mergeLoadResults(runs.direct),
        withProcess(mergeLoadResults(runs.pipe), hopStats.pipe),
        {
          ...withProcess(mergeLoadResults(runs.passthrough), hopStats.passthrough),
          ...(floorPerfRounds.length ? { perf_rounds: floorPerfRounds } : {}),
        },
        {
          ...withProcess(mergeLoadResults(runs.proxy), pxStats),
          stored_calls: stored,
          registration: registrationStats(registrations, sessions),
          ...(perfRounds.length ? { perf_rounds: perfRounds } : {}),
        },
        o.quick ? null : latencyLevel(o.levels),
      );
      levels.push(level);
      o.log(`[${sessions}] ${level.pass ? 'ok' : `FAIL: ${level.failures.join('; ')}`}`);
    }

    const failures = levels.flatMap((l) => l.failures.map((f) => `${l.sessions} sessions: ${f}`));
    const report: ProxyLoadReport = {
      bench: 'proxy-load',
      started_at,
      host: {
        cpus: cpus().length,
        node: process.version,
        platform: `${process.platform}-${process.arch}`,
        nofile_limit: limit,
        load_1m_start: round2(loadStart),
        load_1m_end: round2(loadavg()[0]!),
      },
      config: {
        levels: o.levels,
        turns: o.turns,
        rounds: o.rounds,
        thinkMs: o.thinkMs,
        rampMs: o.rampMs,
        systemBytes: o.systemBytes,
        streamShare: o.streamShare,
        quick: o.quick,
        profile: o.profile,
        perf: o.perf,
        proxyFromSource: o.proxyFromSource,
        proxyNodeArgs: o.proxyNodeArgs,
        nice: o.nice,
      },
      targets: { ...TARGETS, latency_evaluated_at: o.quick ? null : latencyLevel(o.levels) },
      levels,
      pass: failures.length === 0,
      failures,
    };
    mkdirSync(dirname(o.out), { recursive: true });
    writeFileSync(o.out, `${JSON.stringify(report, null, 2)}\n`);
    return report;
  } finally {
    process.off('SIGINT', onSignal);
    for (const c of children.reverse()) await stopChild(c.child);
    for (const dir of dataDirs) rmSync(dir, { recursive: true, force: true });
  }
}

type WatchStats = ReturnType<ReturnType<typeof watchProcess>['stop']>;

/** The level the latency and CPU ratios are judged at: TARGETS.sessions if the run has it, else its top level. */
function latencyLevel(levels: number[]): number {
  return levels.includes(TARGETS.sessions) ? TARGETS.sessions : Math.max(...levels);
}

/** What registering the proxy's sessions cost (POST /sessions, measured before the calls start). */
function registrationStats(rounds: WatchStats[], sessions: number): { cpu_ms: number; cpu_ms_per_session: number } {
  const cpu = rounds.reduce((sum, s) => sum + s.cpuMs, 0);
  return {
    cpu_ms: Math.round(cpu / rounds.length),
    cpu_ms_per_session: Math.round((cpu / Math.max(1, sessions * rounds.length)) * 1000) / 1000,
  };
}

/** Over several rounds: the highest peak, the lowest start, CPU per round on average, CPU per answered call. */
function withProcess<T extends LoadResult>(result: T, rounds: WatchStats[]): T & { process: ProcessStats } {
  const cpuTotal = rounds.reduce((sum, s) => sum + s.cpuMs, 0);
  const byThread: Record<string, { user: number; sys: number }> = {};
  for (const s of rounds) {
    for (const [name, t] of Object.entries(s.threadCpuMs)) {
      const acc = (byThread[name] ??= { user: 0, sys: 0 });
      acc.user += t.user / rounds.length;
      acc.sys += t.sys / rounds.length;
    }
  }
  for (const t of Object.values(byThread)) {
    t.user = Math.round(t.user);
    t.sys = Math.round(t.sys);
  }
  return {
    ...result,
    process: {
      rss_start_mb: mb(Math.min(...rounds.map((s) => s.rssStartBytes))),
      rss_peak_mb: mb(Math.max(...rounds.map((s) => s.rssPeakBytes))),
      cpu_ms: Math.round(cpuTotal / rounds.length),
      cpu_ms_per_call: Math.round((cpuTotal / Math.max(1, result.calls_ok)) * 1000) / 1000,
      cpu_ms_by_thread: byThread,
    },
  };
}

function addedLatency(direct: LatencySummary, pipe: LatencySummary, pt: LatencySummary, px: LatencySummary): AddedLatency {
  const round = (v: number) => Math.round(v * 10) / 10;
  // A floor at or below zero (noise at low load) would make the ratio meaningless; clamp it to 1 ms.
  const ratio = (proxy: number, floor: number) => Math.round((proxy / Math.max(1, floor)) * 100) / 100;
  const a = {
    pipe_p50_ms: round(pipe.p50 - direct.p50),
    pipe_p99_ms: round(pipe.p99 - direct.p99),
    passthrough_p50_ms: round(pt.p50 - direct.p50),
    proxy_p50_ms: round(px.p50 - direct.p50),
    passthrough_p99_ms: round(pt.p99 - direct.p99),
    proxy_p99_ms: round(px.p99 - direct.p99),
  };
  return { ...a, ratio_p50: ratio(a.proxy_p50_ms, a.passthrough_p50_ms), ratio_p99: ratio(a.proxy_p99_ms, a.passthrough_p99_ms) };
}

/**
 * Targets per level: zero errors on every path, every answered proxy call on disk, /health p99 under
 * the limit. The added-latency ratio is judged only at `latencyLevel` (the top level of a full run):
 * at low load both paths add a few ms and their ratio is noise.
 */
function evaluate(
  sessions: number,
  direct: LoadResult,
  pipe: LevelReport['pipe'],
  pt: LevelReport['passthrough'],
  px: LevelReport['proxy'],
  latencyLevel: number | null,
): LevelReport {
  const added = addedLatency(direct.latency, pipe.latency, pt.latency, px.latency);
  const cpuRatioTo = (floor: ProcessStats) => Math.round((px.process.cpu_ms_per_call / Math.max(0.001, floor.cpu_ms_per_call)) * 100) / 100;
  const cpuRatio = cpuRatioTo(pt.process);
  const cpuRatioPipe = cpuRatioTo(pipe.process);
  const addedLater = addedLatency(direct.later_turns, pipe.later_turns, pt.later_turns, px.later_turns);
  const failures: string[] = [];
  for (const [name, r] of [
    ['direct', direct],
    ['pipe', pipe],
    ['pass-through', pt],
    ['proxy', px],
  ] as const) {
    const n = totalCount(r.errors);
    if (n > 0) failures.push(`${name}: ${n} error(s) ${JSON.stringify(r.errors)}`);
    const expected = r.sessions * r.turns * (r.runs ?? 1);
    if (n === 0 && r.calls_ok !== expected) failures.push(`${name}: ${r.calls_ok} of ${expected} calls answered`);
  }
  if (px.stored_calls !== px.calls_ok) failures.push(`proxy store holds ${px.stored_calls} calls, ${px.calls_ok} were answered`);
  const health = px.health;
  if (!health || health.polls === 0) failures.push('no /health samples');
  else {
    const healthErrors = totalCount(health.errors);
    if (healthErrors > 0) failures.push(`/health: ${healthErrors} failed poll(s) ${JSON.stringify(health.errors)}`);
    if (!(health.latency.p99 < TARGETS.maxHealthP99Ms))
      failures.push(`/health p99 ${fmtMs(health.latency.p99)} ms >= ${TARGETS.maxHealthP99Ms} ms`);
  }
  if (latencyLevel !== null && sessions === latencyLevel && !(added.ratio_p50 <= TARGETS.maxAddedRatio)) {
    failures.push(
      `proxy added p50 ${fmtMs(added.proxy_p50_ms)} ms = ${fmtRatio(added.ratio_p50)} the pass-through's ${fmtMs(added.passthrough_p50_ms)} ms (target <= ${TARGETS.maxAddedRatio}x)`,
    );
  }
  if (latencyLevel !== null && sessions === latencyLevel && !(added.ratio_p99 <= TARGETS.maxAddedP99Ratio)) {
    failures.push(
      `proxy added p99 ${fmtMs(added.proxy_p99_ms)} ms = ${fmtRatio(added.ratio_p99)} the pass-through's ${fmtMs(added.passthrough_p99_ms)} ms (target <= ${TARGETS.maxAddedP99Ratio}x)`,
    );
  }
  if (latencyLevel !== null && sessions === latencyLevel && !(cpuRatio <= TARGETS.maxCpuRatio)) {
    failures.push(
      `proxy CPU ${px.process.cpu_ms_per_call} ms per call = ${fmtRatio(cpuRatio)} the pass-through's ${pt.process.cpu_ms_per_call} ms (target <= ${TARGETS.maxCpuRatio}x)`,
    );
  }
  return {
    sessions,
    direct,
    pipe,
    passthrough: pt,
    proxy: px,
    added,
    added_later_turns: addedLater,
    cpu_ratio: cpuRatio,
    cpu_ratio_pipe: cpuRatioPipe,
    ...(pt.perf_rounds?.length && px.perf_rounds?.length
      ? {
          perf_ms_per_call: {
            passthrough: msPerCallByCategory(pt.perf_rounds, pt.process.cpu_ms_per_call),
            proxy: msPerCallByCategory(px.perf_rounds, px.process.cpu_ms_per_call),
          },
        }
      : {}),
    health_p50_ms: health?.latency.p50 ?? Number.NaN,
    health_p99_ms: health?.latency.p99 ?? Number.NaN,
    proxy_rss_peak_mb: px.process.rss_peak_mb,
    pass: failures.length === 0,
    failures,
  };
}

export function formatReport(report: ProxyLoadReport): string {
  const errs = (r: LoadResult) => String(totalCount(r.errors));
  const rows = [
    [
      'sessions',
      'errors d/pi/pt/px',
      'direct p50/p99',
      'pass-thru p50/p99',
      'proxy p50/p99',
      'added p50 pi/pt/px',
      'ratio p50',
      'added p99 pi/pt/px',
      'ratio p99',
      'ratio later p50/p99',
      'CPU ms/call pi/pt/px',
      'ratio CPU pt (pi)',
      'CPU ms/session created',
      '/health p50/p99',
      'proxy RSS',
      'SYN drops d/pi/pt/px',
      'verdict',
    ],
    ...report.levels.map((l) => [
      String(l.sessions),
      `${errs(l.direct)}/${errs(l.pipe)}/${errs(l.passthrough)}/${errs(l.proxy)}`,
      `${fmtMs(l.direct.latency.p50)}/${fmtMs(l.direct.latency.p99)}`,
      `${fmtMs(l.passthrough.latency.p50)}/${fmtMs(l.passthrough.latency.p99)}`,
      `${fmtMs(l.proxy.latency.p50)}/${fmtMs(l.proxy.latency.p99)}`,
      `${fmtMs(l.added.pipe_p50_ms)}/${fmtMs(l.added.passthrough_p50_ms)}/${fmtMs(l.added.proxy_p50_ms)}`,
      fmtRatio(l.added.ratio_p50),
      `${fmtMs(l.added.pipe_p99_ms)}/${fmtMs(l.added.passthrough_p99_ms)}/${fmtMs(l.added.proxy_p99_ms)}`,
      fmtRatio(l.added.ratio_p99),
      `${fmtRatio(l.added_later_turns.ratio_p50)}/${fmtRatio(l.added_later_turns.ratio_p99)}`,
      `${l.pipe.process.cpu_ms_per_call.toFixed(2)}/${l.passthrough.process.cpu_ms_per_call.toFixed(2)}/${l.proxy.process.cpu_ms_per_call.toFixed(2)}`,
      `${fmtRatio(l.cpu_ratio)} (${fmtRatio(l.cpu_ratio_pipe)})`,
      l.proxy.registration.cpu_ms_per_session.toFixed(2),
      `${fmtMs(l.health_p50_ms)}/${fmtMs(l.health_p99_ms)}`,
      `${l.proxy_rss_peak_mb.toFixed(0)} MB`,
      `${l.direct.listen_overflows ?? '-'}/${l.pipe.listen_overflows ?? '-'}/${l.passthrough.listen_overflows ?? '-'}/${l.proxy.listen_overflows ?? '-'}`,
      l.pass ? 'ok' : 'FAIL',
    ]),
  ];
  const lines = [
    formatTable(rows),
    '(all latencies in ms; pi = the byte pipe, pt = the pass-through that parses (the floor);\n added = path minus direct; ratio = proxy added / pass-through added;\n ratio later = the same over the 2nd and later calls of each session, on open connections;\n SYN drops = connections the kernel dropped on full listen queues during the runs, system-wide)',
  ];
  const shares = (r: Record<string, number>) =>
    Object.entries(r)
      .map(([k, v]) => `${k} ${v.toFixed(1)}%`)
      .join(', ');
  for (const l of report.levels) {
    for (const [i, p] of (l.proxy.perf_rounds ?? []).entries())
      lines.push(
        `${l.sessions} sessions, round ${i + 1}, proxy CPU by perf: main thread ${shares(p.main)}; other threads ${shares(p.other_threads)}`,
      );
    if (l.perf_ms_per_call) {
      const { passthrough: pt, proxy: px } = l.perf_ms_per_call;
      const cells = Object.keys(px)
        .concat(Object.keys(pt).filter((k) => !(k in px)))
        .map((k) => `${k} ${(pt[k] ?? 0).toFixed(2)} -> ${(px[k] ?? 0).toFixed(2)}`);
      lines.push(`${l.sessions} sessions, CPU ms/call by perf category, pass-through -> proxy: ${cells.join(', ')}`);
    }
  }
  for (const l of report.levels) {
    const kinds = { ...l.direct.errors, ...l.pipe.errors, ...l.passthrough.errors, ...l.proxy.errors };
    if (Object.keys(kinds).length)
      lines.push(
        `${l.sessions}: errors direct ${JSON.stringify(l.direct.errors)} pipe ${JSON.stringify(l.pipe.errors)} pass-through ${JSON.stringify(l.passthrough.errors)} proxy ${JSON.stringify(l.proxy.errors)}`,
      );
  }
  const where =
    report.targets.latency_evaluated_at === null
      ? 'latency ratio not judged in quick mode'
      : `latency ratio judged at ${report.targets.latency_evaluated_at} sessions`;
  lines.push(
    report.pass
      ? `PASS: zero errors, /health p99 < ${TARGETS.maxHealthP99Ms} ms, proxy added p50 <= ${TARGETS.maxAddedRatio}x and p99 <= ${TARGETS.maxAddedP99Ratio}x the pass-through's, CPU per call <= ${TARGETS.maxCpuRatio}x (${where})`
      : `FAIL (${where}):\n  ${report.failures.join('\n  ')}`,
  );
  // The start value is other jobs only; the end value includes this bench's own processes.
  if (report.host.load_1m_start > report.host.cpus)
    lines.push(
      `warning: load average ${report.host.load_1m_start.toFixed(1)} on ${report.host.cpus} cores before the run: other jobs competed for the CPU, so latencies (and their ratios) are inflated and noisy`,
    );
  if (report.targets.latency_evaluated_at !== null && report.targets.latency_evaluated_at < TARGETS.sessions)
    lines.push(`note: the target is ${TARGETS.sessions} sessions; this run stopped at ${report.targets.latency_evaluated_at}`);
  const top = Math.max(...report.config.levels);
  if (!report.config.quick && top < TARGETS.errorFreeSessions)
    lines.push(`note: errors are judged up to ${TARGETS.errorFreeSessions} sessions; this run stopped at ${top}`);
  return lines.join('\n');
}

function intList(text: string, name: string): number[] {
  const list = text.split(',').map((s) => Number(s.trim()));
  if (list.length === 0 || list.some((n) => !Number.isInteger(n) || n <= 0))
    throw new Error(`--${name} must be a comma-separated list of positive integers, got '${text}'`);
  return list;
}

function niceValue(text: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < -20 || n > 19) throw new Error(`--nice must be an integer from -20 to 19, got '${text}'`);
  return n;
}

function positive(text: string, name: string): number {
  const n = Number(text);
  if (!Number.isFinite(n) || n < 0) throw new Error(`--${name} must be a non-negative number, got '${text}'`);
  return n;
}

export function parseProxyLoadArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): ProxyLoadOptions {
  const { values } = parseArgs({
    args: argv,
    options: {
      levels: { type: 'string' },
      turns: { type: 'string' },
      rounds: { type: 'string' },
      'think-ms': { type: 'string' },
      'ramp-ms': { type: 'string', default: '1000' },
      'system-bytes': { type: 'string', default: '2000' },
      'stream-share': { type: 'string', default: '0.5' },
      quick: { type: 'boolean', default: false },
      profile: { type: 'boolean', default: false },
      perf: { type: 'boolean', default: false },
      'proxy-from-source': { type: 'boolean', default: false },
      'proxy-node-arg': { type: 'string', multiple: true, default: [] },
      nice: { type: 'string' },
      out: { type: 'string' },
    },
  });
  const quick = values.quick || env.BENCH_QUICK === '1';
  const streamShare = positive(values['stream-share'], 'stream-share');
  if (streamShare > 1) throw new Error(`--stream-share must be between 0 and 1, got '${values['stream-share']}'`);
  const thinkMs = values['think-ms'] ?? (quick ? '100,300' : '500,1500');
  parseThinkMs(thinkMs);
  return {
    levels: intList(values.levels ?? (quick ? '8,32' : '64,512,1000,2000'), 'levels'),
    turns: intList(values.turns ?? (quick ? '2' : '3'), 'turns')[0]!,
    rounds: intList(values.rounds ?? (quick ? '1' : '2'), 'rounds')[0]!,
    thinkMs,
    rampMs: positive(values['ramp-ms'], 'ramp-ms'),
    systemBytes: positive(values['system-bytes'], 'system-bytes'),
    streamShare,
    quick,
    profile: values.profile,
    perf: values.perf,
    proxyFromSource: values['proxy-from-source'],
    proxyNodeArgs: values['proxy-node-arg'],
    ...(values.nice !== undefined ? { nice: niceValue(values.nice) } : {}),
    out: values.out ?? join(ROOT, 'bench-results', quick ? 'proxy-load-quick.json' : 'proxy-load.json'),
    log: (line) => process.stderr.write(`${line}\n`),
  };
}

if (process.argv[1]?.endsWith('proxy-load.ts')) {
  (async () => {
    const options = parseProxyLoadArgs(process.argv.slice(2));
    const report = await runProxyLoad(options);
    process.stdout.write(
      `\nproxy load (${report.host.cpus} cores, ${report.config.turns} turns/session, engine think ${report.config.thinkMs} ms)\n${formatReport(report)}\nJSON: ${options.out}\n`,
    );
    process.exitCode = report.pass ? 0 : 1;
  })().catch((err: unknown) => {
    process.stderr.write(`proxy-load: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 2;
  });
}
