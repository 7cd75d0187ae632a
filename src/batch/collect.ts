// `batch collect`: the batch's training data as one JSONL, read from the batch directory alone. Only
// the finished attempt of a trainable rollout contributes, only groups with at least 2 trainable
// members are kept (never padded), and each line carries its group, reward and the batch's sampling
// and policy version around an unchanged TrainingTrace (strict readers reject extra trace fields).
import { existsSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { trainingTraces } from '../capture/rollout.js';
import { CaptureSession } from '../capture/sessions.js';
import { loadSessionFile, sessionFileOf } from '../capture/store.js';
import type { TrainingTrace } from '../capture/trace.js';
import { batchStatus, type BatchStatus } from './status.js';
import { batchPaths, readManifest, readRolloutState } from './state.js';

export interface CollectedLine {
  batch_id: string;
  group_id: string;
  rollout_id: string;
  member: number;
  task: string;
  harness: string;
  class: string;
  reward: number;
  policy_version: string | null;
  sampling: BatchStatus['sampling'];
  trace: TrainingTrace;
}

export interface CollectSummary {
  file: string;
  lines: number;
  rollouts: number;
  groupsKept: string[];
  /** Group id -> why it was left out. */
  groupsDropped: Record<string, string>;
  unfinished: number;
}

export function collectBatch(dirArg: string, outFile?: string): CollectSummary {
  const dir = resolve(dirArg);
  const manifest = readManifest(dir);
  const status = batchStatus(dir);
  const file = resolve(outFile ?? join(dir, 'collected.jsonl'));
  const out: string[] = [];
  const summary: CollectSummary = { file, lines: 0, rollouts: 0, groupsKept: [], groupsDropped: {}, unfinished: status.counts.queued + status.counts.running };
  for (const g of status.groups) {
    if (g.pending) {
      summary.groupsDropped[g.group_id] = `${g.pending} member(s) not finished`;
      continue;
    }
    if (g.too_few_trainable) {
      summary.groupsDropped[g.group_id] = `${g.rewards.length} trainable member(s); a group needs at least 2`;
      continue;
    }
    summary.groupsKept.push(g.group_id);
    for (const r of g.rollouts) {
      const s = readRolloutState(dir, r.id);
      if (!s.trainable || s.reward === null || !s.session_id) continue;
      const sessionFile = sessionFileOf(batchPaths(dir).capture, s.session_id);
      if (!existsSync(sessionFile)) throw new Error(`${sessionFile}: the capture of trainable rollout ${s.rollout_id} is missing`);
      // One session at a time, never the whole batch in memory.
      const loaded = loadSessionFile(sessionFile);
      if (!loaded) throw new Error(`${sessionFile}: no session header line`);
      const doc = CaptureSession.fromStore(loaded).rollout();
      summary.rollouts++;
      for (const trace of trainingTraces(doc)) {
        if (!trace.trainable) continue;
        const line: CollectedLine = { batch_id: manifest.batch_id, group_id: s.group_id, rollout_id: s.rollout_id, member: s.member, task: s.task, harness: s.harness, class: s.class!, reward: s.reward, policy_version: manifest.policy_version, sampling: manifest.sampling, trace };
        out.push(JSON.stringify(line));
      }
    }
  }
  writeFileSync(file, out.length ? `${out.join('\n')}\n` : '');
  summary.lines = out.length;
  return summary;
}
