// The sandbox a rollout runs in: a Docker container (docker.ts) or a local process tree (local.ts).
// Commands are bash scripts; paths are the ones the harness and the verifier see inside the sandbox.
import type { HarborTask } from '../tasks/task.js';

export interface Mount {
  host: string;
  container: string;
  readOnly: boolean;
}

/**
 * What stands between the sandbox and the capture. `no-network`: the container has no network at all
 * and reaches its own session's model routes through a Unix socket (the session socket) and nothing
 * else. `egress`: the same, on a per-rollout network with outbound access that cannot address the
 * host's loopback services. `none`: a local process on the host, which can reach everything the lab's
 * user can (the proxy's admin routes stay behind the lab's admin key, but the engine and every other
 * loopback service are reachable).
 */
export type Isolation = 'none' | 'no-network' | 'egress';

/** How the sandbox reaches its own session's model routes. */
export interface ModelAccess {
  /** The capture proxy's loopback origin: used only by a sandbox that shares the host's network. */
  proxyUrl: string;
  /** Folder holding the session socket `model.sock` (SessionSocket.dir), for runtimes that isolate. */
  socketDir?: string;
}

export interface SandboxSpec {
  task: HarborTask;
  harness: string;
  /** Capture session id: a label only, never placed in the verifier's environment. */
  sessionId: string;
  /** Image from prepareImage (Docker); ignored by the local runtime. */
  image: string;
  /** Host directory of this rollout; the sandbox's /logs/{agent,verifier,artifacts} live under it. */
  hostLogsDir: string;
  /** Read-only extras (the harness cache, the node binary). */
  mounts: Mount[];
  /** The task's [environment].env, already resolved. */
  env: Record<string, string>;
  model: ModelAccess;
  /** Extra labels (a batch's id, group and rollout), so a later lab can find and remove what a dead one left. */
  labels?: Record<string, string>;
}

/** Where things are, as seen from inside the sandbox. */
export interface SandboxPaths {
  workdir: string;
  home: string;
  logs: string;
  tests: string;
  /** Directory on PATH holding `node` (the host binary, mounted or linked). */
  binDir: string;
  /** Where the harness cache root appears. */
  harnesses: string;
}

export interface ExecOptions {
  env?: Record<string, string>;
  cwd?: string;
  /** OS user inside the sandbox (Docker only; the local sandbox runs as the lab's user). */
  user?: string;
  /** Wall clock limit; on expiry the sandbox is killed and the result says timedOut. */
  timeoutMs?: number;
  /**
   * What the wall clock limit stops: the whole sandbox (default), or only this command's process
   * group, so the sandbox lives on for the verifier (a batch's --on-timeout keep).
   */
  onTimeout?: 'kill-sandbox' | 'kill-command';
  /** Host file that receives stdout and stderr as they arrive. */
  logFile?: string;
}

export interface ExecResult {
  exitCode: number | null;
  timedOut: boolean;
  /** The last 64 KiB of combined output. */
  output: string;
  ms: number;
}

export interface Sandbox {
  readonly id: string;
  readonly kind: 'docker' | 'local';
  readonly paths: SandboxPaths;
  readonly isolation: Isolation;
  /** The model endpoint's origin as the harness inside sees it (http://127.0.0.1:PORT, no path). */
  readonly modelUrl: string;
  /** Runs `bash -c script`; the environment is exactly `env` plus PATH and HOME. */
  exec(script: string, opts?: ExecOptions): Promise<ExecResult>;
  writeFile(path: string, content: string): Promise<void>;
  /** Copies a host directory's contents to a sandbox path (the verifier's tests/, after the agent). */
  copyDirIn(hostDir: string, path: string): Promise<void>;
  /** Stops everything running in the sandbox (timeouts, Ctrl-C). */
  kill(): Promise<void>;
  /** Whether the sandbox still runs, and how it ended if not (killed from outside, OOM). */
  status(): Promise<SandboxStatus>;
  remove(): Promise<void>;
}

export interface SandboxStatus {
  running: boolean;
  exitCode: number | null;
  oomKilled: boolean;
}

export interface SandboxRuntime {
  readonly kind: 'docker' | 'local';
  /** Whether create() needs `model.socketDir`: the sandbox cannot reach the host's loopback. */
  readonly needsSessionSocket: boolean;
  /** Builds (or finds) the task's image; returns its tag. */
  prepareImage(task: HarborTask, log?: (line: string) => void): Promise<string>;
  create(spec: SandboxSpec): Promise<Sandbox>;
  /** Removes sandboxes left by lab processes that are gone; returns what was removed. */
  cleanupStale(): Promise<string[]>;
  /** Removes every sandbox this process created (signal handlers). */
  removeOwned(): Promise<void>;
}

export class SandboxError extends Error {}

export const OUTPUT_TAIL = 64 * 1024;

export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
