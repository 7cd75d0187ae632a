// The harness registry: one declarative entry per harness the sandbox can run. It builds on the
// wiring table (wiring.ts: package, pin, argv, env, config files) and adds what a sandbox needs:
// how the harness gets into the container, where its native log lives and how that becomes ATIF.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DialectName } from '../capture/types.js';
import type { AtifTrajectory } from './atif.js';
import { parseAtif } from './atif.js';
import { claudeToAtif, codexSessionsToAtif, geminiSessionsToAtif, opencodeEventsToAtif, piSessionsToAtif, qwenChatsToAtif } from './native-atif.js';
import { harnessCacheRoot } from './run-local.js';
import { HARNESSES, isHarnessName, wireHarness, type HarnessName, type WiredFile } from './wiring.js';

export type HarnessInstall =
  /** Installed by scripts/harness-install.sh into the host cache; mounted read-only into the sandbox. */
  | { kind: 'npm-cache'; package: string; version: string; bin: string }
  /** Our own script, bundled to one file and mounted next to node. */
  | { kind: 'bundled-script'; file: string };

export interface HarnessEntry {
  name: string;
  /** Its row in the wiring table, for the npm harnesses. */
  wiring: HarnessName | undefined;
  dialect: DialectName;
  install: HarnessInstall;
  /** The harness's stdout and stderr, under /logs/agent/. */
  nativeLog: string;
  /** Folders under the harness's HOME copied to /logs/agent/native/ after the run (session files). */
  collect: string[];
  /** How the ATIF trajectory comes about: written by the harness, converted from native logs, or none. */
  atif: 'self' | 'converted' | 'none';
  /** Host-side conversion of /logs/agent (as a host folder) to ATIF; undefined when nothing was found. */
  toAtif(agentDir: string): AtifTrajectory | undefined;
  /** Argument tweaks on top of the wiring (e.g. machine-readable output for the ATIF conversion). */
  argv?(argv: string[]): string[];
  /** Extra environment on top of the wiring. */
  env?: Record<string, string>;
}

export class UnknownHarnessError extends Error {}

/** Where `harness-lab` finds things inside the sandbox. */
export interface LaunchContext {
  /** The harness cache root as seen inside the sandbox. */
  harnessesDir: string;
  /** Directory with node (and the bundled reference harness) inside the sandbox. */
  binDir: string;
  home: string;
  workdir: string;
  logsDir: string;
  proxyUrl: string;
  sessionKey: string;
  model: string;
  instruction: string;
}

export interface LaunchPlan {
  script: string;
  env: Record<string, string>;
  files: WiredFile[];
}

/** One bash word: bare when safe, else single-quoted with embedded quotes escaped. */
export function shellQuote(arg: string): string {
  return /^[A-Za-z0-9_\-./:=@%+,]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`;
}
const quote = shellQuote;

function readTrajectory(path: string): AtifTrajectory | undefined {
  if (!existsSync(path)) return undefined;
  return parseAtif(readFileSync(path, 'utf8'), path);
}

function npmEntry(name: string, wiring: HarnessName, extra: Pick<HarnessEntry, 'collect' | 'atif' | 'toAtif'> & Partial<Pick<HarnessEntry, 'argv' | 'env'>>): HarnessEntry {
  const spec = HARNESSES[wiring];
  return {
    name,
    wiring,
    dialect: spec.dialect,
    install: { kind: 'npm-cache', package: spec.package, version: spec.version, bin: spec.bin },
    nativeLog: `${name}.txt`,
    ...extra,
  };
}

/** Replace the value after a flag, or append flag and value. */
function setFlag(argv: string[], flag: string, value: string): string[] {
  const i = argv.indexOf(flag);
  if (i >= 0) return [...argv.slice(0, i + 1), value, ...argv.slice(i + 2)];
  return beforeDashDash(argv, flag, value);
}

function beforeDashDash(argv: string[], ...flags: string[]): string[] {
  const i = argv.indexOf('--');
  return i >= 0 ? [...argv.slice(0, i), ...flags, ...argv.slice(i)] : [...argv, ...flags];
}

const ENTRIES: HarnessEntry[] = [
  {
    name: 'react',
    wiring: undefined,
    dialect: 'openai_chat',
    install: { kind: 'bundled-script', file: 'react-harness.js' },
    nativeLog: 'react.txt',
    collect: [],
    atif: 'self',
    toAtif: (dir) => readTrajectory(join(dir, 'trajectory.json')),
  },
  npmEntry('codex', 'codex', {
    // `--json` prints events; the per-call token counts are in the session rollout files.
    argv: (argv) => beforeDashDash(argv, '--json'),
    collect: ['.codex/sessions'],
    atif: 'converted',
    toAtif: (dir) => codexSessionsToAtif(join(dir, 'native', 'sessions')),
  }),
  npmEntry('claude-code', 'claude-code', {
    // stream-json (which needs --verbose) has one event per assistant message, with its usage.
    argv: (argv) => beforeDashDash(setFlag(argv, '--output-format', 'stream-json'), '--verbose'),
    collect: ['.claude/projects'],
    atif: 'converted',
    toAtif: (dir) => claudeToAtif(dir),
  }),
  npmEntry('opencode', 'opencode', {
    argv: (argv) => setFlag(argv, '--format', 'json'),
    collect: [],
    atif: 'converted',
    toAtif: (dir) => opencodeEventsToAtif(join(dir, 'opencode.txt')),
  }),
  npmEntry('gemini-cli', 'gemini-cli', {
    collect: ['.gemini/tmp'],
    atif: 'converted',
    toAtif: (dir) => geminiSessionsToAtif(join(dir, 'native', 'tmp')),
  }),
  npmEntry('qwen-code', 'qwen-code', {
    collect: ['.qwen/projects'],
    atif: 'converted',
    toAtif: (dir) => qwenChatsToAtif(join(dir, 'native', 'projects')),
  }),
  npmEntry('pi', 'pi-openai-completions', {
    argv: (argv) => [...argv.slice(0, 1), '--session-dir', '/logs/agent/native/pi-sessions', ...argv.slice(1)],
    collect: [],
    atif: 'converted',
    toAtif: (dir) => piSessionsToAtif(join(dir, 'native', 'pi-sessions')),
  }),
];

export const HARNESS_REGISTRY: ReadonlyMap<string, HarnessEntry> = new Map(ENTRIES.map((e) => [e.name, e]));

export function harnessNames(): string[] {
  return [...HARNESS_REGISTRY.keys()];
}

export function harnessEntry(name: string): HarnessEntry {
  const entry = HARNESS_REGISTRY.get(name);
  if (entry) return entry;
  const hint = isHarnessName(name) ? ` ('${name}' is a wiring-table variant; the sandbox runs ${harnessNames().join(', ')})` : '';
  throw new UnknownHarnessError(`unknown harness '${name}'; known harnesses: ${harnessNames().join(', ')}${hint}`);
}

/** The npm package folder inside the harness cache, relative to the cache root. */
export function cacheFolder(install: Extract<HarnessInstall, { kind: 'npm-cache' }>): string {
  return `${install.package}@${install.version}`;
}

/** Checks the harness is installed on the host; the error names the install command. */
export function assertInstalled(entry: HarnessEntry, cacheRoot = harnessCacheRoot()): void {
  if (entry.install.kind !== 'npm-cache') return;
  const bin = join(cacheRoot, cacheFolder(entry.install), 'node_modules', '.bin', entry.install.bin);
  if (!existsSync(bin)) throw new UnknownHarnessError(`harness '${entry.name}' (${entry.install.package}@${entry.install.version}) is not installed under ${cacheRoot}; run \`bash scripts/harness-install.sh ${entry.wiring}\``);
}

/** The bash script, environment and config files that launch one harness in a sandbox. */
export function launchPlan(entry: HarnessEntry, ctx: LaunchContext): LaunchPlan {
  const nativeLogDir = `${ctx.logsDir}/agent`;
  if (entry.install.kind === 'bundled-script') {
    return {
      script: `exec node ${quote(`${ctx.binDir}/${entry.install.file}`)} ${quote(ctx.instruction)} < /dev/null`,
      env: {
        HARNESS_LAB_BASE_URL: `${ctx.proxyUrl}/v1`,
        HARNESS_LAB_API_KEY: ctx.sessionKey,
        HARNESS_LAB_MODEL: ctx.model,
        HARNESS_LAB_ATIF: `${nativeLogDir}/trajectory.json`,
      },
      files: [],
    };
  }
  const wired = wireHarness(entry.wiring!, { proxyUrl: ctx.proxyUrl, sessionKey: ctx.sessionKey, model: ctx.model, home: ctx.home, workdir: ctx.workdir, instruction: ctx.instruction });
  let argv = entry.argv ? entry.argv(wired.argv) : wired.argv;
  argv = argv.map((a) => a.replace('/logs/agent', nativeLogDir));
  const bin = `${ctx.harnessesDir}/${cacheFolder(entry.install)}/node_modules/.bin/${entry.install.bin}`;
  const collect = entry.collect.map((p) => `if [ -e ${quote(`${ctx.home}/${p}`)} ]; then mkdir -p ${quote(`${nativeLogDir}/native`)} && cp -r ${quote(`${ctx.home}/${p}`)} ${quote(`${nativeLogDir}/native/`)}; fi`);
  // The harness's exit code is the script's; its session files are copied out either way.
  const script = [`${[quote(bin), ...argv.slice(1).map(quote)].join(' ')} < /dev/null`, 'status=$?', ...collect, 'exit $status'].join('\n');
  return { script, env: { TERM: 'dumb', NO_COLOR: '1', CI: '1', NO_PROXY: '127.0.0.1,localhost,::1', ...wired.env, ...entry.env }, files: wired.files };
}
