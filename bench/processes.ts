// Child processes for the benchmarks: start one, wait for the line that says where it listens,
// watch its memory and CPU through /proc, and stop it (only the processes we started, by pid).
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, readFileSync, readdirSync } from 'node:fs';
import { setPriority } from 'node:os';
import { createInterface } from 'node:readline';

/** `"500,1500"` -> [500, 1500]; `"10"` -> 10. */
export function parseThinkMs(text: string): number | [number, number] {
  const parts = text.split(',').map((p) => Number(p.trim()));
  if (parts.some((n) => !Number.isFinite(n) || n < 0) || parts.length < 1 || parts.length > 2) {
    throw new Error(`--think-ms must be a number of ms or "min,max", got '${text}'`);
  }
  return parts.length === 2 ? [parts[0]!, parts[1]!] : parts[0]!;
}

let childPriority: number | undefined;

/** Scheduling priority (nice value) for this process and every child started afterwards. */
export function setBenchPriority(nice: number): void {
  setPriority(nice);
  childPriority = nice;
}

export interface Started {
  child: ChildProcess;
  pid: number;
  /** The first stdout line that `ready` accepted. */
  line: string;
  /** The newest stdout line so far (`line` until another one comes). */
  lastLine(): string;
  /** Everything the child wrote to stderr so far (kept for error reports, capped). */
  stderr(): string;
}

/**
 * Spawns `node <args>` and resolves once a stdout line satisfies `ready`. stdin stays an open pipe:
 * the bench children exit when it closes, so they cannot outlive a crashed orchestrator.
 */
export function startNode(
  name: string,
  args: string[],
  ready: (line: string) => boolean,
  options: { env?: NodeJS.ProcessEnv; timeoutMs?: number; logFile?: string } = {},
): Promise<Started> {
  const child = spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'pipe'], env: options.env ?? process.env });
  if (childPriority !== undefined && child.pid !== undefined) setPriority(child.pid, childPriority);
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString('utf8')).slice(-20_000);
  });
  if (options.logFile) {
    // Everything the child prints (e.g. --trace-gc lines), for a later look.
    const log = createWriteStream(options.logFile);
    child.stdout!.on('data', (chunk: Buffer) => log.write(chunk));
    child.stderr!.on('data', (chunk: Buffer) => log.write(chunk));
    child.once('exit', () => log.end());
  }
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => fail(new Error(`${name} did not report ready within ${options.timeoutMs ?? 30_000} ms`)),
      options.timeoutMs ?? 30_000,
    );
    const lines = createInterface({ input: child.stdout! });
    const fail = (err: Error) => {
      clearTimeout(timer);
      lines.close();
      if (child.exitCode === null) child.kill('SIGKILL');
      reject(new Error(`${err.message}\n${name} stderr:\n${stderr.trim()}`));
    };
    child.once('error', fail);
    child.once('exit', (code, signal) => fail(new Error(`${name} exited early (${signal ?? `code ${code}`})`)));
    lines.on('line', (line) => {
      if (!ready(line)) return;
      clearTimeout(timer);
      child.removeAllListeners('exit');
      child.removeAllListeners('error');
      // Keep draining stdout so a chatty child never blocks on a full pipe.
      lines.removeAllListeners('line');
      let last = line;
      lines.on('line', (next) => (last = next));
      resolve({ child, pid: child.pid!, line, lastLine: () => last, stderr: () => stderr });
    });
  });
}

/** SIGTERM, then SIGKILL if it has not exited after `graceMs`. */
export async function stopChild(child: ChildProcess, graceMs = 10_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

/** Resident set size of a process in bytes, or undefined once it is gone. */
export function rssBytes(pid: number): number | undefined {
  try {
    const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Number(match[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** User + system CPU time of a process in ms (Linux clock ticks are 10 ms). */
export function cpuMs(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces) start after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return undefined;
  }
}

/** A process's resident memory now (VmRSS), in MB; undefined where /proc cannot say. */
export function rssMb(pid: number): number | undefined {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Math.round(Number(m[1]) / 102.4) / 10 : undefined;
  } catch {
    return undefined;
  }
}

/**
 * CPU ms of a process's live threads from their schedstat (nanoseconds, where /proc/<pid>/stat counts
 * 10 ms ticks): fine enough to time one call. Threads that ended meanwhile are not counted. Linux only.
 */
export function schedCpuMs(pid: number): number | undefined {
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return undefined;
  }
  let ns = 0;
  for (const tid of tids) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // the thread ended meanwhile
    }
  }
  return ns / 1e6;
}

/**
 * CPU ms of each live thread of a process, summed by thread name (`node` is the main thread and
 * unnamed workers, `libuv-worker` the thread pool, `iou-wrk-*` io_uring workers), split into user and
 * system time. Linux only; empty elsewhere.
 */
export function threadCpuMs(pid: number): Map<string, { user: number; sys: number }> {
  const out = new Map<string, { user: number; sys: number }>();
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const tid of tids) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')).replace(/\d+$/, '');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const key = tid === String(pid) ? 'main' : name;
      const t = out.get(key) ?? { user: 0, sys: 0 };
      t.user += Number(fields[11]) * 10;
      t.sys += Number(fields[12]) * 10;
      out.set(key, t);
    } catch {
      // the thread ended meanwhile
    }
  }
  return out;
}

export interface WatchedProcessStats {
  rssPeakBytes: number;
  rssStartBytes: number;
  cpuMs: number;
  /** CPU ms per thread name over the run (threads that ended meanwhile are missing). */
  threadCpuMs: Record<string, { user: number; sys: number }>;
}

/** Samples a process's RSS every `intervalMs`; `stop()` returns the peak and the CPU used meanwhile. */
export function watchProcess(pid: number, intervalMs = 100): { stop(): WatchedProcessStats } {
  const rssStart = rssBytes(pid) ?? 0;
  const cpuStart = cpuMs(pid) ?? 0;
  const threadsStart = threadCpuMs(pid);
  let peak = rssStart;
  const timer = setInterval(() => {
    peak = Math.max(peak, rssBytes(pid) ?? 0);
  }, intervalMs);
  return {
    stop() {
      clearInterval(timer);
      peak = Math.max(peak, rssBytes(pid) ?? 0);
      const threads: Record<string, { user: number; sys: number }> = {};
      for (const [name, t] of threadCpuMs(pid)) {
        const before = threadsStart.get(name) ?? { user: 0, sys: 0 };
        threads[name] = { user: t.user - before.user, sys: t.sys - before.sys };
      }
      return { rssPeakBytes: peak, rssStartBytes: rssStart, cpuMs: (cpuMs(pid) ?? cpuStart) - cpuStart, threadCpuMs: threads };
    },
  };
}

/**
 * The kernel's count of connections dropped because a listen queue was full (TcpExt ListenOverflows,
 * system-wide). A rise during a run means SYNs were dropped and clients waited for retransmits.
 */
export function listenOverflows(): number | undefined {
  try {
    const lines = readFileSync('/proc/net/netstat', 'utf8').split('\n');
    for (let i = 0; i + 1 < lines.length; i += 2) {
      const names = lines[i]!.split(/\s+/);
      const values = lines[i + 1]!.split(/\s+/);
      const at = names.indexOf('ListenOverflows');
      if (names[0] === 'TcpExt:' && at > 0) return Number(values[at]);
    }
  } catch {
    // not Linux
  }
  return undefined;
}
