// Which lab process runs a batch: `<batch>/lab.lock` (pid, host), created exclusively, removed on a
// clean exit. A lock whose process is gone is what `kill -9` leaves: the batch is interrupted, and
// the next `batch resume` takes it over. `<batch>/cancel.json` is how `batch cancel` asks a running
// lab to stop (a file, so it works from any process, and across a lab restart).
import { closeSync, existsSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { processAlive } from '../sandbox/runtime.js';
import { writeJsonAtomic } from './state.js';

export const labPaths = (dir: string) => ({ lock: join(dir, 'lab.lock'), cancel: join(dir, 'cancel.json') });

const LockSchema = z.object({ pid: z.number().int(), host: z.string(), started_at: z.string(), command: z.string() }).strict();
export type LabLock = z.infer<typeof LockSchema>;

export class BatchBusyError extends Error {}

export function readLock(dir: string): LabLock | null {
  const file = labPaths(dir).lock;
  if (!existsSync(file)) return null;
  try {
    return LockSchema.parse(JSON.parse(readFileSync(file, 'utf8')));
  } catch {
    return null; // torn by a kill between create and write: nobody holds it
  }
}

/** 'running' (a live lab holds the batch), 'interrupted' (its lab is gone) or 'idle' (no lab). */
export function labState(dir: string): { state: 'running' | 'interrupted' | 'idle'; lock: LabLock | null } {
  const lock = readLock(dir);
  if (!lock) return { state: existsSync(labPaths(dir).lock) ? 'interrupted' : 'idle', lock };
  if (lock.host !== hostname()) return { state: 'running', lock }; // another machine's lab: cannot tell, assume alive
  return { state: processAlive(lock.pid) ? 'running' : 'interrupted', lock };
}

/** Takes the batch for this process; a lock left by a dead lab is taken over (returned as `previous`). */
export function acquireLock(dir: string, command: string): { release(): void; previous: LabLock | null } {
  const file = labPaths(dir).lock;
  const mine: LabLock = { pid: process.pid, host: hostname(), started_at: new Date().toISOString(), command };
  let previous: LabLock | null = null;
  for (let tries = 0; ; tries++) {
    try {
      const fd = openSync(file, 'wx');
      writeSync(fd, JSON.stringify(mine));
      closeSync(fd);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || tries > 2) throw err;
      const held = labState(dir);
      if (held.state === 'running')
        throw new BatchBusyError(
          `${dir} is being run by pid ${held.lock!.pid} on ${held.lock!.host} (since ${held.lock!.started_at}); ` +
            `watch it with \`harness-lab batch watch ${dir}\` or stop it with \`harness-lab batch cancel ${dir}\``,
        );
      previous = held.lock;
      rmSync(file, { force: true });
    }
  }
  return {
    previous,
    release: () => {
      if (readLock(dir)?.pid === process.pid) rmSync(file, { force: true });
    },
  };
}

export function requestCancel(dir: string): void {
  writeJsonAtomic(labPaths(dir).cancel, { requested_at: new Date().toISOString(), by_pid: process.pid });
}

export function cancelRequested(dir: string): boolean {
  return existsSync(labPaths(dir).cancel);
}

export function clearCancel(dir: string): void {
  rmSync(labPaths(dir).cancel, { force: true });
}
