// Local-process backend: the reference harness and machines without Docker. A per-rollout folder
// stands in for the container: app/ (the workdir), home/, logs/, tests/. There is no isolation: the
// harness runs as the lab's user on the host's network and reaches the proxy's loopback port (its
// admin routes stay behind the lab's admin key), the engine and every other loopback service, so
// results say `isolation: none` and it is for trusted tasks and policies only. It builds no image: an environment/Dockerfile is emulated only for
// FROM, WORKDIR, ENV and COPY; anything else (RUN, ...) needs the Docker backend.
import { spawn } from 'node:child_process';
import { appendFileSync, cpSync, existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join, posix } from 'node:path';
import type { HarborTask } from '../tasks/task.js';
import { TaskError } from '../tasks/task.js';
import {
  OUTPUT_TAIL,
  SandboxError,
  type ExecOptions,
  type ExecResult,
  type SandboxStatus,
  type Sandbox,
  type SandboxPaths,
  type SandboxRuntime,
  type SandboxSpec,
} from './runtime.js';

interface LocalImage {
  workdir: string;
  env: Record<string, string>;
  copies: { src: string; dest: string }[];
}

/** The subset of a Dockerfile the local backend can honour, or a TaskError naming the line. */
export function emulateDockerfile(task: HarborTask): LocalImage {
  const out: LocalImage = { workdir: task.environment.workdir ?? '/app', env: {}, copies: [] };
  const file = task.environment.dockerfile;
  if (!file) return out;
  const lines = readFileSync(file, 'utf8')
    .replace(/\\\r?\n/g, ' ')
    .split(/\r?\n/);
  lines.forEach((raw, i) => {
    const line = raw.trim();
    if (!line || line.startsWith('#')) return;
    const [instr, ...rest] = line.split(/\s+/);
    const args = rest.join(' ');
    switch (instr!.toUpperCase()) {
      case 'FROM':
      case 'LABEL':
      case 'CMD':
      case 'ENTRYPOINT':
        return;
      case 'WORKDIR':
        if (!task.environment.workdir) out.workdir = posix.resolve(out.workdir, args);
        return;
      case 'ENV': {
        const m = /^(\S+?)(?:=|\s+)(.*)$/.exec(args);
        if (m) out.env[m[1]!] = m[2]!.replace(/^"(.*)"$/, '$1');
        return;
      }
      case 'COPY':
      case 'ADD': {
        const parts = rest.filter((p) => !p.startsWith('--'));
        const dest = parts.pop()!;
        for (const src of parts) out.copies.push({ src: join(task.environment.contextDir, src), dest: posix.resolve(out.workdir, dest) });
        return;
      }
      default:
        throw new TaskError(
          `${task.name}/environment/Dockerfile`,
          `line ${i + 1}`,
          `${instr} cannot run in the local sandbox (it only emulates FROM, WORKDIR, ENV and COPY); use --sandbox docker`,
        );
    }
  });
  return out;
}

export class LocalRuntime implements SandboxRuntime {
  readonly kind = 'local' as const;
  readonly needsSessionSocket = false;
  private readonly owned = new Set<LocalSandbox>();

  async prepareImage(task: HarborTask): Promise<string> {
    emulateDockerfile(task); // fail early on what cannot be emulated
    return 'local';
  }

  async create(spec: SandboxSpec): Promise<Sandbox> {
    const image = emulateDockerfile(spec.task);
    const root = join(spec.hostLogsDir, 'sandbox');
    const paths: SandboxPaths = {
      workdir: join(root, 'app'),
      home: join(root, 'home'),
      logs: spec.hostLogsDir,
      tests: join(root, 'tests'),
      binDir: join(root, 'bin'),
      harnesses: join(root, 'harnesses'),
    };
    for (const d of [
      paths.workdir,
      paths.home,
      paths.binDir,
      join(paths.logs, 'agent'),
      join(paths.logs, 'verifier'),
      join(paths.logs, 'artifacts'),
    ])
      mkdirSync(d, { recursive: true });
    for (const m of spec.mounts) {
      const target = this.mapMount(m.container, paths);
      if (target && !existsSync(target)) {
        mkdirSync(dirname(target), { recursive: true });
        symlinkSync(m.host, target);
      }
    }
    for (const c of image.copies) {
      const rel = posix.relative(image.workdir, c.dest);
      if (rel.startsWith('..'))
        throw new TaskError(
          `${spec.task.name}/environment/Dockerfile`,
          'COPY',
          `destination ${c.dest} is outside the workdir ${image.workdir}; the local sandbox cannot place it`,
        );
      const target = join(paths.workdir, rel);
      mkdirSync(c.dest.endsWith('/') ? target : dirname(target), { recursive: true });
      cpSync(c.src, c.dest.endsWith('/') ? join(target, posix.basename(c.src)) : target, { recursive: true });
    }
    const sandbox = new LocalSandbox(
      `local-${process.pid}-${Date.now().toString(36)}`,
      paths,
      spec.model.proxyUrl,
      { ...image.env, ...spec.env },
      root,
    );
    this.owned.add(sandbox);
    return sandbox;
  }

  private mapMount(container: string, paths: SandboxPaths): string | undefined {
    if (container.startsWith('/opt/harness-lab/harnesses')) return paths.harnesses;
    if (container.startsWith('/opt/harness-lab/bin/')) return join(paths.binDir, posix.basename(container));
    return undefined;
  }

  async cleanupStale(): Promise<string[]> {
    return []; // process groups die with their parent's kill; folders are the rollout record
  }

  async removeOwned(): Promise<void> {
    await Promise.all([...this.owned].map((s) => s.kill()));
    this.owned.clear();
  }
}

class LocalSandbox implements Sandbox {
  readonly kind = 'local' as const;
  readonly isolation = 'none' as const;
  private readonly running = new Set<number>();

  constructor(
    readonly id: string,
    readonly paths: SandboxPaths,
    readonly modelUrl: string,
    private readonly baseEnv: Record<string, string>,
    private readonly root: string,
  ) {}

  exec(script: string, opts: ExecOptions = {}): Promise<ExecResult> {
    const t0 = Date.now();
    const env = {
      PATH: `${this.paths.binDir}:${process.env.PATH ?? '/usr/bin:/bin'}`,
      HOME: this.paths.home,
      // Harbor tasks name /app and /logs; tasks that should also run locally read these instead.
      HARNESS_LAB_WORKDIR: this.paths.workdir,
      HARNESS_LAB_LOGS: this.paths.logs,
      ...this.baseEnv,
      ...opts.env,
    };
    return new Promise((resolve) => {
      const child = spawn('bash', ['-c', script], {
        cwd: opts.cwd ?? this.paths.workdir,
        env,
        detached: true,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      if (child.pid) this.running.add(child.pid);
      let tail = '';
      const onData = (b: Buffer) => {
        tail = (tail + b.toString('utf8')).slice(-OUTPUT_TAIL);
        if (opts.logFile) appendFileSync(opts.logFile, b);
      };
      child.stdout.on('data', onData);
      child.stderr.on('data', onData);
      let timedOut = false;
      const timer = opts.timeoutMs
        ? setTimeout(() => {
            timedOut = true;
            this.killGroup(child.pid);
          }, opts.timeoutMs)
        : undefined;
      child.on('error', (err) => {
        tail += `\n${err.message}`;
      });
      child.on('close', (code) => {
        clearTimeout(timer);
        if (child.pid) this.running.delete(child.pid);
        resolve({ exitCode: timedOut ? null : code, timedOut, output: tail, ms: Date.now() - t0 });
      });
    });
  }

  private killGroup(pid: number | undefined): void {
    if (!pid) return;
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }

  async writeFile(path: string, content: string): Promise<void> {
    if (!path.startsWith(this.root) && !path.startsWith(this.paths.logs))
      throw new SandboxError(`${path} is outside the local sandbox ${this.root}`);
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, content);
  }

  async copyDirIn(hostDir: string, path: string): Promise<void> {
    mkdirSync(path, { recursive: true });
    cpSync(hostDir, path, { recursive: true });
  }

  async kill(): Promise<void> {
    for (const pid of this.running) this.killGroup(pid);
  }

  /** A local sandbox is a folder and process groups: it cannot be stopped from outside as a whole. */
  async status(): Promise<SandboxStatus> {
    return { running: true, exitCode: null, oomKilled: false };
  }

  async remove(): Promise<void> {
    await this.kill();
    rmSync(join(this.root, 'harnesses'), { force: true });
  }
}
