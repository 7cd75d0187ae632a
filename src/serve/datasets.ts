// The splits a rollout server serves: `--dataset NAME=DIR`, each a folder of Harbor tasks in a
// stable (sorted path) order, so task index i is the same task on every restart of the server.
import { resolve } from 'node:path';
import { findTasks, loadTask, type HarborTask } from '../tasks/task.js';
import type { TaskRef } from './protocol.js';

export interface ServedSplit {
  name: string;
  dir: string;
  tasks: HarborTask[];
  /** Why the split could not be loaded (reported by GET /harbor_env/splits, as OpenEnv does). */
  error: string | null;
}

export class DatasetSpecError extends Error {}

export function parseDatasetSpec(spec: string): { name: string; dir: string } {
  const eq = spec.indexOf('=');
  if (eq <= 0 || eq === spec.length - 1) throw new DatasetSpecError(`--dataset wants NAME=DIR, got '${spec}'`);
  return { name: spec.slice(0, eq), dir: resolve(spec.slice(eq + 1)) };
}

export function loadSplit(name: string, dir: string): ServedSplit {
  try {
    const dirs = findTasks(dir);
    if (!dirs.length) return { name, dir, tasks: [], error: `no Harbor task (task.toml) under ${dir}` };
    return { name, dir, tasks: dirs.map((d) => loadTask(d)), error: null };
  } catch (err) {
    return { name, dir, tasks: [], error: err instanceof Error ? err.message : String(err) };
  }
}

export function taskRef(split: ServedSplit, index: number): TaskRef {
  const t = split.tasks[index]!;
  // The harness is given the trimmed instruction (rollout-runner.ts): serve that, byte for byte.
  return { index, task_id: t.fullName, task_name: t.name, dataset: split.name, instruction: t.instruction.trim() };
}
