// A batch, planned before anything runs: the tasks (every one loaded and checked, so a broken task
// fails here naming file and field), the harnesses (unknown or not installed: named), the groups
// (tasks x harnesses, each G rollouts of one task under one harness), stable readable ids, the
// concurrency cap, and the manifest + queued rollout states written to the batch directory.
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { availableParallelism, totalmem } from 'node:os';
import { isAbsolute, join, resolve, sep } from 'node:path';
import { assertInstalled, harnessEntry } from '../harness/registry.js';
import { findTasks, loadTask, type HarborTask } from '../tasks/task.js';
import {
  BATCH_SCHEMA_VERSION,
  BatchManifestSchema,
  DEFAULT_PACING,
  batchPaths,
  queuedRolloutState,
  trainingSampling,
  writeJsonAtomic,
  writeRolloutState,
  type BatchManifest,
  type RolloutState,
} from './state.js';

export class BatchPlanError extends Error {}

export interface BatchRequest {
  /** Task directories, parents of task directories, or glob patterns (`tasks/*`, `suite/**`). */
  tasks: string[];
  harnesses: string[];
  groupSize: number;
  backend?: 'docker' | 'k8s';
  parallel?: number;
  timeoutSec?: number;
  onTimeout?: 'discard' | 'keep';
  engineUrl?: string;
  model?: string;
  temperature?: number;
  policyVersion?: string;
  /** The batch directory; default ./harness-lab-batches/<batch id>. */
  outDir?: string;
  k8s?: { context?: string; namespace?: string; registry?: string; queueName?: string };
  /** Sandboxes starting at once (default 4; 0: no cap). */
  maxStarting?: number;
  /** Wall budget of one sandbox start-up, seconds (default 300). */
  startTimeoutSec?: number;
  /** Consecutive infra failures that pause new sandboxes (default 10; 0: off). */
  breakerAfter?: number;
  /** Check that each harness is installed on this machine (default true; a k8s batch installs in its image). */
  checkInstalled?: boolean;
  now?: Date;
}

export interface BatchPlan {
  dir: string;
  manifest: BatchManifest;
  states: RolloutState[];
  tasks: HarborTask[];
}

const GLOB_CHARS = /[*?[]/;

function segmentRegex(segment: string): RegExp {
  let re = '';
  for (let i = 0; i < segment.length; i++) {
    const c = segment[i]!;
    if (c === '*') re += '[^/]*';
    else if (c === '?') re += '[^/]';
    else if (c === '[') {
      const end = segment.indexOf(']', i + 1);
      if (end < 0) re += '\\[';
      else {
        const body = segment
          .slice(i + 1, end)
          .replace(/^!/, '^')
          .replace(/\\/g, '\\\\');
        re += `[${body}]`;
        i = end;
      }
    } else re += c.replace(/[.+^${}()|\\]/g, '\\$&');
  }
  return new RegExp(`^${re}$`);
}

/** Directories matching a glob (`*`, `?`, `[...]` within a segment, `**` for any depth); hidden folders only when named. */
export function expandGlob(pattern: string, cwd = process.cwd()): string[] {
  const abs = isAbsolute(pattern) ? pattern : join(cwd, pattern);
  const parts = abs.split(sep).filter(Boolean);
  const out = new Set<string>();
  const isDir = (p: string) => existsSync(p) && statSync(p).isDirectory();
  const children = (d: string) =>
    readdirSync(d, { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name);
  const walk = (dir: string, i: number) => {
    if (i === parts.length) return void out.add(dir);
    const part = parts[i]!;
    if (part === '**') {
      walk(dir, i + 1);
      for (const name of children(dir)) if (!name.startsWith('.') && name !== 'node_modules') walk(join(dir, name), i);
      return;
    }
    if (!GLOB_CHARS.test(part)) {
      const next = join(dir, part);
      if (isDir(next)) walk(next, i + 1);
      return;
    }
    const re = segmentRegex(part);
    for (const name of children(dir)) if (re.test(name) && (!name.startsWith('.') || part.startsWith('.'))) walk(join(dir, name), i + 1);
  };
  walk(sep, 0);
  return [...out].sort();
}

/** The task directories named by DIR or GLOB arguments, in a stable order, each once. */
export function resolveTaskDirs(specs: string[], cwd = process.cwd()): string[] {
  const dirs: string[] = [];
  for (const spec of specs) {
    if (GLOB_CHARS.test(spec)) {
      const matched = expandGlob(spec, cwd).filter((d) => existsSync(join(d, 'task.toml')));
      if (!matched.length) throw new BatchPlanError(`--tasks ${spec}: the pattern matches no task directory (a folder holding task.toml)`);
      dirs.push(...matched);
      continue;
    }
    const dir = resolve(cwd, spec);
    if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new BatchPlanError(`--tasks ${spec}: no such directory`);
    const found = findTasks(dir);
    if (!found.length) throw new BatchPlanError(`--tasks ${spec}: no Harbor task here (a task is a folder holding task.toml)`);
    dirs.push(...found);
  }
  return [...new Set(dirs)];
}

export function slug(text: string): string {
  return (
    text
      .toLowerCase()
      .replace(/[^a-z0-9-]+/g, '-')
      .replace(/^-+|-+$/g, '') || 'x'
  );
}

/** `b20261201-092600-3fa1`: sortable by submit time, unique per submit. */
export function newBatchId(now = new Date()): string {
  const t = now.toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
  return `b${t}-${randomBytes(2).toString('hex')}`;
}

/** The capture session of one attempt: readable, unique across attempts, a valid API key. */
export function attemptSessionId(batchId: string, rolloutId: string, attempt: number): string {
  return `${batchId}.${rolloutId}.a${attempt}`;
}

/**
 * The sampler seed a rollout's calls carry when the batch runs on the lab's own embedded engine: a
 * hash of the rollout id (task, harness, member), not of the batch id. A group's members then draw
 * differently from each other, and the same members draw the same way in every batch, so whether a
 * sampling policy's group has contrast is decided by its members, not by the luck of the engine's
 * shared stream (which made 1 batch in 128 of an 8-member p=1/2 group have none).
 */
export function rolloutSeed(rolloutId: string): number {
  return createHash('sha256').update(`rollout-seed:${rolloutId}`, 'utf8').digest().readUInt32BE(0) & 0x7fffffff;
}

/**
 * As many rollouts at once as the cores and memory hold for the largest task's caps ([environment]
 * cpus and memory_mb; 1 CPU and 2 GiB when unset), leaving a quarter of memory to the host.
 */
export function defaultParallel(
  tasks: readonly Pick<HarborTask, 'environment'>[],
  cores = availableParallelism(),
  memMb = totalmem() / 2 ** 20,
): number {
  const cpus = Math.max(...tasks.map((t) => t.environment.cpus ?? 1));
  const mem = Math.max(...tasks.map((t) => t.environment.memoryMb ?? 2048));
  return Math.max(1, Math.min(Math.floor(cores / cpus), Math.floor((memMb * 0.75) / mem)));
}

export function planBatch(req: BatchRequest): BatchPlan {
  if (!Number.isInteger(req.groupSize) || req.groupSize < 2)
    throw new BatchPlanError(`--group-size must be an integer of at least 2 (a group of one has no baseline), got ${req.groupSize}`);
  if (!req.harnesses.length) throw new BatchPlanError('--harness names at least one harness');
  const temperature = req.temperature ?? 1;
  if (!Number.isFinite(temperature) || temperature <= 0)
    throw new BatchPlanError(`--temperature must be a finite number above 0 (training sampling), got ${req.temperature}`);
  if (req.parallel !== undefined && (!Number.isInteger(req.parallel) || req.parallel < 1))
    throw new BatchPlanError(`--parallel must be a positive integer, got ${req.parallel}`);
  if (req.timeoutSec !== undefined && !(req.timeoutSec > 0))
    throw new BatchPlanError(`--timeout must be a positive number of seconds, got ${req.timeoutSec}`);
  if (req.maxStarting !== undefined && (!Number.isInteger(req.maxStarting) || req.maxStarting < 0))
    throw new BatchPlanError(`--max-starting must be a whole number (0: no cap), got ${req.maxStarting}`);
  if (req.startTimeoutSec !== undefined && !(req.startTimeoutSec > 0))
    throw new BatchPlanError(`--start-timeout must be a positive number of seconds, got ${req.startTimeoutSec}`);
  if (req.breakerAfter !== undefined && (!Number.isInteger(req.breakerAfter) || req.breakerAfter < 0))
    throw new BatchPlanError(`--breaker-after must be a whole number of failures (0: off), got ${req.breakerAfter}`);
  const backend = req.backend ?? 'docker';

  const harnesses = [...new Set(req.harnesses)].map((name) => {
    const entry = harnessEntry(name); // throws naming the unknown harness and the known ones
    if (req.checkInstalled !== false && backend === 'docker') assertInstalled(entry);
    return entry.name;
  });
  const tasks = resolveTaskDirs(req.tasks).map((dir) => loadTask(dir)); // a broken task throws TaskError(file, field)
  if (!req.engineUrl) {
    const missing = tasks.find((t) => !t.policyFile);
    if (missing)
      throw new BatchPlanError(
        `task ${missing.name} (${missing.dir}) has no policy.json for the embedded engine; pass --engine-url URL of an inference engine`,
      );
  }

  const now = req.now ?? new Date();
  const batchId = newBatchId(now);
  const dir = resolve(req.outDir ?? join('harness-lab-batches', batchId));
  const taskSlugs = new Map<HarborTask, string>();
  const used = new Set<string>();
  for (const t of tasks) {
    let s = slug(t.name);
    for (let n = 2; used.has(s); n++) s = `${slug(t.name)}-${n}`;
    used.add(s);
    taskSlugs.set(t, s);
  }
  const queuedAt = now.toISOString();
  const groups: BatchManifest['groups'] = [];
  const states: RolloutState[] = [];
  for (const task of tasks)
    for (const harness of harnesses) {
      const groupId = `${taskSlugs.get(task)}.${harness}`;
      const ids = Array.from({ length: req.groupSize }, (_, m) => `${groupId}.${m}`);
      groups.push({ group_id: groupId, task: task.name, harness, rollout_ids: ids });
      ids.forEach((id, member) =>
        states.push(
          queuedRolloutState({
            rollout_id: id,
            group_id: groupId,
            member,
            task: task.name,
            harness,
            policy_version: req.policyVersion ?? null,
            queued_at: queuedAt,
          }),
        ),
      );
    }
  const manifest = BatchManifestSchema.parse({
    schema_version: BATCH_SCHEMA_VERSION,
    batch_id: batchId,
    created_at: queuedAt,
    backend,
    harnesses,
    group_size: req.groupSize,
    tasks: tasks.map((t) => ({ name: t.name, dir: t.dir })),
    groups,
    sampling: trainingSampling(temperature),
    policy_version: req.policyVersion ?? null,
    timeout_sec: req.timeoutSec ?? Math.max(...tasks.map((t) => t.agentTimeoutSec ?? 600)),
    on_timeout: req.onTimeout ?? 'discard',
    parallel: req.parallel ?? defaultParallel(tasks),
    engine_url: req.engineUrl ?? null,
    model: req.model ?? null,
    k8s:
      backend === 'k8s'
        ? {
            context: req.k8s?.context ?? null,
            namespace: req.k8s?.namespace ?? 'default',
            registry: req.k8s?.registry ?? null,
            queue_name: req.k8s?.queueName ?? null,
          }
        : null,
    pacing: {
      max_starting: req.maxStarting ?? DEFAULT_PACING.max_starting,
      start_timeout_sec: req.startTimeoutSec ?? DEFAULT_PACING.start_timeout_sec,
      breaker_after: req.breakerAfter ?? DEFAULT_PACING.breaker_after,
    },
  });
  return { dir, manifest, states, tasks };
}

/** Writes the plan: every rollout queued, then the manifest last (a directory without batch.json is no batch). */
export function writeBatch(plan: BatchPlan): void {
  const paths = batchPaths(plan.dir);
  if (existsSync(paths.manifest))
    throw new BatchPlanError(
      `${plan.dir} already holds a batch (batch.json); continue it with \`harness-lab batch resume ${plan.dir}\` or pick another --out`,
    );
  if (existsSync(plan.dir) && readdirSync(plan.dir).length)
    throw new BatchPlanError(`--out ${plan.dir} exists and is not empty; pick a new directory for the batch`);
  for (const s of plan.states) writeRolloutState(plan.dir, s);
  writeJsonAtomic(paths.manifest, plan.manifest);
}
