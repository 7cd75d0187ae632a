// Submit Rollout Batch's work, without vscode: plan the batch in the extension host (so a broken
// task, an unknown harness or a group size below 2 fails at once, naming what is wrong, and nothing
// is written), write its directory into the workspace's batches folder, then run it with the bundled
// CLI (`dist/cli.js batch resume DIR`: the same runner `batch submit` uses) in a child process, so
// dozens of sandboxes, their capture proxy and engine never load the extension host; the lab writes
// the directory, the Batches view reads it, and cancel goes through the runner's own cancel path.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { planBatch, writeBatch, type BatchPlan, type BatchRequest } from '../batch/plan.js';

export interface SubmitRequest {
  /** Task directories. */
  tasks: string[];
  harnesses: string[];
  groupSize: number;
  backend: 'docker' | 'k8s';
  /** The batches folder: the batch directory is `<folder>/<batch id>`. */
  folder: string;
  /** Null: the embedded engine answering with each task's policy.json. */
  engineUrl: string | null;
  model?: string;
  kubeContext?: string;
  /** The kube context's namespace (the batch's Jobs and proxy go there). */
  namespace?: string;
  /** Where a k8s batch pushes its images (harnessLab.clusterRegistry). */
  registry?: string;
}

/** The plan alone, nothing written: a broken task, an unknown harness or a bad group size throws here, naming it. */
export function planOnly(req: SubmitRequest): BatchPlan {
  const plan = planBatch(batchRequest(req));
  plan.dir = join(req.folder, plan.manifest.batch_id);
  return plan;
}

function batchRequest(req: SubmitRequest): BatchRequest {
  return {
    tasks: req.tasks,
    harnesses: req.harnesses,
    groupSize: req.groupSize,
    backend: req.backend,
    ...(req.engineUrl ? { engineUrl: req.engineUrl } : {}),
    ...(req.model ? { model: req.model } : {}),
    ...(req.backend === 'k8s' ? { k8s: { context: req.kubeContext, namespace: req.namespace, registry: req.registry } } : {}),
  };
}

/** Plans and writes the batch; throws (BatchPlanError, TaskError, ...) before writing anything when the request is wrong. */
export async function planAndWriteBatch(req: SubmitRequest): Promise<BatchPlan> {
  const plan = planOnly(req);
  // The backends (Docker, Kubernetes and its client library) load in the lab, never in the extension host.
  writeBatch(plan);
  return plan;
}

export interface BatchLab {
  pid: number | undefined;
  /** The lab's exit code: 0 finished, 1 cancelled, 130 interrupted, 2 usage, other: failed. */
  exited: Promise<number | null>;
  /** Everything it printed so far (for the error message when it fails). */
  output(): string;
}

/** The node that runs the bundled CLI: the extension host's own (Electron's, as plain node, on desktop). */
export function labCommand(
  cliJs: string,
  dir: string,
  sub: LabSub = 'resume',
  execPath = process.execPath,
  keep = false,
): { command: string; args: string[]; env: NodeJS.ProcessEnv } {
  return {
    command: execPath,
    args: [cliJs, 'batch', sub, dir, ...(keep && sub === 'resume' ? ['--keep'] : [])],
    env: { ELECTRON_RUN_AS_NODE: '1' },
  };
}

export type LabSub = 'resume' | 'cancel' | 'teardown' | 'delete';

/**
 * `batch resume DIR` (runs a planned batch to its end; `--keep` keeps its cluster objects), `batch
 * cancel DIR` (the runner's cancel path: asks the running lab to stop and waits for it, or cleans up
 * after a dead one), `batch teardown DIR` or `batch delete DIR`, as a child.
 */
export function startBatchLab(opts: {
  cliJs: string;
  dir: string;
  cwd: string;
  sub?: LabSub;
  keep?: boolean;
  onLine?: (line: string) => void;
  env?: NodeJS.ProcessEnv;
}): BatchLab {
  if (!existsSync(opts.cliJs))
    throw new Error(`the bundled CLI ${opts.cliJs} is missing (run \`npm run build\`, or reinstall the extension)`);
  const { command, args, env } = labCommand(opts.cliJs, opts.dir, opts.sub, process.execPath, opts.keep);
  const child = spawn(command, args, { cwd: opts.cwd, env: { ...process.env, ...opts.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const partial = { stdout: '', stderr: '' };
  const take = (stream: 'stdout' | 'stderr') => (b: Buffer) => {
    const text = b.toString();
    out = (out + text).slice(-20_000);
    const lines = (partial[stream] + text).split('\n');
    partial[stream] = lines.pop() ?? '';
    for (const l of lines) opts.onLine?.(l);
  };
  child.stdout.on('data', take('stdout'));
  child.stderr.on('data', take('stderr'));
  const exited = new Promise<number | null>((resolve) => {
    child.on('error', (err) => {
      out += `\n${err.message}`;
      resolve(null);
    });
    child.on('close', (code) => {
      for (const rest of [partial.stdout, partial.stderr]) if (rest) opts.onLine?.(rest);
      resolve(code);
    });
  });
  return { pid: child.pid, exited, output: () => out };
}
