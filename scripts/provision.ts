// What the test suite needs on this machine beyond `npm ci`, installed or started before the tests run
// (scripts/run-tests.mjs runs this first), so the README's `npm ci && npm test` passes on a fresh
// Debian machine with Node 20. Idempotent: everything present costs a second of checks and nothing
// else. apt-get and dockerd need root; without root this says what to run, and the run fails (the
// tests that need a missing prerequisite fail naming it; none is skipped).
//
//   node --import tsx scripts/provision.ts [--plan] [unit|integration|e2e ...]
//     --plan   only report what is present and what would be installed or started (exit 1 if anything is missing)
// Exit code: 0 when every prerequisite of the given folders is present afterwards, 1 otherwise.
import { spawn } from 'node:child_process';
import { accessSync, closeSync, constants, existsSync, openSync, readdirSync, readFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { HARNESSES } from '../src/harness/wiring.js';
import { harnessCacheRoot, resolveHarnessBin } from '../src/harness/run-local.js';
import Docker from 'dockerode';
import { connectDocker, dockerEndpoint } from '../src/sandbox/docker-client.js';
import { baseImagesReady, cachedRootfs, imageCacheDir } from '../src/sandbox/images.js';
import { chromiumPath, codeServerBin, codeServerDir, CODE_SERVER_VERSION } from '../test/e2e/code-server.js';

export const FOLDERS = ['unit', 'integration', 'e2e'] as const;
export type Folder = (typeof FOLDERS)[number];
/** The folders whose tests run harnesses in Docker sandboxes: the integration tests, and the e2e tests of the installed .vsix. */
const SANDBOX_TESTS: readonly Folder[] = ['integration', 'e2e'];

export type DockerState = { ok: true } | { ok: false; reason: string };

/** Everything provisioning reads from or does to the machine (a fake in the unit tests). */
export interface Machine {
  readonly root: boolean;
  readonly nodeMajor: number;
  readonly env: NodeJS.ProcessEnv;
  /** An executable on PATH or in the sbin directories (non-root PATHs often lack /usr/sbin). */
  has(command: string): boolean;
  exists(path: string): boolean;
  docker(): Promise<DockerState>;
  /** Live dockerd processes. */
  dockerdPids(): number[];
  alive(pid: number): boolean;
  imagesReady(): Promise<boolean>;
  rootfsCached(): boolean;
  /** package@version of every harness CLI not installed in the harness cache. */
  missingHarnesses(): string[];
  codeServerReady(): boolean;
  /** Runs a command with the output shown; resolves with its exit code. */
  run(command: string, args: string[]): Promise<number>;
  /** Starts dockerd detached, its output in a log file. */
  startDockerd(): { pid: number; log: string };
  tail(file: string): string;
  sleep(ms: number): Promise<void>;
  say(line: string): void;
}

const REPO = join(__dirname, '..');

export const PATHS = {
  bundle: ['dist/cli.js', 'dist/extension.js', 'dist/webview/viewer.js'].map((f) => join(REPO, f)),
  gssapiHeader: '/usr/include/gssapi/gssapi.h',
  dockerdLog: '/var/log/harness-lab-dockerd.log',
};

export interface Prerequisite {
  id: string;
  /** Which tests need it, and why, in the user's terms. */
  why: string;
  folders: readonly Folder[];
  /** Ids of prerequisites that must be present before this one can be installed. */
  after?: readonly string[];
  /** Debian packages still to install (apt prerequisites only; batched into one apt-get). */
  aptMissing?(m: Machine): Promise<string[]>;
  present(m: Machine): Promise<boolean>;
  /** Why it cannot be installed on this machine, with what to run instead; undefined when it can. */
  blocker?(m: Machine): Promise<string | undefined>;
  /** What installing it runs, in words (for the plan). */
  action?: string;
  install?(m: Machine): Promise<void>;
}

/** A prerequisite met by Debian packages: each package with how to tell it is already there. */
function aptPrerequisite(
  p: Pick<Prerequisite, 'id' | 'why' | 'folders'> & { packages(m: Machine): [string, () => boolean | Promise<boolean>][] },
): Prerequisite {
  const aptMissing = async (m: Machine) => {
    const missing: string[] = [];
    for (const [pkg, present] of p.packages(m)) if (!(await present())) missing.push(pkg);
    return missing;
  };
  return { id: p.id, why: p.why, folders: p.folders, aptMissing, present: async (m) => (await aptMissing(m)).length === 0 };
}

export const PREREQUISITES: readonly Prerequisite[] = [
  aptPrerequisite({
    id: 'git',
    why: "the tiny test model's tokenizer and chat template are read from node-llama-cpp's llama.cpp git bundle (engine tests)",
    folders: ['unit', 'integration', 'e2e'],
    packages: (m) => [['git', () => m.has('git')]],
  }),
  aptPrerequisite({
    id: 'docker.io',
    why: 'the sandbox tests run real harnesses in Docker containers',
    folders: SANDBOX_TESTS,
    packages: (m) => [['docker.io', async () => m.has('dockerd') || (await m.docker()).ok]],
  }),
  aptPrerequisite({
    id: 'debootstrap',
    why: 'the offline sandbox base image is a Debian minbase built with debootstrap (no image registry)',
    folders: SANDBOX_TESTS,
    packages: (m) => [
      ['debootstrap', async () => m.has('debootstrap') || m.rootfsCached() || ((await m.docker()).ok && (await m.imagesReady()))],
    ],
  }),
  aptPrerequisite({
    id: 'linux-perf',
    why: "the benches' --perf profiles record CPU with Linux perf (the V8 profiler samples wall-clock time), and their test runs it",
    folders: ['integration'],
    packages: (m) => [['linux-perf', () => m.has('perf')]],
  }),
  aptPrerequisite({
    id: 'chromium',
    why: "the webview and workbench e2e tests drive Debian's chromium",
    folders: ['e2e'],
    packages: (m) => [['chromium', () => m.exists(chromiumPath())]],
  }),
  aptPrerequisite({
    id: 'code-server build tools',
    why: `installing code-server ${CODE_SERVER_VERSION} compiles native modules (kerberos needs GSSAPI headers) and seeds ripgrep from Debian's`,
    folders: ['e2e'],
    packages: (m) =>
      m.codeServerReady()
        ? []
        : [
            ['ripgrep', () => m.has('rg')],
            ['libkrb5-dev', () => m.exists(PATHS.gssapiHeader)],
            ['make', () => m.has('make')],
            ['g++', () => m.has('g++')],
            ['python3', () => m.has('python3')],
          ],
  }),
  {
    id: 'dockerd',
    why: 'the sandbox tests need a running Docker engine',
    folders: SANDBOX_TESTS,
    after: ['docker.io'],
    present: async (m) => (await m.docker()).ok,
    async blocker(m) {
      const state = await m.docker();
      const reason = state.ok ? '' : state.reason;
      if (m.env.DOCKER_HOST) return `DOCKER_HOST=${m.env.DOCKER_HOST} does not answer (${reason}); start that daemon or unset DOCKER_HOST`;
      if (/EACCES|permission denied/i.test(reason))
        return `${dockerEndpoint(m.env)} refuses this user (${reason}); add the user to the docker group (\`usermod -aG docker $USER\`, then log in again) or run as root`;
      if (!m.root && m.dockerdPids().length === 0)
        return 'starting dockerd needs root; run as root `dockerd > /var/log/dockerd.log 2>&1 &` (or `systemctl start docker`)';
      return undefined;
    },
    action: 'start dockerd in the background (or wait for the one already starting)',
    install: (m) => ensureDockerd(m),
  },
  {
    id: 'base images',
    why: 'the sandbox tests build task images FROM harness-lab/base:bookworm and base-node:bookworm (no image is ever pulled)',
    folders: SANDBOX_TESTS,
    after: ['dockerd', 'debootstrap'],
    present: async (m) => (await m.docker()).ok && (await m.imagesReady()),
    blocker: async (m) =>
      !m.root && !m.rootfsCached()
        ? `the first build runs debootstrap, which needs root; run \`node --import tsx src/cli/main.ts images\` as root once (later builds reuse ${imageCacheDir(m.env)})`
        : undefined,
    action: '`harness-lab images` (debootstrap once, about a minute; later builds take seconds)',
    install: (m) => runOrThrow(m, process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'images', '--verbose']),
  },
  {
    id: 'harness CLIs',
    why: 'the real-harness tests run every pinned harness CLI (Codex, Claude Code, opencode, Gemini CLI, Qwen Code, pi) against the proxy',
    folders: SANDBOX_TESTS,
    present: async (m) => m.missingHarnesses().length === 0,
    action: '`bash scripts/harness-install.sh` (npm packages into the harness cache, a few minutes)',
    install: (m) => runOrThrow(m, 'bash', ['scripts/harness-install.sh']),
  },
  {
    id: 'code-server',
    why: `the extension e2e tests run the real extension host in code-server ${CODE_SERVER_VERSION}`,
    folders: ['e2e'],
    after: ['code-server build tools'],
    present: async (m) => m.codeServerReady(),
    blocker: async (m) =>
      m.nodeMajor !== 20 ? `code-server ${CODE_SERVER_VERSION} needs Node 20 (this is Node ${m.nodeMajor})` : undefined,
    action: '`bash scripts/code-server-install.sh` (npm install, about 2-3 minutes)',
    install: (m) => runOrThrow(m, 'bash', ['scripts/code-server-install.sh']),
  },
  {
    id: 'bundle',
    why: 'the report, bundle and webview tests load dist/ as `npm run build` makes it',
    folders: ['unit', 'e2e'],
    present: async (m) => PATHS.bundle.every((f) => m.exists(f)),
    action: '`node esbuild.mjs` (npm run build)',
    install: (m) => runOrThrow(m, process.execPath, ['esbuild.mjs']),
  },
];

async function runOrThrow(m: Machine, command: string, args: string[]): Promise<void> {
  const code = await m.run(command, args);
  if (code !== 0) throw new Error(`\`${[command === process.execPath ? 'node' : command, ...args].join(' ')}\` exited with ${code}`);
}

/** dockerd answering: waits for one that is starting, else starts one; never a second one. */
export async function ensureDockerd(m: Machine, opts: { timeoutMs?: number; pollMs?: number } = {}): Promise<void> {
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const pollMs = opts.pollMs ?? 500;
  if ((await m.docker()).ok) return;
  let running = m.dockerdPids();
  let started: { pid: number; log: string } | undefined;
  if (running.length)
    m.say(
      `dockerd is already running (pid ${running.join(', ')}) but does not answer yet; waiting for it instead of starting a second one`,
    );
  else {
    started = m.startDockerd();
    m.say(`started dockerd (pid ${started.pid}, log ${started.log}); it keeps running after the tests`);
  }
  let last: DockerState = { ok: false, reason: 'not polled' };
  for (let waited = 0; waited <= timeoutMs; waited += pollMs) {
    last = await m.docker();
    if (last.ok) return;
    if (started && !m.alive(started.pid)) {
      // Two runs starting dockerd at once: dockerd's own pid file stops the second; wait for the first.
      const others = m.dockerdPids();
      if (!others.length) throw new Error(`dockerd (pid ${started.pid}) exited; the end of ${started.log}:\n${m.tail(started.log)}`);
      m.say(`the dockerd started here (pid ${started.pid}) exited, another one runs (pid ${others.join(', ')}); waiting for that one`);
      started = undefined;
      running = others;
    }
    await m.sleep(pollMs);
  }
  const who = started ? `the dockerd started here (pid ${started.pid})` : `the running dockerd (pid ${running.join(', ')})`;
  throw new Error(
    `${who} did not answer within ${Math.round(timeoutMs / 1000)} s (${last.reason})${started ? `; the end of ${started.log}:\n${m.tail(started.log)}` : ''}`,
  );
}

export type StepState = 'present' | 'install' | 'missing';

export interface PlanStep {
  prerequisite: Prerequisite;
  state: StepState;
  /** For 'install': what will run. For 'missing': why it cannot be provided here, and what to run. */
  detail: string;
}

export function needed(folders: readonly Folder[]): Prerequisite[] {
  return PREREQUISITES.filter((p) => p.folders.some((f) => folders.includes(f)));
}

/** What is present and what would be installed, without changing anything. */
export async function plan(m: Machine, folders: readonly Folder[]): Promise<PlanStep[]> {
  const steps: PlanStep[] = [];
  for (const p of needed(folders)) steps.push(await evaluate(m, p, steps));
  return steps;
}

async function evaluate(m: Machine, p: Prerequisite, earlier: PlanStep[]): Promise<PlanStep> {
  if (await p.present(m)) return { prerequisite: p, state: 'present', detail: '' };
  const waitingOn = earlier.filter((s) => p.after?.includes(s.prerequisite.id) && s.state !== 'present');
  const blockedBy = (p.after ?? []).filter((id) => waitingOn.some((s) => s.prerequisite.id === id && s.state === 'missing'));
  if (blockedBy.length) return { prerequisite: p, state: 'missing', detail: `needs ${blockedBy.join(' and ')} first` };
  if (p.aptMissing) {
    const pkgs = await p.aptMissing(m);
    if (!m.root)
      return {
        prerequisite: p,
        state: 'missing',
        detail: `installing Debian packages needs root; run as root \`apt-get install -y ${pkgs.join(' ')}\``,
      };
    return { prerequisite: p, state: 'install', detail: `apt-get install ${pkgs.join(' ')}` };
  }
  const blocker = await p.blocker?.(m);
  if (blocker) return { prerequisite: p, state: 'missing', detail: blocker };
  const after = waitingOn.length ? ` (after ${waitingOn.map((s) => s.prerequisite.id).join(', ')})` : '';
  return { prerequisite: p, state: 'install', detail: `${p.action ?? 'install'}${after}` };
}

/**
 * Installs or starts what is missing: one apt-get for every Debian package, then the rest in order,
 * each re-checked first (an earlier step may have provided it). Returns the prerequisites still
 * missing afterwards, each with the reason.
 */
export async function provision(m: Machine, folders: readonly Folder[]): Promise<PlanStep[]> {
  const initial = await plan(m, folders);
  if (initial.every((s) => s.state === 'present')) {
    m.say(`every prerequisite of the ${folders.join(', ')} tests is present (${initial.map((s) => s.prerequisite.id).join(', ')})`);
    return [];
  }
  const aptSteps = initial.filter((s) => s.state === 'install' && s.prerequisite.aptMissing);
  if (aptSteps.length) {
    const pkgs = [...new Set((await Promise.all(aptSteps.map((s) => s.prerequisite.aptMissing!(m)))).flat())];
    m.say(`installing Debian packages with apt-get: ${pkgs.join(' ')}`);
    for (const s of aptSteps) m.say(`  ${s.prerequisite.id}: ${s.prerequisite.why}`);
    const ok = (await m.run('apt-get', ['update', '-q'])) === 0 && (await m.run('apt-get', ['install', '-y', '-q', ...pkgs])) === 0;
    if (!ok) m.say(`apt-get install ${pkgs.join(' ')} failed (its output is above)`);
  }
  const done: PlanStep[] = [];
  for (const p of needed(folders)) {
    let step = await evaluate(m, p, done);
    if (step.state === 'install' && !p.aptMissing) {
      m.say(`${p.id}: ${step.detail} — ${p.why}`);
      try {
        await p.install!(m);
        step = (await p.present(m))
          ? { prerequisite: p, state: 'present', detail: '' }
          : { prerequisite: p, state: 'missing', detail: `still missing after ${p.action ?? 'installing'}` };
      } catch (err) {
        step = { prerequisite: p, state: 'missing', detail: err instanceof Error ? err.message : String(err) };
      }
    } else if (step.state === 'install') {
      step = { prerequisite: p, state: 'missing', detail: `still missing after ${step.detail}` };
    }
    done.push(step);
  }
  const missing = done.filter((s) => s.state === 'missing');
  for (const s of missing)
    m.say(`MISSING ${s.prerequisite.id}: ${s.detail}\n  needed because ${s.prerequisite.why}; those tests will fail until it is there`);
  if (!missing.length) m.say('every prerequisite is present now');
  return missing;
}

export function formatPlan(steps: PlanStep[]): string {
  const width = Math.max(...steps.map((s) => s.prerequisite.id.length));
  return steps
    .map(
      (s) =>
        `${s.prerequisite.id.padEnd(width)}  ${s.state === 'present' ? 'present' : s.state === 'install' ? `would install: ${s.detail}` : `MISSING: ${s.detail}`}`,
    )
    .join('\n');
}

/** The daemon's answer to a ping, with the raw reason when there is none (connectDocker words it for users). */
async function pingDocker(): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      new Docker().ping(),
      new Promise((_r, reject) => (timer = setTimeout(() => reject(new Error('no answer within 5 s')), 5000))),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** The machine this runs on. */
export function realMachine(say: (line: string) => void): Machine {
  const sbin = ['/usr/local/sbin', '/usr/sbin', '/sbin'];
  const dirs = [...(process.env.PATH ?? '').split(delimiter).filter(Boolean), ...sbin];
  const executable = (path: string) => {
    try {
      accessSync(path, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  };
  let dockerAnswered = false;
  return {
    root: process.getuid?.() === 0,
    nodeMajor: Number(process.versions.node.split('.')[0]),
    env: process.env,
    has: (command) => dirs.some((d) => executable(join(d, command))),
    exists: (path) => existsSync(path),
    async docker() {
      // Only an answer is remembered: a daemon that is starting answers on a later poll.
      if (dockerAnswered) return { ok: true };
      try {
        await pingDocker();
        dockerAnswered = true;
        return { ok: true };
      } catch (err) {
        return { ok: false, reason: err instanceof Error ? err.message : String(err) };
      }
    },
    dockerdPids() {
      const pids: number[] = [];
      for (const entry of readdirSync('/proc')) {
        if (!/^\d+$/.test(entry)) continue;
        try {
          if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === 'dockerd') pids.push(Number(entry));
        } catch {
          // the process exited while we looked
        }
      }
      return pids;
    },
    alive(pid) {
      try {
        process.kill(pid, 0);
        return !/^\S+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
      } catch {
        return false;
      }
    },
    async imagesReady() {
      return baseImagesReady(await connectDocker());
    },
    rootfsCached: () => cachedRootfs(imageCacheDir()) !== undefined,
    missingHarnesses() {
      const missing = new Set<string>();
      for (const [name, spec] of Object.entries(HARNESSES)) {
        try {
          resolveHarnessBin(name, harnessCacheRoot());
        } catch {
          missing.add(`${spec.package}@${spec.version}`);
        }
      }
      return [...missing];
    },
    codeServerReady: () => existsSync(codeServerBin()) && existsSync(join(codeServerDir(), '.install-complete')),
    run: (command, args) =>
      new Promise((resolve) => {
        const child = spawn(command, args, {
          cwd: REPO,
          stdio: 'inherit',
          env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive', npm_config_update_notifier: 'false' },
        });
        child.on('error', (err) => {
          say(`${command}: ${err.message}`);
          resolve(127);
        });
        child.on('close', (code) => resolve(code ?? 1));
      }),
    startDockerd() {
      const log = PATHS.dockerdLog;
      const fd = openSync(log, 'a');
      try {
        const child = spawn('dockerd', [], { detached: true, stdio: ['ignore', fd, fd] });
        child.unref();
        if (child.pid === undefined) throw new Error('dockerd could not be started');
        return { pid: child.pid, log };
      } finally {
        closeSync(fd);
      }
    },
    tail: (file) => {
      try {
        return readFileSync(file, 'utf8').split('\n').slice(-40).join('\n');
      } catch (err) {
        return `(${(err as Error).message})`;
      }
    },
    sleep: (ms) => new Promise((r) => setTimeout(r, ms)),
    say,
  };
}

async function main(argv: string[]): Promise<number> {
  const planOnly = argv.includes('--plan');
  const named = argv.filter((a) => a !== '--plan');
  const unknown = named.filter((a) => !(FOLDERS as readonly string[]).includes(a));
  if (unknown.length) {
    process.stderr.write(`provision: unknown test folder(s) ${unknown.join(', ')}; expected ${FOLDERS.join(', ')}\n`);
    return 2;
  }
  const folders = named.length ? (named as Folder[]) : [...FOLDERS];
  const say = (line: string) => process.stdout.write(`${line.replace(/^/gm, '[provision] ')}\n`);
  const m = realMachine(say);
  if (planOnly) {
    const steps = await plan(m, folders);
    process.stdout.write(`${formatPlan(steps)}\n`);
    return steps.every((s) => s.state === 'present') ? 0 : 1;
  }
  const t0 = Date.now();
  const missing = await provision(m, folders);
  say(`done in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  return missing.length ? 1 : 0;
}

if (require.main === module) {
  main(process.argv.slice(2)).then(
    (code) => (process.exitCode = code),
    (err: unknown) => {
      process.stderr.write(`provision: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exitCode = 1;
    },
  );
}
