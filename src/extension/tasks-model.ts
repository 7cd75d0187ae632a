// Harbor tasks in the workspace: every folder that holds a task.toml. Parsing stays shallow (the
// task loader in src/tasks owns the full format); the tree needs a name and a description.
import { basename, dirname, relative } from 'node:path';

export interface TaskNode {
  kind: 'task';
  id: string;
  label: string;
  description: string;
  tooltip: string;
  folder: string;
  tomlPath: string;
  contextValue: 'harnessLab.task';
}

/** Reads `name`/`description` style keys from the top-level table or [metadata] of a task.toml. */
export function taskTitle(tomlText: string): { name?: string; difficulty?: string; category?: string } {
  const out: { name?: string; difficulty?: string; category?: string } = {};
  let table = '';
  for (const raw of tomlText.split(/\r?\n/)) {
    const line = raw.trim();
    const header = /^\[([^\]]+)\]$/.exec(line);
    if (header) {
      table = header[1]!.trim();
      continue;
    }
    if (table !== '' && table !== 'metadata' && table !== 'task') continue;
    const kv = /^([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*"((?:[^"\\]|\\.)*)"/.exec(line);
    if (!kv) continue;
    const [, key, value] = kv as unknown as [string, string, string];
    if (key === 'name' && !out.name) out.name = value;
    if (key === 'difficulty') out.difficulty = value;
    if (key === 'category') out.category = value;
  }
  return out;
}

export function taskNode(tomlPath: string, workspaceRoot: string, tomlText: string): TaskNode {
  const folder = dirname(tomlPath);
  const meta = taskTitle(tomlText);
  const rel = relative(workspaceRoot, folder) || '.';
  // The label is the task's name as runs, sessions and results say it (src/tasks: the last segment
  // of [task].name); an organisation prefix goes to the tooltip.
  const fullName = meta.name ?? basename(folder);
  return {
    kind: 'task',
    id: `task:${folder}`,
    label: fullName.split('/').pop() || fullName,
    description: [meta.difficulty, meta.category, rel].filter(Boolean).join(' · '),
    tooltip: `Harbor task ${fullName} in ${folder}`,
    folder,
    tomlPath,
    contextValue: 'harnessLab.task',
  };
}

export function sortTasks(tasks: TaskNode[]): TaskNode[] {
  return [...tasks].sort((a, b) => a.label.localeCompare(b.label) || a.folder.localeCompare(b.folder));
}
