// Shared setup for the Docker sandbox tests: a reachable Docker engine (a clear failure, never a skip:
// the test run provisions Docker), the offline base images, temporary tasks and a label-based container census.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Docker from 'dockerode';
import { LABEL, connectDocker } from '../../src/sandbox/docker-client.js';
import { ensureBaseImages } from '../../src/sandbox/images.js';
import { harnessEntry, harnessNames } from '../../src/harness/registry.js';

export const REPO = join(__dirname, '..', '..');
export const EXAMPLES = join(REPO, 'examples', 'tasks');

let ready: Promise<Docker> | undefined;

/** Docker with the base images; the error says how to get Docker when it is not there. */
export function dockerReady(): Promise<Docker> {
  ready ??= (async () => {
    let docker: Docker;
    try {
      docker = await connectDocker();
    } catch (err) {
      assert.fail(
        `the sandbox integration tests need a running Docker engine (\`npm test\` as root installs docker.io and starts dockerd, see scripts/provision.ts): ${(err as Error).message}`,
      );
    }
    await ensureBaseImages(docker);
    return docker;
  })();
  return ready;
}

/** A copy of an example task with its policy replaced (e.g. one that sleeps forever). */
export function taskWithPolicy(example: string, policy: unknown): string {
  const dir = join(mkdtempSync(join(tmpdir(), 'hl-sbx-task-')), example);
  cpSync(join(EXAMPLES, example), dir, { recursive: true });
  writeFileSync(join(dir, 'policy.json'), JSON.stringify(policy));
  // Batches too follow this policy, not the example's sampling one (policy-engine.ts batchPolicyFile).
  rmSync(join(dir, 'policy.sampling.json'), { force: true });
  return dir;
}

export const SLEEP_POLICY = { name: 'sleeper', turns: [{ call: { tool: 'bash', input: 'sleep 600' } }], fallback: { say: 'Done.' } };

export function outDir(): string {
  return mkdtempSync(join(tmpdir(), 'hl-sbx-out-'));
}

/** Lab sandboxes (any state) whose owner label is `<host>/<pid>`. */
export async function containersOf(docker: Docker, pid: number): Promise<Docker.ContainerInfo[]> {
  const all = await docker.listContainers({ all: true, filters: JSON.stringify({ label: [LABEL.owner] }) });
  return all.filter((c) => c.Labels[LABEL.owner]?.endsWith(`/${pid}`));
}

export interface CliRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** `harness-lab ...` from source; `onStart` sees the child (e.g. to signal it). */
export function cli(
  args: string[],
  opts: { env?: NodeJS.ProcessEnv; onStart?: (pid: number) => void; timeoutMs?: number } = {},
): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(REPO, 'src', 'cli', 'main.ts'), ...args], {
      cwd: REPO,
      env: { ...process.env, ...opts.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 600_000);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
    if (child.pid) opts.onStart?.(child.pid);
  });
}

export async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > end) assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Every real CLI in the registry (the reference harness has its own test), or the narrowed list. */
export function realHarnesses(): string[] {
  const only = process.env.HARNESS_LAB_SANDBOX_HARNESSES;
  const all = harnessNames().filter((n) => n !== 'react');
  if (!only) return all;
  const picked = only
    .split(',')
    .map((n) => n.trim())
    .filter(Boolean);
  for (const n of picked) harnessEntry(n); // throws naming the known harnesses
  return picked;
}
