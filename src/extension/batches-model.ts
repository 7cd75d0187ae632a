// The Batches tree as plain data: batch -> group -> rollout, read from batch directories alone (the
// contract of src/batch/state.ts, through batchStatus), so a batch started from the CLI into the same
// folder shows exactly like one submitted from the editor. A directory that cannot be read becomes an
// error node naming the file and what is wrong with it; nothing here imports vscode.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { basename, isAbsolute, join, resolve } from 'node:path';
import { BatchFileError, batchPaths } from '../batch/state.js';
import {
  batchSessionFile,
  batchStatus,
  type BatchStatus,
  type GroupStatus,
  type InfraAccount,
  type RolloutStatus,
} from '../batch/status.js';
import { formatLatency } from './sessions-model.js';

export const DEFAULT_BATCHES_FOLDER = 'harness-lab-batches';

export interface BatchNode {
  kind: 'batch';
  id: string;
  dir: string;
  label: string;
  description: string;
  tooltip: string;
  /**
   * `harnessLab.batch.running` while a lab runs it (cancel is offered); `harnessLab.batch.unfinished`
   * when rollouts are left and no lab runs it (resume is offered); `harnessLab.batch` when finished.
   */
  contextValue: BatchContextValue;
  status: BatchStatus;
}

export interface GroupNode {
  kind: 'group';
  id: string;
  dir: string;
  label: string;
  description: string;
  tooltip: string;
  contextValue: 'harnessLab.batchGroup';
  noContrast: boolean;
  group: GroupStatus;
}

export interface BatchRolloutNode {
  kind: 'rollout';
  id: string;
  dir: string;
  label: string;
  description: string;
  tooltip: string;
  contextValue: 'harnessLab.batchRollout';
  rollout: RolloutStatus;
  /** The captured session of the attempt that counts, when it has one: `<batch>/capture/sessions/<id>.jsonl`. */
  sessionFile: string | null;
  /** Calls captured so far of a running rollout (read from its session file's tally), else null. */
  liveCalls: number | null;
}

export interface BatchErrorNode {
  kind: 'error';
  id: string;
  dir: string;
  /** The file that could not be read (batch.json, a rollout's state file), or the directory itself. */
  file: string;
  label: string;
  description: string;
  tooltip: string;
  contextValue: 'harnessLab.batchError';
}

export type BatchContextValue = 'harnessLab.batch' | 'harnessLab.batch.running' | 'harnessLab.batch.unfinished';

/** The batch row's menu: Cancel while running, Resume when rollouts are left, Tear Down / Delete when no lab runs it. */
export function batchContextValue(lab: BatchStatus['lab']): BatchContextValue {
  return lab === 'running' ? 'harnessLab.batch.running' : lab === 'finished' ? 'harnessLab.batch' : 'harnessLab.batch.unfinished';
}

export type BatchesTreeNode = BatchNode | GroupNode | BatchRolloutNode | BatchErrorNode;

/** The folder the view reads: the setting, relative to the workspace folder unless absolute. */
export function resolveBatchesFolder(setting: string, workspaceRoot: string): string {
  const folder = setting.trim() || DEFAULT_BATCHES_FOLDER;
  return isAbsolute(folder) ? folder : resolve(workspaceRoot, folder);
}

/** Subdirectories of `root` that hold a batch (or what is left of one: rollouts/ without batch.json). */
export function batchDirs(root: string): string[] {
  if (!existsSync(root) || !statSync(root).isDirectory()) return [];
  return readdirSync(root, { withFileTypes: true })
    .filter((e) => e.isDirectory() && !e.name.startsWith('.'))
    .map((e) => join(root, e.name))
    .filter((dir) => existsSync(batchPaths(dir).manifest) || existsSync(batchPaths(dir).rollouts));
}

const num = (n: number | null, digits = 3) => (n === null ? '-' : String(Math.round(n * 10 ** digits) / 10 ** digits));

export function formatReward(reward: number | null): string {
  return reward === null ? 'reward null' : `reward ${num(reward)}`;
}

/** `infra-failed 2/10 (20%)` once an attempt failed in the sandbox backend; nothing before. */
function infraPart(infra: InfraAccount): string[] {
  if (!infra.failed_attempts) return [];
  return [`infra-failed ${infra.failed_attempts}/${infra.attempts} (${Math.round((infra.rate ?? 0) * 100)}%)`];
}

function infraLines(infra: InfraAccount): string[] {
  if (!infra.attempts) return [];
  const causes = Object.entries(infra.causes)
    .sort((a, b) => b[1] - a[1])
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
  const share = `${Math.round((infra.rate ?? 0) * 1000) / 10}%`;
  return [`Infra-failed attempts: ${infra.failed_attempts} of ${infra.attempts} (${share})${causes ? `; causes: ${causes}` : ''}`];
}

export function batchNode(st: BatchStatus): BatchNode {
  const c = st.counts;
  const finished = c.done + c.discarded;
  const classes = Object.entries(st.classes)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
  const lab = st.lab === 'running' ? `running (pid ${st.lab_pid})` : st.lab;
  return {
    kind: 'batch',
    id: `batch:${st.dir}`,
    dir: st.dir,
    label: basename(st.dir) === st.batch_id ? st.batch_id : `${basename(st.dir)} (${st.batch_id})`,
    // The infra-failed rate changes only when an attempt ends, as the row's other parts do.
    description: [lab, `${finished}/${c.total} finished`, ...infraPart(st.infra), st.backend].join(' · '),
    tooltip: [
      `Batch ${st.batch_id} in ${st.dir}`,
      `Lab: ${lab}`,
      `Backend ${st.backend}, group size ${st.group_size}, parallel ${st.parallel}, temperature ${st.sampling.temperature}${st.policy_version ? `, policy ${st.policy_version}` : ''}`,
      // Not running vs queued: a parent row that changes makes VS Code drop its children's handles until
      // the workbench reads them again, and a context-menu command on a rollout in that window gets no
      // rollout. So the batch and group rows change only when a rollout ends (the rollout rows say which run).
      `${c.done} done, ${c.discarded} discarded, ${c.total - finished} to run of ${c.total}`,
      ...(classes ? [`Classes: ${classes}`] : []),
      ...infraLines(st.infra),
      ...(st.lab === 'interrupted' ? ["The lab that ran it is gone: Resume Batch (this row's menu) continues it"] : []),
      ...(st.lab === 'idle' || st.lab === 'cancelled' ? ["Rollouts are left: Resume Batch (this row's menu) runs them"] : []),
    ].join('\n'),
    contextValue: batchContextValue(st.lab),
    status: st,
  };
}

export function groupNode(st: BatchStatus, g: GroupStatus): GroupNode {
  const flags = [g.no_contrast ? 'NO CONTRAST' : '', g.too_few_trainable ? 'FEWER THAN 2 TRAINABLE' : ''].filter(Boolean);
  const parts = [`${g.done + g.discarded}/${g.size}`, `mean ${num(g.mean)}`, `std ${num(g.std)}`, ...flags];
  return {
    kind: 'group',
    id: `group:${st.dir}:${g.group_id}`,
    dir: st.dir,
    label: g.group_id,
    description: parts.join(' · '),
    tooltip: [
      `Group ${g.group_id}: task ${g.task}, harness ${g.harness}, ${g.size} members`,
      `${g.done} done, ${g.discarded} discarded, ${g.pending} pending`,
      `Trainable rewards: ${g.rewards.map((r) => num(r)).join(' ') || '-'}; mean ${num(g.mean)}, std ${num(g.std)}`,
      ...(g.no_contrast ? ['No contrast: every trainable reward is equal (zero advantage for GRPO)'] : []),
      ...(g.too_few_trainable ? ['Fewer than 2 trainable members: a trainer cannot use this group'] : []),
    ].join('\n'),
    contextValue: 'harnessLab.batchGroup',
    noContrast: g.no_contrast,
    group: g,
  };
}

export function rolloutNode(dir: string, r: RolloutStatus): BatchRolloutNode {
  const what = r.class ?? r.state;
  const parts: string[] = [what];
  const sessionFile = r.session_id ? batchSessionFile(dir, r.session_id) : null;
  // batchStatus counted a running rollout's calls from its session file already.
  const liveCalls = r.calls;
  if (liveCalls !== null) parts.push(`${liveCalls} call${liveCalls === 1 ? '' : 's'}`);
  if (r.class) parts.push(formatReward(r.reward));
  if (r.duration_ms !== null) parts.push(formatLatency(r.duration_ms));
  if (r.attempts > 1) parts.push(`${r.attempts} attempts`);
  // A leaf row may change while it runs: a stalled rollout says so, and where.
  if (r.stalled) parts.push(`STALLED (${r.stalled.where})`);
  return {
    kind: 'rollout',
    id: `rollout:${dir}:${r.id}`,
    dir,
    label: `#${r.member} ${r.id}`,
    description: parts.join(' · '),
    tooltip: [
      `Rollout ${r.id} (member ${r.member} of ${r.group})`,
      `Task ${r.task}, harness ${r.harness}`,
      `State ${r.state}${r.class ? `, class ${r.class}` : ''}, ${formatReward(r.reward)}${r.trainable ? ', trainable' : ''}`,
      ...(r.duration_ms !== null ? [`Duration ${formatLatency(r.duration_ms)}`] : []),
      ...(r.session_id ? [`Session ${r.session_id}`] : []),
      ...(liveCalls !== null ? [`${liveCalls} call(s) captured so far`] : []),
      ...(r.stalled ? [`Stalled: no model call and no sandbox output for ${r.stalled.idle_s} s (${r.stalled.where})`] : []),
      ...(r.error ? [r.error] : []),
    ].join('\n'),
    contextValue: 'harnessLab.batchRollout',
    rollout: r,
    sessionFile,
    liveCalls,
  };
}

export function errorNode(dir: string, err: unknown): BatchErrorNode {
  const file = err instanceof BatchFileError ? err.file : dir;
  const message = err instanceof BatchFileError ? err.message.slice(err.file.length + 2) : err instanceof Error ? err.message : String(err);
  return {
    kind: 'error',
    id: `error:${dir}`,
    dir,
    file,
    label: `${basename(dir)}: cannot read ${file === dir ? 'the batch' : basename(file)}`,
    description: message,
    tooltip: `${file}\n${message}`,
    contextValue: 'harnessLab.batchError',
  };
}

/** A batch directory as its tree node: the batch, or an error naming the file that is broken. */
export function readBatchNode(dir: string): BatchNode | BatchErrorNode {
  try {
    return batchNode(batchStatus(dir));
  } catch (err) {
    return errorNode(dir, err);
  }
}

/** The tree over every batch folder the workspace has: newest batch first, broken ones last. */
export class BatchesTreeModel {
  constructor(private readonly folders: () => string[]) {}

  roots(): (BatchNode | BatchErrorNode)[] {
    const nodes = this.folders().flatMap((root) => batchDirs(root).map(readBatchNode));
    const created = (n: BatchNode | BatchErrorNode) => (n.kind === 'batch' ? n.status.created_at : '');
    return nodes.sort((a, b) =>
      a.kind !== b.kind ? (a.kind === 'error' ? 1 : -1) : created(b).localeCompare(created(a)) || a.dir.localeCompare(b.dir),
    );
  }

  children(node?: BatchesTreeNode): BatchesTreeNode[] {
    if (!node) return this.roots();
    if (node.kind === 'batch') return node.status.groups.map((g) => groupNode(node.status, g));
    if (node.kind === 'group') return node.group.rollouts.map((r) => rolloutNode(node.dir, r));
    return [];
  }
}

/** What a re-read changed: nothing, the text or icon of some rows (updated in place), or the tree's shape. */
export type BatchesTreeChange = { kind: 'none' } | { kind: 'rows'; nodes: BatchesTreeNode[] } | { kind: 'shape' };

/** Everything a row shows: its texts, its menu and what picks its icon and click. */
function rowKey(n: BatchesTreeNode): string {
  const looks =
    n.kind === 'batch'
      ? [n.status.lab]
      : n.kind === 'group'
        ? [n.noContrast, n.group.too_few_trainable]
        : n.kind === 'rollout'
          ? [n.rollout.class, n.rollout.state, n.sessionFile]
          : [n.file];
  return JSON.stringify([n.label, n.description, n.tooltip, n.contextValue, ...looks]);
}

/**
 * The tree as last shown. A re-read compares it with the folders: a row whose text or icon changed
 * is updated in place (the very object the tree view holds, so only that row is re-rendered and
 * every row keeps its handle); only added, removed or reordered nodes rebuild the tree. A running
 * batch rewrites a file on every call of every rollout, and rebuilding the whole tree each time made
 * a context-menu pick that landed during the rebuild arrive without its row.
 */
export class ShownBatchesTree {
  private roots: (BatchNode | BatchErrorNode)[] = [];
  private kids = new Map<string, BatchesTreeNode[]>();
  private loaded = false;

  constructor(private readonly model: BatchesTreeModel) {}

  children(node?: BatchesTreeNode): BatchesTreeNode[] {
    if (!this.loaded) this.reread();
    return node ? (this.kids.get(node.id) ?? []) : this.roots;
  }

  /** Whether a batch as last read has a lab running it (its state will change without a new batch). */
  anyRunning(): boolean {
    return this.roots.some((n) => n.kind === 'batch' && n.status.lab === 'running');
  }

  /** Reads the folders again and says what changed since the tree was last read. */
  reread(): BatchesTreeChange {
    const roots = this.model.roots();
    const kids = new Map<string, BatchesTreeNode[]>();
    const walk = (n: BatchesTreeNode): void => {
      const c = this.model.children(n);
      if (c.length) kids.set(n.id, c);
      c.forEach(walk);
    };
    roots.forEach(walk);
    if (!this.loaded || shapeOf(roots, kids) !== shapeOf(this.roots, this.kids)) {
      this.roots = roots;
      this.kids = kids;
      this.loaded = true;
      return { kind: 'shape' };
    }
    const shown = new Map<string, BatchesTreeNode>();
    for (const n of everyNode(this.roots, this.kids)) shown.set(n.id, n);
    const changed: BatchesTreeNode[] = [];
    for (const n of everyNode(roots, kids)) {
      const old = shown.get(n.id)!;
      if (rowKey(old) !== rowKey(n)) changed.push(old);
      // The whole node, not only its row: commands read its status and session file.
      Object.assign(old, n);
    }
    return changed.length ? { kind: 'rows', nodes: changed } : { kind: 'none' };
  }
}

function* everyNode(roots: BatchesTreeNode[], kids: ReadonlyMap<string, BatchesTreeNode[]>): Generator<BatchesTreeNode> {
  yield* roots;
  for (const c of kids.values()) yield* c;
}

/** The ids of the tree, parent by parent, in order. */
function shapeOf(roots: BatchesTreeNode[], kids: ReadonlyMap<string, BatchesTreeNode[]>): string {
  const parts = [roots.map((n) => n.id).join('\n')];
  for (const [id, c] of kids) parts.push(`${id}\n${c.map((n) => n.id).join('\n')}`);
  return parts.join('\n\n');
}
