// CPU profiles that count CPU: Linux `perf record -e cpu-clock` on one process, every thread, the
// kernel included, with V8's JIT symbols (the profiled node runs with --perf-basic-prof). Why not
// V8's own --cpu-prof: it samples wall-clock time, so on two shared cores it charges a native call
// for the time the thread was descheduled inside it (it put 10% of the proxy in `writeBuffer`, an
// async write whose removal measured no change). `perf` needs the linux-perf package (Debian) and
// `kernel.perf_event_paranoid` at 1 or below (root can set it).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';

/** What a sample's symbol is spent on; the first pattern that matches names it (see categoryOf). */
export const PERF_CATEGORIES: readonly (readonly [string, RegExp])[] = [
  ['kernel', /^\[k\]/],
  [
    'gc',
    /Scaveng|Marking|MarkCompact|Sweeper|Heap::|GCTracer|Evacuat|RememberedSet|SlotSet|IteratePointers|SizeFromMap|ArrayBufferSweeper|MemoryAllocator|FreeList/,
  ],
  ['compiler', /compiler::|Turbofan|Maglev|baseline::|Compiler|Pipeline|Zone::/],
  ['json', /Json/],
  ['malloc', /malloc|_int_free|cfree|unlink_chunk|memmove|memcpy|memset/],
  ['js', /^\[\.\] (JS:|Builtins_)|LoadIC|StoreIC/],
];

export function categoryOf(symbol: string): string {
  for (const [name, pattern] of PERF_CATEGORIES) if (pattern.test(symbol)) return name;
  return 'other-native';
}

/** Shares of the profiled process's CPU (percent, one decimal): by category, for the main thread, and for all other threads together. */
export interface PerfBreakdown {
  samples_pct: number;
  total: Record<string, number>;
  main: Record<string, number>;
  other_threads: Record<string, number>;
  /** The ten heaviest symbols, any thread. */
  top: { symbol: string; pct: number }[];
}

/**
 * Reads `perf report --no-children --sort pid,sym -g none -q` output: lines like
 * `  2.05%    18680:node     [k] _raw_spin_unlock_irqrestore`, where the number before the colon is
 * the thread id and the main thread's is the process id.
 */
export function perfBreakdown(reportText: string, pid: number): PerfBreakdown {
  const add = (into: Record<string, number>, key: string, pct: number) => (into[key] = (into[key] ?? 0) + pct);
  const total: Record<string, number> = {};
  const main: Record<string, number> = {};
  const others: Record<string, number> = {};
  const bySymbol = new Map<string, number>();
  let sum = 0;
  for (const line of reportText.split('\n')) {
    const m = /^\s*([\d.]+)%\s+(\d+):\S+\s+(\[[.k]\] .*?)\s*$/.exec(line);
    if (!m) continue;
    const pct = Number(m[1]);
    const symbol = m[3]!;
    const category = categoryOf(symbol);
    sum += pct;
    add(total, category, pct);
    add(Number(m[2]) === pid ? main : others, category, pct);
    bySymbol.set(symbol, (bySymbol.get(symbol) ?? 0) + pct);
  }
  const round = (r: Record<string, number>) =>
    Object.fromEntries(
      Object.entries(r)
        .sort((a, b) => b[1] - a[1])
        .map(([k, v]) => [k, Math.round(v * 10) / 10]),
    );
  const top = [...bySymbol]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 10)
    .map(([symbol, pct]) => ({ symbol, pct: Math.round(pct * 100) / 100 }));
  return { samples_pct: Math.round(sum * 10) / 10, total: round(total), main: round(main), other_threads: round(others), top };
}

/**
 * Milliseconds of CPU per call by category: each round's shares (normalised to what was sampled)
 * averaged over the rounds, times the process's CPU per call over the same runs. Put side by side
 * for two processes on the same load, it says where one costs more than the other, in the unit
 * the targets use.
 */
export function msPerCallByCategory(rounds: readonly PerfBreakdown[], cpuMsPerCall: number): Record<string, number> {
  const sums: Record<string, number> = {};
  let n = 0;
  for (const r of rounds) {
    if (r.samples_pct <= 0) continue;
    n++;
    for (const [category, pct] of Object.entries(r.total)) sums[category] = (sums[category] ?? 0) + pct / r.samples_pct;
  }
  if (n === 0) return {};
  return Object.fromEntries(
    Object.entries(sums)
      .map(([category, share]) => [category, Math.round((share / n) * cpuMsPerCall * 1000) / 1000] as const)
      .sort((a, b) => b[1] - a[1]),
  );
}

/** Why `perf` cannot profile here, or undefined when it can. */
export function perfUnavailable(): string | undefined {
  const probe = spawnSync('perf', ['--version'], { encoding: 'utf8' });
  if (probe.error || probe.status !== 0) return 'perf is not installed (apt-get install linux-perf)';
  try {
    const paranoid = Number(readFileSync('/proc/sys/kernel/perf_event_paranoid', 'utf8').trim());
    if (paranoid > 1 && process.getuid?.() !== 0)
      return `kernel.perf_event_paranoid is ${paranoid}; set it to 1 or below (sysctl kernel.perf_event_paranoid=1)`;
  } catch {
    return 'this is not Linux (no /proc/sys/kernel/perf_event_paranoid)';
  }
  return undefined;
}

export interface PerfRecording {
  /** Stops recording and returns the breakdown of what was recorded. */
  stop(): Promise<PerfBreakdown>;
}

/** Records `pid` (all its threads) into `file` until stop(). */
export function recordPerf(pid: number, file: string): PerfRecording {
  const child: ChildProcess = spawn('perf', ['record', '-e', 'cpu-clock', '-F', '999', '-p', String(pid), '-o', file], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => (stderr = (stderr + c.toString('utf8')).slice(-4000)));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    async stop() {
      child.kill('SIGINT');
      const code = await exited;
      if (code !== 0 && code !== null) throw new Error(`perf record exited with ${code}: ${stderr.trim()}`);
      const report = spawnSync(
        'perf',
        ['report', '-i', file, '--no-children', '--sort', 'pid,sym', '-g', 'none', '-q', '--percent-limit', '0'],
        { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 },
      );
      if (report.status !== 0) throw new Error(`perf report failed: ${report.stderr.trim()}`);
      return perfBreakdown(report.stdout, pid);
    },
  };
}
