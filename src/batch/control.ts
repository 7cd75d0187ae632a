// `batch cancel` and `batch watch`: acting on a batch from any process through its directory. A
// running lab is asked to stop through cancel.json and waited for; with no lab alive, cancel removes
// the batch's sandboxes itself and marks what the dead lab left running as cancelled (queued again,
// so `batch resume` can still finish the batch).
import { rmSync } from 'node:fs';
import { resolve } from 'node:path';
import { backendModule } from './backends/index.js';
import { labPaths, labState, requestCancel } from './lock.js';
import { readManifest, readRolloutStates, writeRolloutState } from './state.js';
import { batchStatus, formatStatus, type BatchStatus } from './status.js';

export interface CancelSummary {
  /** The lab pid that was asked to stop, when one was running. */
  stoppedLab: number | null;
  removed: string[];
  requeued: string[];
  /** The batch had already finished: nothing was done. */
  finished: boolean;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function cancelBatch(dirArg: string, opts: { waitMs?: number; log?: (line: string) => void } = {}): Promise<CancelSummary> {
  const dir = resolve(dirArg);
  const manifest = readManifest(dir);
  const held = labState(dir);
  if (held.state !== 'running' && readRolloutStates(dir, manifest).every((s) => s.state === 'done' || s.state === 'discarded')) {
    // Finished: nothing to stop, but what it left behind (a cluster batch's finished Jobs and proxy) goes.
    // Its results are safe in the directory, so a backend that cannot be reached is reported, not fatal.
    const removed = await (
      await backendModule(manifest.backend)
    )
      .cleanup(manifest, opts.log ?? (() => {}), { finished: true })
      .catch((err: unknown) => {
        opts.log?.(
          `could not remove what finished batch ${manifest.batch_id} left on its ${manifest.backend} backend: ${(err as Error).message}`,
        );
        return [] as string[];
      });
    return { stoppedLab: null, removed, requeued: [], finished: true };
  }
  requestCancel(dir);
  let stoppedLab: number | null = null;
  if (held.state === 'running') {
    stoppedLab = held.lock!.pid;
    opts.log?.(`asked lab pid ${stoppedLab} to stop the batch; waiting for its rollouts to stop`);
    const end = Date.now() + (opts.waitMs ?? 120_000);
    while (labState(dir).state === 'running') {
      if (Date.now() > end)
        throw new Error(
          `lab pid ${stoppedLab} did not stop within ${Math.round((opts.waitMs ?? 120_000) / 1000)} s; it will stop at its next check of ${labPaths(dir).cancel}`,
        );
      await sleep(250);
    }
  }
  // Whatever is left (a dead lab's containers or Jobs, or ones a stopped lab could not remove).
  const removed = await (await backendModule(manifest.backend)).cleanup(manifest, opts.log ?? (() => {}));
  const requeued: string[] = [];
  for (const s of readRolloutStates(dir, manifest)) {
    if (s.state !== 'running') continue;
    const last = s.attempts[s.attempts.length - 1];
    if (last && last.outcome === 'running')
      Object.assign(last, { outcome: 'cancelled', ended_at: new Date().toISOString(), trainable: false });
    Object.assign(s, { state: 'queued', error: 'stopped by batch cancel; queued again for batch resume' });
    writeRolloutState(dir, s);
    requeued.push(s.rollout_id);
  }
  if (labState(dir).state === 'interrupted') rmSync(labPaths(dir).lock, { force: true });
  return { stoppedLab, removed, requeued, finished: false };
}

/**
 * Re-renders the status whenever it changes until the batch is finished or no lab runs it any more;
 * resolves with the last status.
 */
export async function watchBatch(
  dirArg: string,
  write: (text: string) => void,
  opts: { intervalMs?: number; rollouts?: boolean; stallAfterS?: number } = {},
): Promise<BatchStatus> {
  let last = '';
  for (;;) {
    const st = batchStatus(dirArg, { stallAfterS: opts.stallAfterS });
    const text = formatStatus(st, { rollouts: opts.rollouts });
    if (text !== last) write(`${last ? '\n' : ''}${new Date().toISOString()}\n${text}`);
    last = text;
    if (st.lab !== 'running') return st;
    await sleep(opts.intervalMs ?? 1000);
  }
}
