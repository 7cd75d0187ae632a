// `hot-path`: what recording costs at a training run's load (issue 31), side by side in one run, in
// both capture modes: chat (the engine renders) and token in (`--render proxy`: the proxy renders and
// sends token ids). Every hop is its own process in front of an engine that answers at once (chat: the
// fake engine with zero think time; token in: bench/token-engine-process.ts, the tiny Qwen3's real
// tokenizer and template and a fixed tool call), so what differs between hops is the hop's own work:
//   pipe          a node:http hop that pipes bytes (no parsing): what an HTTP hop alone costs;
//   pass-through  parse, forward, answer (bench/passthrough.ts --parse): the issue's reference;
//   proxy         `harness-lab proxy --data-dir <tmp> --render engine|proxy` (the durable store, as shipped).
// Sections, per mode (each hop a fresh process, warmed before it is measured):
//   load   N concurrent sessions x 3 turns (1,000, then 2,000 for errors; the engine thinks 0.5-1.5 s):
//          CPU per call, added p50/p99;
//   sizes  prompts of 1k / 8k / 32k tokens: CPU per call;
//   ramp   paced call rates (x1.5 a step) until a hop has an error, /health p99 >= 100 ms or falls behind.
// Targets (PASS/FAIL; the bench exits 1 on a miss): proxy CPU per call at 1,000 sessions <= 2x the
// pass-through's; added p99 <= 2x; zero errors at 2,000; the proxy's highest sustained rate >= half the
// pass-through's; CPU per call at each prompt size <= 2.5x the pass-through's.
//
//   node --import tsx bench/hot-path.ts [--quick] [--modes chat,token-in] [--sections load,sizes,ramp]
//     [--levels 1000,2000] [--sizes 1000,8000,32000] [--profile] [--proxy-from-source] [--out FILE]
//     [--baseline-cli OTHER/dist/cli.js] [--proxy-node-arg FLAG]... [--baseline-node-arg FLAG]...
//   (the baseline hop is another build, or this one with other Node flags: before and after in one run)
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import type { LoadResult } from './load-generator.js';
import { summarize } from './stats.js';
import { listenOverflows, startNode, stopChild, watchProcess, type Started } from './processes.js';

const ROOT = join(__dirname, '..');

export const HOT_PATH_TARGETS = {
  maxCpuRatio: 2,
  maxAddedP99Ratio: 2,
  minRateShare: 0.5,
  maxSizeCpuRatio: 2.5,
  maxHealthP99Ms: 100,
} as const;

export type Mode = 'chat' | 'token-in';
/** `baseline`: another build's proxy (`--baseline-cli`) or this one with other Node flags (`--baseline-node-arg`), measured beside it: before and after in one run. */
export type Hop = 'pipe' | 'passthrough' | 'proxy' | 'baseline';
type Section = 'load' | 'sizes' | 'ramp';

export interface HotPathOptions {
  quick: boolean;
  modes: Mode[];
  sections: Section[];
  levels: number[];
  /** The load section's engine think time, `MIN,MAX` ms. */
  thinkMs: string;
  /** Load section: every hop this many times, alternating the order; the rounds are pooled. */
  rounds: number;
  turns: number;
  sizes: number[];
  /** Ramp: seconds of paced load per step, the first rate (calls/s) and the factor between steps. */
  rampSeconds: number;
  rampStart: number;
  rampFactor: number;
  profile: boolean;
  proxyFromSource: boolean;
  /** Another build's dist/cli.js: its proxy is measured beside this one's (hop `baseline`). */
  baselineCli: string | undefined;
  proxyNodeArgs: string[];
  /** Node flags for the baseline hop only (default: the proxy's): a flag measured beside the shipped proxy. */
  baselineNodeArgs: string[] | undefined;
  out: string;
  log: (line: string) => void;
}

interface HopRun {
  hop: Hop | 'direct';
  calls_ok: number;
  errors: Record<string, number>;
  p50_ms: number;
  p99_ms: number;
  health_p99_ms: number | null;
  health_errors: number;
  wall_ms: number;
  cpu_ms: number;
  cpu_ms_per_call: number;
  /** Proxy only: call lines its store holds from this run (must equal calls_ok). */
  stored_calls?: number;
  listen_overflows?: number;
  /** Call latencies and /health latencies, for pooling rounds (dropped from the JSON report). */
  samples?: number[];
  health_samples?: number[];
}

interface LoadLevel {
  sessions: number;
  runs: HopRun[];
  cpu_ratio: number;
  /** With a baseline hop: its CPU per call over the pass-through's. */
  baseline_cpu_ratio?: number;
  added_p50: { passthrough: number; proxy: number; ratio: number };
  added_p99: { passthrough: number; proxy: number; ratio: number };
}

interface SizeRow {
  prompt_tokens: number;
  runs: HopRun[];
  cpu_ratio: number;
  baseline_cpu_ratio?: number;
}

interface RampStep {
  rate: number;
  hop: Hop;
  achieved_rate: number;
  errors: number;
  health_p99_ms: number | null;
  sustained: boolean;
}

interface ModeReport {
  mode: Mode;
  load: LoadLevel[];
  sizes: SizeRow[];
  ramp: { steps: RampStep[]; ceiling: Partial<Record<Hop, number>>; share: number | null };
}

export interface HotPathReport {
  bench: 'hot-path';
  started_at: string;
  host: { cpus: number; node: string; load_1m_start: number; load_1m_end: number };
  config: Omit<HotPathOptions, 'log' | 'out'>;
  targets: typeof HOT_PATH_TARGETS;
  modes: ModeReport[];
  pass: boolean;
  failures: string[];
}

const round2 = (v: number) => Math.round(v * 100) / 100;
const tsx = (script: string, args: string[]) => ['--import', 'tsx', join(ROOT, 'bench', script), ...args];
const jsonLine = (line: string) => line.startsWith('{');
const totalOf = (errors: Record<string, number>) => Object.values(errors).reduce((a, b) => a + b, 0);

/** Counts the call lines under a proxy's data dir. */
function storedCalls(dataDir: string): number {
  const dir = join(dataDir, 'sessions');
  if (!existsSync(dir)) return 0;
  let calls = 0;
  for (const name of readdirSync(dir))
    for (const line of readFileSync(join(dir, name), 'utf8').split('\n')) if (line.startsWith('{"type":"call"')) calls++;
  return calls;
}

/** Runs the load generator; `onGate` runs once the proxy's sessions are registered, right before the calls. */
async function runLoadGenerator(args: string[], onGate: () => void): Promise<LoadResult> {
  const before = listenOverflows();
  const gen = await startNode('load generator', tsx('load-generator.ts', [...args, '--gate']), (l) => l.startsWith('{"registered"'), {
    timeoutMs: 15 * 60_000,
  });
  onGate();
  gen.child.stdin!.write('go\n');
  await new Promise<void>((resolve) => (gen.child.exitCode !== null ? resolve() : gen.child.once('exit', () => resolve())));
  let result: LoadResult;
  try {
    result = JSON.parse(gen.lastLine()) as LoadResult;
  } catch {
    throw new Error(`load generator ended without a result:\n${gen.stderr().slice(-2000)}`);
  }
  const after = listenOverflows();
  if (before !== undefined && after !== undefined) result.listen_overflows = after - before;
  return result;
}

interface Shape {
  sessions: number;
  turns: number;
  rampMs: number;
  systemBytes: number;
}

interface Engine {
  started: Started;
  url: string;
  model: string;
}

export async function runHotPath(o: HotPathOptions): Promise<HotPathReport> {
  const cliPath = join(ROOT, 'dist', 'cli.js');
  if (!o.proxyFromSource && !existsSync(cliPath)) throw new Error(`${cliPath} is missing; run npm run build (or pass --proxy-from-source)`);
  if (o.baselineCli && !existsSync(o.baselineCli)) throw new Error(`--baseline-cli ${o.baselineCli} does not exist`);
  const started_at = new Date().toISOString();
  const loadStart = loadavg()[0]!;
  const children: Started[] = [];
  const dataDirs: string[] = [];
  const profileDir = join(ROOT, 'bench-results', 'profiles');
  if (o.profile) mkdirSync(profileDir, { recursive: true });
  const onSignal = () => {
    for (const c of children) c.child.kill('SIGKILL');
    process.exit(130);
  };
  process.once('SIGINT', onSignal);
  const track = (s: Started) => (children.push(s), s);
  const untrack = async (s: Started) => {
    await stopChild(s.child);
    children.splice(children.indexOf(s), 1);
  };
  const modes: ModeReport[] = [];
  try {
    for (const mode of o.modes) {
      // Two engines per mode: one answering at once (sizes, ramp: the hops' own cost), and for the
      // load section one that thinks like a model, so 1,000 sessions are concurrent conversations and
      // the engine is not the queue every path waits in (with an instant engine the direct path's
      // p99 was above the hops': added latency then measures nothing).
      const instantEngine = await startEngine(mode, '0', track);
      let engine = instantEngine;
      o.log(`[${mode}] engine ${engine.url} (${engine.model})`);
      /** Bytes of filler text per prompt token: the fake engine counts bytes, the Qwen3 tokenizer ~4.3 characters. */
      const bytesPerToken = mode === 'chat' ? 1 : 4.3;

      /** A fresh hop process warmed with `warm`; `measure` runs one shape, its CPU from the gate to the end. */
      const startHop = async (
        hop: Hop | 'direct',
        warm: Shape,
        label: string,
      ): Promise<{ measure(s: Shape): Promise<HopRun>; stop(): Promise<void> }> => {
        let url = engine.url;
        let proc: Started | undefined;
        let dataDir: string | undefined;
        if (hop === 'pipe' || hop === 'passthrough') {
          proc = track(
            await startNode(
              hop,
              tsx('passthrough.ts', ['--engine-url', engine.url, ...(hop === 'passthrough' ? ['--parse'] : [])]),
              jsonLine,
            ),
          );
          url = (JSON.parse(proc.line) as { url: string }).url;
        } else if (hop === 'proxy' || hop === 'baseline') {
          dataDir = mkdtempSync(join(tmpdir(), 'hl-bench-hot-'));
          dataDirs.push(dataDir);
          const entry =
            hop === 'baseline' && o.baselineCli
              ? [o.baselineCli]
              : o.proxyFromSource
                ? ['--import', 'tsx', join(ROOT, 'src', 'cli', 'main.ts')]
                : [cliPath];
          const nodeArgs = [
            ...(hop === 'baseline' ? (o.baselineNodeArgs ?? o.proxyNodeArgs) : o.proxyNodeArgs),
            ...(o.profile ? ['--cpu-prof', '--cpu-prof-dir', profileDir, '--cpu-prof-name', `hot-${mode}-${hop}-${label}.cpuprofile`] : []),
          ];
          const render = mode === 'chat' ? 'engine' : 'proxy';
          proc = track(
            await startNode(
              'proxy',
              [
                ...nodeArgs,
                ...entry,
                'proxy',
                '--engine-url',
                engine.url,
                '--model',
                engine.model,
                '--data-dir',
                dataDir,
                '--render',
                render,
              ],
              (l) => l.startsWith('proxy listening on '),
              { timeoutMs: 120_000 },
            ),
          );
          url = proc.line.slice('proxy listening on '.length).trim();
        }
        const loadMode = hop === 'proxy' || hop === 'baseline' ? 'proxy' : hop;
        const args = (s: Shape) => [
          '--mode',
          loadMode,
          '--url',
          url,
          '--model',
          engine.model,
          '--sessions',
          String(s.sessions),
          '--turns',
          String(s.turns),
          '--ramp-ms',
          String(s.rampMs),
          '--system-bytes',
          String(s.systemBytes),
          '--stream-share',
          '0',
          '--health-url',
          `${url}/health`,
        ];
        const measure = async (s: Shape): Promise<HopRun> => {
          const storedBefore = dataDir ? storedCalls(dataDir) : 0;
          let watch: ReturnType<typeof watchProcess> | undefined;
          const result = await runLoadGenerator(args(s), () => {
            if (proc) watch = watchProcess(proc.pid);
          });
          const cpu = watch?.stop().cpuMs ?? 0;
          return {
            hop,
            calls_ok: result.calls_ok,
            errors: result.errors,
            p50_ms: result.latency.p50,
            p99_ms: result.latency.p99,
            health_p99_ms: result.health?.latency.p99 ?? null,
            health_errors: result.health ? totalOf(result.health.errors) : 0,
            wall_ms: result.wall_ms,
            cpu_ms: cpu,
            cpu_ms_per_call: result.calls_ok ? round2(cpu / result.calls_ok) : Number.NaN,
            ...(dataDir ? { stored_calls: storedCalls(dataDir) - storedBefore } : {}),
            ...(result.listen_overflows !== undefined ? { listen_overflows: result.listen_overflows } : {}),
            samples: result.samples_ms ?? [],
            health_samples: result.health?.samples_ms ?? [],
          };
        };
        const stop = async () => {
          if (proc) await untrack(proc);
        };
        try {
          await runLoadGenerator(args(warm), () => {});
        } catch (err) {
          await stop();
          throw err;
        }
        return { measure, stop };
      };
      /** A fresh hop, warmed, then every shape of `measured` in turn. */
      const runHop = async (hop: Hop | 'direct', warm: Shape, measured: Shape[], label: string): Promise<HopRun[]> => {
        const h = await startHop(hop, warm, label);
        try {
          const out: HopRun[] = [];
          for (const s of measured) out.push(await h.measure(s));
          return out;
        } finally {
          await h.stop();
        }
      };

      const report: ModeReport = { mode, load: [], sizes: [], ramp: { steps: [], ceiling: {}, share: null } };
      const systemBytes = Math.round(500 * bytesPerToken);
      if (o.sections.includes('load')) {
        engine = await startEngine(mode, o.thinkMs, track);
        const shapes = o.levels.map((n) => ({ sessions: n, turns: o.turns, rampMs: 1000, systemBytes }));
        const warm = { sessions: o.quick ? 32 : Math.min(1000, o.levels[0]!), turns: o.turns, rampMs: 1000, systemBytes };
        const hops: (Hop | 'direct')[] = ['direct', 'pipe', 'passthrough', 'proxy', ...(hasBaseline(o) ? (['baseline'] as const) : [])];
        const byHop = new Map<Hop | 'direct', HopRun[][]>(hops.map((h) => [h, []]));
        // Rounds alternate the order, so a drift in the machine's load hits every hop alike.
        for (let round = 0; round < o.rounds; round++) {
          for (const hop of round % 2 === 0 ? hops : [...hops].reverse()) {
            const runs = await runHop(hop, warm, shapes, `load-r${round}`);
            byHop.get(hop)!.push(runs);
            o.log(`[${mode}] load ${hop} (round ${round + 1}): ${runs.map(fmtRun).join(' | ')}`);
          }
        }
        for (const [i, s] of shapes.entries()) {
          const runs = [...byHop.values()].map((rounds) => poolRuns(rounds.map((r) => r[i]!)));
          const get = (h: string) => runs.find((r) => r.hop === h)!;
          const added = (h: string, k: 'p50_ms' | 'p99_ms') => round2(Math.max(1, get(h)[k] - get('direct')[k]));
          const ratio = (a: number, b: number) => round2(a / b);
          report.load.push({
            sessions: s.sessions,
            runs,
            cpu_ratio: ratio(get('proxy').cpu_ms_per_call, get('passthrough').cpu_ms_per_call),
            ...(hasBaseline(o) ? { baseline_cpu_ratio: ratio(get('baseline').cpu_ms_per_call, get('passthrough').cpu_ms_per_call) } : {}),
            added_p50: {
              passthrough: added('passthrough', 'p50_ms'),
              proxy: added('proxy', 'p50_ms'),
              ratio: ratio(added('proxy', 'p50_ms'), added('passthrough', 'p50_ms')),
            },
            added_p99: {
              passthrough: added('passthrough', 'p99_ms'),
              proxy: added('proxy', 'p99_ms'),
              ratio: ratio(added('proxy', 'p99_ms'), added('passthrough', 'p99_ms')),
            },
          });
        }
      }
      if (engine !== instantEngine) {
        await untrack(engine.started);
        engine = instantEngine;
      }
      if (o.sections.includes('sizes')) {
        const sessions = o.quick ? 4 : 16;
        for (const tokens of o.sizes) {
          const shape = { sessions, turns: 3, rampMs: 500, systemBytes: Math.round(tokens * bytesPerToken) };
          const runs: HopRun[] = [];
          const hops: Hop[] = ['pipe', 'passthrough', 'proxy', ...(hasBaseline(o) ? (['baseline'] as const) : [])];
          for (const hop of hops) runs.push(...(await runHop(hop, shape, [shape], `size${tokens}`)));
          const get = (h: string) => runs.find((r) => r.hop === h)!;
          report.sizes.push({
            prompt_tokens: tokens,
            runs,
            cpu_ratio: round2(get('proxy').cpu_ms_per_call / get('passthrough').cpu_ms_per_call),
            ...(hasBaseline(o) ? { baseline_cpu_ratio: round2(get('baseline').cpu_ms_per_call / get('passthrough').cpu_ms_per_call) } : {}),
          });
          o.log(`[${mode}] size ${tokens}: ${runs.map(fmtRun).join(' | ')}`);
        }
      }
      if (o.sections.includes('ramp')) {
        for (const hop of ['passthrough', 'proxy'] as const) {
          let rate = o.rampStart;
          let best: number | undefined;
          const shapeAt = (r: number) => ({
            sessions: Math.max(1, Math.round((r * o.rampSeconds) / o.turns)),
            turns: o.turns,
            rampMs: o.rampSeconds * 1000,
            systemBytes,
          });
          // One process for the whole ramp, warmed once (as a training run's proxy is warm after its first minute).
          const h = await startHop(hop, { ...shapeAt(rate), sessions: o.quick ? 32 : Math.min(1000, o.levels[0]!), rampMs: 1000 }, 'ramp');
          try {
            for (let step = 0; step < (o.quick ? 3 : 20); step++) {
              const run = await h.measure(shapeAt(rate));
              const achieved = round2((run.calls_ok * 1000) / run.wall_ms);
              const errors = totalOf(run.errors) + run.health_errors;
              // Kept up: the calls ended within a second of the last session's start plus its turns (wall <= seconds + 1).
              const sustained =
                errors === 0 && (run.health_p99_ms ?? 0) < HOT_PATH_TARGETS.maxHealthP99Ms && run.wall_ms <= o.rampSeconds * 1000 + 1000;
              report.ramp.steps.push({ rate, hop, achieved_rate: achieved, errors, health_p99_ms: run.health_p99_ms, sustained });
              o.log(
                `[${mode}] ramp ${hop} ${rate}/s: ${achieved}/s achieved, wall ${run.wall_ms} ms, errors ${errors}, /health p99 ${run.health_p99_ms} ms -> ${sustained ? 'ok' : 'not sustained'}`,
              );
              if (!sustained) break;
              best = rate;
              rate = Math.round(rate * o.rampFactor);
            }
          } finally {
            await h.stop();
          }
          if (best !== undefined) report.ramp.ceiling[hop] = best;
        }
        const { passthrough, proxy } = report.ramp.ceiling;
        report.ramp.share = passthrough && proxy !== undefined ? round2(proxy / passthrough) : null;
      }
      modes.push(report);
      await untrack(instantEngine.started);
    }
  } finally {
    process.off('SIGINT', onSignal);
    for (const c of [...children]) await stopChild(c.child);
    for (const d of dataDirs) rmSync(d, { recursive: true, force: true });
  }
  const failures = evaluate(modes, o);
  return {
    bench: 'hot-path',
    started_at,
    host: { cpus: cpus().length, node: process.version, load_1m_start: loadStart, load_1m_end: loadavg()[0]! },
    config: {
      quick: o.quick,
      modes: o.modes,
      sections: o.sections,
      levels: o.levels,
      thinkMs: o.thinkMs,
      rounds: o.rounds,
      turns: o.turns,
      sizes: o.sizes,
      rampSeconds: o.rampSeconds,
      rampStart: o.rampStart,
      rampFactor: o.rampFactor,
      profile: o.profile,
      proxyFromSource: o.proxyFromSource,
      baselineCli: o.baselineCli,
      proxyNodeArgs: o.proxyNodeArgs,
      baselineNodeArgs: o.baselineNodeArgs,
    },
    targets: HOT_PATH_TARGETS,
    modes,
    pass: failures.length === 0,
    failures,
  };
}

/** One hop's runs of one shape pooled: CPU and calls summed, latencies from all samples. */
export function poolRuns(runs: HopRun[]): HopRun {
  const first = runs[0]!;
  if (runs.length === 1) return first;
  const errors: Record<string, number> = {};
  for (const r of runs) for (const [k, n] of Object.entries(r.errors)) errors[k] = (errors[k] ?? 0) + n;
  const sum = (f: (r: HopRun) => number) => runs.reduce((n, r) => n + f(r), 0);
  const samples = runs.flatMap((r) => r.samples ?? []);
  const health = runs.flatMap((r) => r.health_samples ?? []);
  const calls = sum((r) => r.calls_ok);
  const cpu = sum((r) => r.cpu_ms);
  const latency = summarize(samples);
  return {
    hop: first.hop,
    calls_ok: calls,
    errors,
    p50_ms: latency.p50,
    p99_ms: latency.p99,
    health_p99_ms: health.length ? summarize(health).p99 : null,
    health_errors: sum((r) => r.health_errors),
    wall_ms: sum((r) => r.wall_ms),
    cpu_ms: cpu,
    cpu_ms_per_call: calls ? round2(cpu / calls) : Number.NaN,
    ...(runs.every((r) => r.stored_calls !== undefined) ? { stored_calls: sum((r) => r.stored_calls!) } : {}),
    samples,
    health_samples: health,
  };
}

async function startEngine(mode: Mode, thinkMs: string, track: (s: Started) => Started): Promise<Engine> {
  const started =
    mode === 'chat'
      ? await startNode('fake engine', tsx('fake-engine-process.ts', ['--think-ms', thinkMs]), jsonLine)
      : await startNode('token engine', tsx('token-engine-process.ts', ['--think-ms', thinkMs]), jsonLine, { timeoutMs: 180_000 });
  track(started);
  const { url, model } = JSON.parse(started.line) as { url: string; model: string };
  return { started, url, model };
}

function fmtRun(r: HopRun): string {
  const errors = totalOf(r.errors);
  return `${r.calls_ok} calls${errors ? ` ${errors} errors` : ''} p50/p99 ${r.p50_ms}/${r.p99_ms} ms, ${r.cpu_ms_per_call} CPU ms/call`;
}

/** The failed targets (empty: PASS). Quick mode judges only errors, stored calls and /health. */
export function evaluate(modes: ModeReport[], o: Pick<HotPathOptions, 'quick'>): string[] {
  const t = HOT_PATH_TARGETS;
  const failures: string[] = [];
  for (const m of modes) {
    for (const level of m.load) {
      for (const r of level.runs) {
        if (totalOf(r.errors)) failures.push(`${m.mode}: ${totalOf(r.errors)} error(s) on ${r.hop} at ${level.sessions} sessions`);
        if (r.stored_calls !== undefined && r.stored_calls !== r.calls_ok)
          failures.push(`${m.mode}: the proxy stored ${r.stored_calls} of ${r.calls_ok} answered calls at ${level.sessions} sessions`);
      }
      if (o.quick) continue;
      if (level.sessions === 1000 || level === m.load[0]) {
        if (level.cpu_ratio > t.maxCpuRatio)
          failures.push(
            `${m.mode}: CPU per call ${level.cpu_ratio}x the pass-through's at ${level.sessions} sessions (target ${t.maxCpuRatio}x)`,
          );
        if (level.added_p99.ratio > t.maxAddedP99Ratio)
          failures.push(
            `${m.mode}: added p99 ${level.added_p99.ratio}x the pass-through's at ${level.sessions} (target ${t.maxAddedP99Ratio}x)`,
          );
      }
    }
    for (const row of m.sizes) {
      for (const r of row.runs)
        if (totalOf(r.errors)) failures.push(`${m.mode}: ${totalOf(r.errors)} error(s) on ${r.hop} at ${row.prompt_tokens} tokens`);
      if (!o.quick && row.cpu_ratio > t.maxSizeCpuRatio)
        failures.push(
          `${m.mode}: CPU per call ${row.cpu_ratio}x the pass-through's at ${row.prompt_tokens} tokens (target ${t.maxSizeCpuRatio}x)`,
        );
    }
    if (!o.quick && m.ramp.steps.length && (m.ramp.share === null || m.ramp.share < t.minRateShare))
      failures.push(
        `${m.mode}: the proxy sustains ${m.ramp.ceiling.proxy ?? 'no'} calls/s, the pass-through ${m.ramp.ceiling.passthrough ?? 'no'} (target: at least ${t.minRateShare} of it)`,
      );
  }
  return failures;
}

export function formatReport(r: HotPathReport): string {
  const lines: string[] = [];
  for (const m of r.modes) {
    lines.push(`\n== ${m.mode} mode ==`);
    if (m.load.length) {
      lines.push(
        'sessions  CPU ms/call pipe/pt/proxy  CPU ratio  added p50 pt/proxy (ratio)  added p99 pt/proxy (ratio)  errors  /health p99 proxy',
      );
      for (const l of m.load) {
        const g = (h: string) => l.runs.find((x) => x.hop === h)!;
        const errors = l.runs.map((x) => totalOf(x.errors)).join('/');
        lines.push(
          `${String(l.sessions).padEnd(9)} ${g('pipe').cpu_ms_per_call} / ${g('passthrough').cpu_ms_per_call} / ${g('proxy').cpu_ms_per_call}`.padEnd(
            42,
          ) +
            `${l.cpu_ratio}x`.padEnd(11) +
            `${l.added_p50.passthrough} / ${l.added_p50.proxy} (${l.added_p50.ratio}x)`.padEnd(28) +
            `${l.added_p99.passthrough} / ${l.added_p99.proxy} (${l.added_p99.ratio}x)`.padEnd(28) +
            `${errors} `.padEnd(11) +
            String(g('proxy').health_p99_ms) +
            (l.baseline_cpu_ratio !== undefined
              ? `   baseline: ${g('baseline').cpu_ms_per_call} CPU ms/call (${l.baseline_cpu_ratio}x)`
              : ''),
        );
      }
    }
    if (m.sizes.length) {
      lines.push('prompt tokens  CPU ms/call pipe/pt/proxy  CPU ratio');
      for (const s of m.sizes) {
        const g = (h: string) => s.runs.find((x) => x.hop === h)!;
        lines.push(
          `${String(s.prompt_tokens).padEnd(14)} ${g('pipe').cpu_ms_per_call} / ${g('passthrough').cpu_ms_per_call} / ${g('proxy').cpu_ms_per_call}`.padEnd(
            42,
          ) +
            `${s.cpu_ratio}x` +
            (s.baseline_cpu_ratio !== undefined ? `   baseline: ${g('baseline').cpu_ms_per_call} (${s.baseline_cpu_ratio}x)` : ''),
        );
      }
    }
    if (m.ramp.steps.length)
      lines.push(
        `highest sustained rate: pass-through ${m.ramp.ceiling.passthrough ?? '-'} calls/s, proxy ${m.ramp.ceiling.proxy ?? '-'} calls/s (share ${m.ramp.share ?? '-'})`,
      );
  }
  lines.push(r.pass ? '\nPASS' : `\nFAIL\n${r.failures.map((f) => `  - ${f}`).join('\n')}`);
  return lines.join('\n');
}

function intList(text: string, name: string): number[] {
  const out = text.split(',').map((p) => Number(p.trim()));
  if (out.some((n) => !Number.isInteger(n) || n <= 0))
    throw new Error(`--${name} must be a comma-separated list of positive integers, got '${text}'`);
  return out;
}

/** A baseline hop runs: another build, or this one with other Node flags. */
function hasBaseline(o: Pick<HotPathOptions, 'baselineCli' | 'baselineNodeArgs'>): boolean {
  return o.baselineCli !== undefined || o.baselineNodeArgs !== undefined;
}

export function parseHotPathArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): HotPathOptions {
  const { values } = parseArgs({
    args: argv,
    options: {
      quick: { type: 'boolean', default: env.BENCH_QUICK === '1' },
      modes: { type: 'string', default: 'chat,token-in' },
      sections: { type: 'string', default: 'load,sizes,ramp' },
      levels: { type: 'string' },
      rounds: { type: 'string' },
      'think-ms': { type: 'string', default: '500,1500' },
      turns: { type: 'string', default: '3' },
      sizes: { type: 'string' },
      'ramp-seconds': { type: 'string' },
      'ramp-start': { type: 'string' },
      'ramp-factor': { type: 'string', default: '1.5' },
      profile: { type: 'boolean', default: false },
      'proxy-from-source': { type: 'boolean', default: false },
      'baseline-cli': { type: 'string' },
      'proxy-node-arg': { type: 'string', multiple: true, default: [] },
      'baseline-node-arg': { type: 'string', multiple: true },
      out: { type: 'string', default: join(ROOT, 'bench-results', 'hot-path.json') },
    },
  });
  const quick = values.quick === true;
  const modes = values.modes.split(',').map((m) => m.trim());
  for (const m of modes) if (m !== 'chat' && m !== 'token-in') throw new Error(`--modes: '${m}' is not chat or token-in`);
  const sections = values.sections.split(',').map((s) => s.trim());
  for (const s of sections) if (!['load', 'sizes', 'ramp'].includes(s)) throw new Error(`--sections: '${s}' is not load, sizes or ramp`);
  const factor = Number(values['ramp-factor']);
  if (!(factor > 1)) throw new Error(`--ramp-factor must be above 1, got '${values['ramp-factor']}'`);
  return {
    quick,
    modes: modes as Mode[],
    sections: sections as Section[],
    levels: intList(values.levels ?? (quick ? '16,32' : '1000,2000'), 'levels'),
    thinkMs: values['think-ms'],
    rounds: intList(values.rounds ?? (quick ? '1' : '2'), 'rounds')[0]!,
    turns: intList(values.turns, 'turns')[0]!,
    sizes: intList(values.sizes ?? (quick ? '1000,8000' : '1000,8000,32000'), 'sizes'),
    rampSeconds: intList(values['ramp-seconds'] ?? (quick ? '2' : '8'), 'ramp-seconds')[0]!,
    rampStart: intList(values['ramp-start'] ?? (quick ? '20' : '40'), 'ramp-start')[0]!,
    rampFactor: factor,
    profile: values.profile === true,
    proxyFromSource: values['proxy-from-source'] === true,
    baselineCli: values['baseline-cli'],
    proxyNodeArgs: values['proxy-node-arg'],
    baselineNodeArgs: values['baseline-node-arg'],
    out: values.out,
    log: (line) => process.stderr.write(`${line}\n`),
  };
}

if (process.argv[1]?.endsWith('hot-path.ts')) {
  (async () => {
    const options = parseHotPathArgs(process.argv.slice(2));
    const report = await runHotPath(options);
    mkdirSync(dirname(options.out), { recursive: true });
    const withoutSamples = (key: string, value: unknown) => (key === 'samples' || key === 'health_samples' ? undefined : value);
    writeFileSync(options.out, `${JSON.stringify(report, withoutSamples, 2)}\n`);
    process.stdout.write(
      `\nhot path (${report.host.cpus} cores, load ${report.host.load_1m_start} -> ${report.host.load_1m_end})${formatReport(report)}\nJSON: ${options.out}\n`,
    );
    process.exitCode = report.pass ? 0 : 1;
  })().catch((err: unknown) => {
    process.stderr.write(`hot-path: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 2;
  });
}
