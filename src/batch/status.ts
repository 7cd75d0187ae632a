// What a batch looks like now, read from its directory alone (no lab needed): per group the members
// done and discarded, the trainable rewards, their mean and standard deviation, and the two flags a
// GRPO trainer cares about: no contrast (every trainable reward equal) and fewer than 2 trainable.
// With `samples`, also what a finished rollout costs a trainer: samples and tokens against the merged length.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { formatTotals, sampleAccount, sumAccounts, type SampleAccount, type SampleTotals } from '../capture/samples.js';
import { CaptureSession } from '../capture/sessions.js';
import { loadSessionFile, readSessionIndex, sessionFileOf } from '../capture/store.js';
import type { InfraCause } from './infra-cause.js';
import { labPaths, labState } from './lock.js';
import { batchPaths, readManifest, readRolloutStates, type BatchManifest, type RolloutState } from './state.js';

export interface RolloutStatus {
  id: string;
  group: string;
  member: number;
  task: string;
  harness: string;
  state: RolloutState['state'];
  class: RolloutState['class'];
  reward: number | null;
  trainable: boolean;
  duration_ms: number | null;
  attempts: number;
  session_id: string | null;
  /** Calls captured so far by a running rollout's session (null when not running, or no call is stored yet). */
  calls: number | null;
  error: string | null;
  /** A done rollout's samples and tokens to the trainer (asked for with `samples`; null otherwise or without token ids). */
  samples: SampleAccount | null;
  /** A running rollout with no model call and no sandbox output for the stall time, and where it stands. */
  stalled: Stall | null;
}

export interface Stall {
  idle_s: number;
  /** The phase it stalled in, from what the attempt left on disk. */
  where: 'starting sandbox' | 'agent running' | 'verifier';
}

/** A running rollout with no model call and no sandbox output for this long is flagged (batch status, watch, the view). */
export const DEFAULT_STALL_AFTER_S = 300;

function newestMtime(path: string, depth = 3): number {
  let newest = 0;
  try {
    const st = statSync(path);
    newest = st.mtimeMs;
    if (st.isDirectory() && depth > 0)
      for (const name of readdirSync(path)) newest = Math.max(newest, newestMtime(join(path, name), depth - 1));
  } catch {
    // not there (yet)
  }
  return newest;
}

/**
 * Where a running rollout stalled, if it did: the last sign of life is the newest of its session
 * file (each model call appends to it, locally or by a cluster batch's mirror), anything its sandbox
 * wrote under the attempt's directory (harness and verifier logs) and the attempt's start.
 */
export function rolloutStall(dir: string, s: RolloutState, stallAfterS: number, now = Date.now()): Stall | null {
  if (s.state !== 'running' || stallAfterS <= 0) return null;
  const attempt = s.attempts[s.attempts.length - 1];
  if (!attempt) return null;
  const outDir = join(dir, attempt.out_dir);
  const last = Math.max(
    Date.parse(attempt.started_at) || 0,
    newestMtime(batchSessionFile(dir, attempt.session_id), 0),
    newestMtime(outDir),
  );
  const idle = (now - last) / 1000;
  if (idle < stallAfterS) return null;
  // The verifier's directory is made with the sandbox; files in it mean the verifier ran.
  const verifierStarted = readdirSafe(join(outDir, 'verifier')).length > 0;
  const where: Stall['where'] = s.backend_ref === null ? 'starting sandbox' : verifierStarted ? 'verifier' : 'agent running';
  return { idle_s: Math.round(idle), where };
}

function readdirSafe(path: string): string[] {
  try {
    return readdirSync(path);
  } catch {
    return [];
  }
}

export interface GroupStatus {
  group_id: string;
  task: string;
  harness: string;
  size: number;
  done: number;
  discarded: number;
  pending: number;
  /** Rewards of the trainable members, in member order. */
  rewards: number[];
  mean: number | null;
  /** Sample standard deviation (n - 1), as torch.std and so veRL and TRL compute it; null below 2 members. */
  std: number | null;
  no_contrast: boolean;
  too_few_trainable: boolean;
  rollouts: RolloutStatus[];
  /** Over the trainable members with an account; null when samples were not asked for. */
  samples: SampleTotals | null;
}

export interface BatchStatus {
  batch_id: string;
  dir: string;
  backend: BatchManifest['backend'];
  created_at: string;
  /** running: a live lab holds it; interrupted: its lab died (batch resume); cancelled; finished; idle (queued, no lab). */
  lab: 'running' | 'interrupted' | 'cancelled' | 'finished' | 'idle';
  lab_pid: number | null;
  parallel: number;
  group_size: number;
  sampling: BatchManifest['sampling'];
  policy_version: string | null;
  counts: {
    total: number;
    queued: number;
    running: number;
    done: number;
    discarded: number;
    /** Calls the running rollouts captured so far. */ running_calls: number;
    /** Running rollouts flagged stalled. */ stalled: number;
  };
  classes: Record<string, number>;
  /** Attempts that reached a verdict, those that failed in the sandbox backend, their share, and their causes by class. */
  infra: InfraAccount;
  groups: GroupStatus[];
  /** Over every group's trainable members; null when samples were not asked for. */
  samples: SampleTotals | null;
}

export interface InfraAccount {
  attempts: number;
  failed_attempts: number;
  /** failed_attempts / attempts; null before any attempt ended. */
  rate: number | null;
  causes: Partial<Record<InfraCause, number>>;
}

/**
 * Infra failures over every attempt that reached a verdict (a rollout run again after an outage
 * counts each of its failed attempts): what a batch running for days reports as its infra-failed rate.
 */
export function infraAccount(states: readonly RolloutState[]): InfraAccount {
  const acc: InfraAccount = { attempts: 0, failed_attempts: 0, rate: null, causes: {} };
  for (const s of states) {
    s.attempts.forEach((a, i) => {
      if (a.outcome !== 'finished') return;
      const last = i === s.attempts.length - 1;
      // Attempts written before attempt classes: the rollout's class is its last attempt's.
      const cls = a.class ?? (last ? s.class : null);
      const cause = a.infra_cause ?? (last ? s.infra_cause : null) ?? 'other';
      acc.attempts++;
      if (cls !== 'infra_error') return;
      acc.failed_attempts++;
      acc.causes[cause] = (acc.causes[cause] ?? 0) + 1;
    });
  }
  acc.rate = acc.attempts ? acc.failed_attempts / acc.attempts : null;
  return acc;
}

export function meanStd(values: readonly number[]): { mean: number | null; std: number | null } {
  if (!values.length) return { mean: null, std: null };
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  if (values.length < 2) return { mean, std: null };
  const variance = values.reduce((a, v) => a + (v - mean) ** 2, 0) / (values.length - 1);
  return { mean, std: Math.sqrt(variance) };
}

/**
 * Calls in a session file so far, from its header and last `sum` line (two small reads, whatever
 * the session's size); null when there is no file yet. A cluster batch's lab mirrors calls into it
 * while the rollout runs, a local batch's proxy appends them: either way the count is live.
 */
export function capturedCalls(sessionFile: string): number | null {
  try {
    return readSessionIndex(sessionFile)?.tally.n ?? null;
  } catch {
    return null;
  }
}

/** Where a batch's rollout session is captured (`<batch>/capture/sessions/<id>.jsonl`, the store's own path). */
export function batchSessionFile(dir: string, sessionId: string): string {
  return sessionFileOf(batchPaths(dir).capture, sessionId);
}

const accountCache = new Map<string, { size: number; mtimeMs: number; account: SampleAccount | null }>();

/**
 * A finished session's sample account, remembered by file size and time so a re-read of a large batch
 * builds each rollout once; null when the file is missing, unreadable or has no token ids.
 */
export function sessionSampleAccount(file: string): SampleAccount | null {
  let st;
  try {
    st = statSync(file);
  } catch {
    return null;
  }
  const hit = accountCache.get(file);
  if (hit && hit.size === st.size && hit.mtimeMs === st.mtimeMs) return hit.account;
  let account: SampleAccount | null = null;
  try {
    const loaded = loadSessionFile(file);
    account = loaded ? sampleAccount(CaptureSession.fromStore(loaded).rollout()) : null;
  } catch {
    account = null;
  }
  accountCache.set(file, { size: st.size, mtimeMs: st.mtimeMs, account });
  return account;
}

/**
 * `countCalls` gives a running member's calls so far (by session id); without it they are null.
 * `accountOf` gives a done member's sample account (by session id); without it samples are not reported.
 */
export function groupStatus(
  group: BatchManifest['groups'][number],
  members: RolloutState[],
  countCalls?: (sessionId: string) => number | null,
  stallOf?: (s: RolloutState) => Stall | null,
  accountOf?: (sessionId: string) => SampleAccount | null,
): GroupStatus {
  const trainable = members.filter((m) => m.trainable && m.reward !== null);
  const rewards = trainable.map((m) => m.reward!);
  const { mean, std } = meanStd(rewards);
  const finished = members.every((m) => m.state === 'done' || m.state === 'discarded');
  const accounts = new Map<string, SampleAccount | null>();
  if (accountOf) for (const m of members) if (m.state === 'done' && m.session_id) accounts.set(m.rollout_id, accountOf(m.session_id));
  const counted = trainable.map((m) => accounts.get(m.rollout_id)).filter((a): a is SampleAccount => Boolean(a));
  return {
    group_id: group.group_id,
    task: group.task,
    harness: group.harness,
    size: group.rollout_ids.length,
    done: members.filter((m) => m.state === 'done').length,
    discarded: members.filter((m) => m.state === 'discarded').length,
    pending: members.filter((m) => m.state === 'queued' || m.state === 'running').length,
    rewards,
    mean,
    std,
    no_contrast: rewards.length >= 2 && rewards.every((r) => r === rewards[0]),
    too_few_trainable: finished && rewards.length < 2,
    rollouts: members.map((m) => ({
      id: m.rollout_id,
      group: m.group_id,
      member: m.member,
      task: m.task,
      harness: m.harness,
      state: m.state,
      class: m.class,
      reward: m.reward,
      trainable: m.trainable,
      duration_ms: m.duration_ms,
      attempts: m.attempts.length,
      session_id: m.session_id,
      calls: m.state === 'running' && m.session_id && countCalls ? countCalls(m.session_id) : null,
      error: m.error,
      samples: accounts.get(m.rollout_id) ?? null,
      stalled: stallOf?.(m) ?? null,
    })),
    samples: accountOf ? sumAccounts(counted) : null,
  };
}

/** `samples` reads every done rollout's session (once per file, see sessionSampleAccount) for its sample account. */
export function batchStatus(dirArg: string, opts: { stallAfterS?: number; now?: number; samples?: boolean } = {}): BatchStatus {
  const dir = resolve(dirArg);
  const manifest = readManifest(dir);
  const states = readRolloutStates(dir, manifest);
  const byId = new Map(states.map((s) => [s.rollout_id, s]));
  const c = { total: states.length, queued: 0, running: 0, done: 0, discarded: 0, running_calls: 0, stalled: 0 };
  const classes: Record<string, number> = {};
  for (const s of states) {
    c[s.state]++;
    if (s.class) classes[s.class] = (classes[s.class] ?? 0) + 1;
  }
  const held = labState(dir);
  const lab: BatchStatus['lab'] =
    held.state !== 'idle'
      ? held.state
      : c.queued + c.running === 0
        ? 'finished'
        : existsSync(labPaths(dir).cancel)
          ? 'cancelled'
          : c.running
            ? 'interrupted'
            : 'idle';
  const st: BatchStatus = {
    batch_id: manifest.batch_id,
    dir,
    backend: manifest.backend,
    created_at: manifest.created_at,
    lab,
    lab_pid: held.lock?.pid ?? null,
    parallel: manifest.parallel,
    group_size: manifest.group_size,
    sampling: manifest.sampling,
    policy_version: manifest.policy_version,
    counts: c,
    classes,
    infra: infraAccount(states),
    groups: manifest.groups.map((g) =>
      groupStatus(
        g,
        g.rollout_ids.map((id) => byId.get(id)!),
        (sessionId) => capturedCalls(batchSessionFile(dir, sessionId)),
        (m) => rolloutStall(dir, m, opts.stallAfterS ?? DEFAULT_STALL_AFTER_S, opts.now),
        opts.samples ? (sessionId) => sessionSampleAccount(batchSessionFile(dir, sessionId)) : undefined,
      ),
    ),
    samples: null,
  };
  for (const g of st.groups)
    for (const r of g.rollouts) {
      st.counts.running_calls += r.calls ?? 0;
      if (r.stalled) st.counts.stalled++;
    }
  if (opts.samples) {
    const trainable = st.groups.flatMap((g) =>
      g.rollouts.filter((r) => r.trainable && r.reward !== null && r.samples).map((r) => r.samples!),
    );
    st.samples = sumAccounts(trainable);
  }
  return st;
}

const fmt = (n: number | null) => (n === null ? '-' : (Math.round(n * 1000) / 1000).toFixed(3));

/** The plain `batch status` table. */
export function formatStatus(st: BatchStatus, opts: { rollouts?: boolean } = {}): string {
  const c = st.counts;
  const lines = [
    `batch ${st.batch_id} (${st.backend}, group size ${st.group_size}, parallel ${st.parallel}, temperature ` +
      `${st.sampling.temperature}${st.policy_version ? `, policy ${st.policy_version}` : ''}): ${st.lab}${st.lab === 'running' ? ` (pid ${st.lab_pid})` : ''}`,
    `  ${c.done} done, ${c.discarded} discarded, ${c.running} running${c.running ? ` (${c.running_calls} call${c.running_calls === 1 ? '' : 's'} so far)` : ''}, ${c.queued} queued of ${c.total}${
      Object.keys(st.classes).length
        ? `; ${Object.entries(st.classes)
            .map(([k, v]) => `${k} ${v}`)
            .join(', ')}`
        : ''
    }`,
  ];
  if (st.infra.failed_attempts)
    lines.push(
      `  infra-failed ${st.infra.failed_attempts} of ${st.infra.attempts} attempt(s) (${Math.round((st.infra.rate ?? 0) * 1000) / 10}%): ${Object.entries(
        st.infra.causes,
      )
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')}`,
    );
  for (const g of st.groups)
    for (const r of g.rollouts)
      if (r.stalled) lines.push(`  STALLED ${r.id}: no model call and no sandbox output for ${r.stalled.idle_s} s (${r.stalled.where})`);
  if (st.lab === 'interrupted') lines.push(`  the lab that ran it is gone: continue with \`harness-lab batch resume ${st.dir}\``);
  if (st.samples) lines.push(`  samples (trainable rollouts): ${formatTotals(st.samples)}`);
  const width = Math.max(5, ...st.groups.map((g) => g.group_id.length));
  const sampleHead = st.samples ? '  smp/r  tokens/merged' : '';
  lines.push('', `  ${'group'.padEnd(width)}  done  disc  pend  rewards (trainable)        mean    std  ${sampleHead}  flags`);
  for (const g of st.groups) {
    const flags = [g.no_contrast ? 'NO CONTRAST' : '', g.too_few_trainable ? 'FEWER THAN 2 TRAINABLE' : ''].filter(Boolean).join(', ');
    const rewards = g.rewards.map((r) => String(Math.round(r * 100) / 100)).join(' ') || '-';
    const sampleCols = g.samples
      ? `  ${(g.samples.samples_per_rollout === null ? '-' : g.samples.samples_per_rollout.toFixed(2)).padStart(5)} ` +
        ` ${(g.samples.token_ratio === null ? '-' : `${g.samples.token_ratio.toFixed(2)}x`).padStart(13)}`
      : '';
    lines.push(
      `  ${g.group_id.padEnd(width)}  ${String(g.done).padStart(4)}  ${String(g.discarded).padStart(4)}  ${String(g.pending).padStart(4)} ` +
        ` ${rewards.padEnd(25)}  ${fmt(g.mean).padStart(6)}  ${fmt(g.std).padStart(6)}${sampleCols}  ${flags}`,
    );
    if (opts.rollouts)
      for (const r of g.rollouts) {
        const smp = r.samples ? ` samples=${r.samples.samples} tokens=${r.samples.tokens_to_trainer}/${r.samples.merged_tokens}` : '';
        lines.push(
          `      ${r.id}  ${r.state}${r.class ? ` ${r.class}` : ''}${r.calls !== null ? ` calls=${r.calls}` : ''} ` +
            `reward=${r.reward ?? 'null'}${smp}${r.duration_ms !== null ? ` ${(r.duration_ms / 1000).toFixed(1)}s` : ''}` +
            `${r.attempts > 1 ? ` attempts=${r.attempts}` : ''}${r.error && r.state !== 'done' ? `  (${r.error})` : ''}`,
        );
      }
  }
  return `${lines.join('\n')}\n`;
}
