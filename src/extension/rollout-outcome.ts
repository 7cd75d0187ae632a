// A rollout's outcome as every surface shows it (Run with Harness's message, the Sessions tree, the
// viewer header): task, reward, class and the verifier's last lines. Read from what a rollout leaves on
// disk: `<out_dir>/rollout.json` (sandbox/rollout-runner.ts) and `<out_dir>/verifier/test-stdout.txt`;
// a batch member's class comes from its rollout state. Parsed with zod: these are files on disk.
// No vscode import (unit-tested).
import { existsSync, readFileSync, statSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { z } from 'zod';
import { readRolloutState } from '../batch/state.js';
import type { RolloutOutcomeView } from '../protocol/viewer-data.js';

export type { RolloutOutcomeView };

/** The class of a finished rollout, as batches name them (batch/state.ts ROLLOUT_CLASSES). */
export type OutcomeClass = RolloutOutcomeView['class'];

const RolloutJsonSchema = z.looseObject({
  task: z.string(),
  harness: z.string(),
  status: z.string(),
  reward: z.number().nullable(),
  error: z.string().nullable().optional(),
  agent: z.looseObject({ timed_out: z.boolean().optional() }).optional(),
  cancelled: z.boolean().optional(),
});

/** What `classOf` needs of a RolloutResult. */
export interface OutcomeFacts {
  status: string;
  reward: number | null;
  error?: string | null;
  agent?: { timed_out?: boolean };
  cancelled?: boolean;
}

/** completed: reward above 0; policy_failure: the verifier gave 0; timeout; infra_error: no reward. */
export function classOf(r: OutcomeFacts): OutcomeClass {
  if (r.cancelled) return 'cancelled';
  if (r.agent?.timed_out) return 'timeout';
  if (r.status !== 'ok' || r.reward === null) return 'infra_error';
  return r.reward > 0 ? 'completed' : 'policy_failure';
}

/** How many of the verifier's last lines every surface shows. */
export const VERIFIER_TAIL_LINES = 6;

/** The last non-empty lines of the verifier's output (its reason), or [] when it left none. */
export function verifierTail(outDir: string, lines = VERIFIER_TAIL_LINES): string[] {
  const file = join(outDir, 'verifier', 'test-stdout.txt');
  try {
    // The end of a large log is all that is shown: read only its last 16 KiB.
    const text = readTail(file, 16 * 1024);
    return text
      .split(/\r?\n/)
      .map((l) => l.trimEnd())
      .filter((l) => l.trim())
      .slice(-lines)
      .map((l) => (l.length > 300 ? `${l.slice(0, 300)}…` : l));
  } catch {
    return [];
  }
}

function readTail(file: string, bytes: number): string {
  const size = statSync(file).size;
  const buf = readFileSync(file);
  return buf.subarray(Math.max(0, size - bytes)).toString('utf8');
}

/** The outcome of a rollout from its facts (Run with Harness has them in memory) and its folder. */
export function outcomeOf(r: OutcomeFacts & { task: string; harness: string }, outDir: string): RolloutOutcomeView {
  return {
    task: r.task,
    harness: r.harness,
    class: classOf(r),
    reward: r.reward,
    error: r.error ?? null,
    verifier: verifierTail(outDir),
    out_dir: outDir,
  };
}

/** The outcome a rollout folder records, or undefined when it has none yet (still running) or it cannot be read. */
export function readRolloutOutcome(outDir: string): RolloutOutcomeView | undefined {
  const file = join(outDir, 'rollout.json');
  if (!existsSync(file)) return undefined;
  try {
    const parsed = RolloutJsonSchema.safeParse(JSON.parse(readFileSync(file, 'utf8')));
    return parsed.success ? outcomeOf(parsed.data, outDir) : undefined;
  } catch {
    return undefined;
  }
}

/** A session's rollout outcome, from the `out_dir` its metadata names (Run with Harness, Validate). */
export function sessionOutcome(metadata: Record<string, unknown> | undefined): RolloutOutcomeView | undefined {
  const outDir = metadata?.out_dir;
  return typeof outDir === 'string' && outDir ? readRolloutOutcome(outDir) : undefined;
}

/** Memoises outcomes by folder and rollout.json mtime, so a tree refresh per call does not re-read them. */
export class OutcomeCache {
  private readonly cache = new Map<string, { mtimeMs: number; outcome: RolloutOutcomeView | undefined }>();

  of(metadata: Record<string, unknown> | undefined): RolloutOutcomeView | undefined {
    const outDir = metadata?.out_dir;
    if (typeof outDir !== 'string' || !outDir) return undefined;
    let mtimeMs = -1;
    try {
      mtimeMs = statSync(join(outDir, 'rollout.json')).mtimeMs;
    } catch {
      return undefined; // no result yet: still running
    }
    const hit = this.cache.get(outDir);
    if (hit && hit.mtimeMs === mtimeMs) return hit.outcome;
    const outcome = readRolloutOutcome(outDir);
    this.cache.set(outDir, { mtimeMs, outcome });
    return outcome;
  }
}

export function formatReward(reward: number | null): string {
  return reward === null ? 'no reward' : `reward ${reward.toFixed(2)}`;
}

/** How a message shows the outcome: only a reward above 0 is a success. */
export function outcomeSeverity(o: Pick<RolloutOutcomeView, 'class'>): 'info' | 'warning' | 'error' {
  if (o.class === 'completed') return 'info';
  if (o.class === 'policy_failure' || o.class === 'cancelled') return 'warning';
  return 'error';
}

const CLASS_WORDS: Record<OutcomeClass, string> = {
  completed: 'solved',
  policy_failure: 'not solved',
  infra_error: 'failed before a reward',
  timeout: 'timed out',
  cancelled: 'cancelled',
};

/** One line: `hello-file: not solved (reward 0.00, policy_failure)`. */
export function outcomeLine(o: RolloutOutcomeView): string {
  return `${o.task}: ${CLASS_WORDS[o.class]} (${formatReward(o.reward)}, ${o.class})`;
}

/** The reason: the rollout's error, else the verifier's last line. */
export function outcomeReason(o: RolloutOutcomeView): string | undefined {
  if (o.error) return o.error.split('\n')[0];
  return o.verifier.length ? `verifier: ${o.verifier[o.verifier.length - 1]}` : undefined;
}

/** The short form for a tree item's description: `reward 0.00 · not solved`. */
export function outcomeBadge(o: RolloutOutcomeView): string {
  return `${formatReward(o.reward)} · ${CLASS_WORDS[o.class]}`;
}

/**
 * A batch member's outcome, for a captured session file `<batch>/capture/sessions/<id>.jsonl`: its
 * rollout state (class, reward, error) and the verifier's last lines of the attempt that counts.
 * Undefined while it runs, or for a file outside a batch.
 */
export function batchMemberOutcome(sessionFile: string, metadata: Record<string, unknown> | undefined): RolloutOutcomeView | undefined {
  const rolloutId = metadata?.rollout_id;
  if (typeof rolloutId !== 'string' || basename(dirname(sessionFile)) !== 'sessions') return undefined;
  const batchDir = resolve(dirname(sessionFile), '..', '..');
  try {
    const st = readRolloutState(batchDir, rolloutId);
    if (!st.class) return undefined;
    const attempt = st.attempts[st.attempts.length - 1];
    const outDir = attempt ? join(batchDir, attempt.out_dir) : batchDir;
    return {
      task: st.task,
      harness: st.harness,
      class: st.class,
      reward: st.reward,
      error: st.error,
      verifier: attempt ? verifierTail(outDir) : [],
      out_dir: outDir,
    };
  } catch {
    return undefined;
  }
}

/**
 * The outcome for a rollout file opened in the viewer: a Run with Harness rollout's `session.rollout.json`,
 * or a batch member's session file.
 */
export function fileOutcome(file: string, metadata: Record<string, unknown> | undefined): RolloutOutcomeView | undefined {
  return readRolloutOutcome(dirname(file)) ?? batchMemberOutcome(file, metadata) ?? sessionOutcome(metadata);
}

/**
 * A hint when the embedded engine in use follows a policy that is not the task's: its rollouts then
 * act out another task's script (or free text), and a reward of 0 says nothing about the harness.
 */
export function policyMismatch(enginePolicy: string | null | undefined, taskDir: string): string | undefined {
  if (enginePolicy === undefined) return undefined;
  const own = join(taskDir, 'policy.json');
  if (!existsSync(own)) return undefined;
  if (enginePolicy === null) return `the embedded engine follows no policy (free sampling), not this task's policy.json`;
  if (!existsSync(enginePolicy)) return `the embedded engine follows the shipped policy ${enginePolicy}, not this task's policy.json`;
  const file = resolve(enginePolicy);
  if (dirname(file) === resolve(taskDir)) return undefined; // policy.json or a variant of it (policy.sampling.json)
  return (
    `the embedded engine follows ${basename(dirname(file))}/${basename(file)}, not this ` +
    `task's policy.json (restart it with Start Embedded Engine to pick the task's)`
  );
}
