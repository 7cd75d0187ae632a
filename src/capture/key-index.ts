// Which session a key opens, for sessions the registry no longer holds in memory (dormant ones,
// session-registry.ts): `<data-dir>/keys/<sha256 of the key>` holds the session id. Written when a
// keyed session goes dormant, not at creation, so the hot path never pays for it. It need not be
// synced: the session file's header names the same hash, and a restart rebuilds what a crash lost.
import { mkdirSync, readFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SESSION_ID_PATTERN } from './store.js';

const HASH = /^[0-9a-f]{64}$/;

function keyFileOf(dataDir: string, keySha256: string): string {
  if (!HASH.test(keySha256)) throw new Error(`not a key hash: ${JSON.stringify(keySha256.slice(0, 80))}`);
  return join(dataDir, 'keys', keySha256);
}

export function writeKeyIndex(dataDir: string, keySha256: string, sessionId: string): void {
  const file = keyFileOf(dataDir, keySha256);
  mkdirSync(join(dataDir, 'keys'), { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, sessionId);
  renameSync(tmp, file);
}

/** The session id a key hash names, or undefined (never written, removed, or not an id). */
export function readKeyIndex(dataDir: string, keySha256: string): string | undefined {
  let id: string;
  try {
    id = readFileSync(keyFileOf(dataDir, keySha256), 'utf8').trim();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  return SESSION_ID_PATTERN.test(id) ? id : undefined;
}

export function removeKeyIndex(dataDir: string, keySha256: string): void {
  try {
    unlinkSync(keyFileOf(dataDir, keySha256));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}
