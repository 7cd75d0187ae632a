// What a batch leaves on its backend, removed when nobody needs it any more: a finished cluster
// batch's capture proxy (Deployment, Service, Secret, NetworkPolicy), its tests ConfigMaps and its
// Jobs; a Docker batch's leftover containers. `teardownBatch` runs when a lab finishes a batch (unless
// the user keeps them: `--keep`, the setting harnessLab.keepClusterObjects) and as `batch teardown`;
// `deleteBatch` tears down and removes the batch directory. Neither touches a batch a lab is running.
import { rmSync } from 'node:fs';
import { resolve } from 'node:path';
import type { BackendModule } from './backend.js';
import { backendModule } from './backends/index.js';
import { labState } from './lock.js';
import { readManifest } from './state.js';
import { batchStatus } from './status.js';

export class BatchRunningError extends Error {}

export interface TeardownSummary {
  batchId: string;
  backend: 'docker' | 'k8s';
  /** Jobs or containers removed (the proxy and ConfigMaps of a cluster batch are removed too, by name and label). */
  removed: string[];
  /** Whether the batch had finished (an unfinished one can still be resumed: a new proxy is made then). */
  finished: boolean;
}

/** Should the lab that just ran a batch tear it down? Only when it ran to its end, and nobody asked to keep it. */
export function tearDownAfterRun(summary: { stopped: string | null; queued: number }, keep: boolean): boolean {
  return !keep && summary.stopped === null && summary.queued === 0;
}

function assertNotRunning(dir: string, doing: string): void {
  const held = labState(dir);
  if (held.state === 'running')
    throw new BatchRunningError(`${dir} is being run by lab pid ${held.lock!.pid}; cancel it before you ${doing}`);
}

/**
 * Removes everything the batch left on its backend: Jobs or containers, and a cluster batch's proxy,
 * Secret, Service, NetworkPolicy and ConfigMaps. Its sessions are mirrored into the batch directory as
 * calls happen, so nothing captured is lost; `batch resume` of an unfinished batch makes a new proxy.
 */
export async function teardownBatch(
  dirArg: string,
  opts: { log?: (line: string) => void; module?: BackendModule } = {},
): Promise<TeardownSummary> {
  const dir = resolve(dirArg);
  const manifest = readManifest(dir);
  assertNotRunning(dir, 'tear it down');
  const finished = batchStatus(dir).lab === 'finished';
  const mod = opts.module ?? (await backendModule(manifest.backend));
  const removed = await mod.cleanup(manifest, opts.log ?? (() => {}), { finished: true });
  return { batchId: manifest.batch_id, backend: manifest.backend, removed, finished };
}

/**
 * Tears the batch down, then removes its directory. A backend that cannot be reached stops the delete
 * (the directory is what says which cluster objects are the batch's) unless `force`.
 */
export async function deleteBatch(
  dirArg: string,
  opts: { log?: (line: string) => void; module?: BackendModule; force?: boolean } = {},
): Promise<TeardownSummary | null> {
  const dir = resolve(dirArg);
  assertNotRunning(dir, 'delete it');
  let summary: TeardownSummary | null = null;
  try {
    summary = await teardownBatch(dir, opts);
  } catch (err) {
    if (!opts.force)
      throw new Error(
        `could not remove what batch ${dir} left on its backend, so its directory is kept (it names those objects): ${(err as Error).message}; --force deletes the directory anyway`,
        { cause: err },
      );
    opts.log?.(`could not tear down ${dir}: ${(err as Error).message}; deleting its directory anyway (--force)`);
  }
  rmSync(dir, { recursive: true, force: true });
  return summary;
}
