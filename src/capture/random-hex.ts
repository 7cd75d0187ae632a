// Random hex ids on the hot path (call ids, completion ids), drawn from a pooled buffer: a synchronous
// trip into OpenSSL for 6-12 bytes per call showed in the hot-path bench's profiles (randomFillSync
// 1.2% of the main thread at 1,000 sessions; randomBytes(12) 23 us a call in token in). Ids only:
// secrets (session and admin keys) draw their own bytes.
import { randomBytes } from 'node:crypto';

const POOL_BYTES = 4096;
let pool = Buffer.alloc(0);
let at = 0;

/** `length` random lower-case hex digits (at most 2 x POOL_BYTES). */
export function randomHex(length: number): string {
  const bytes = Math.ceil(length / 2);
  if (at + bytes > pool.length) {
    pool = randomBytes(Math.max(POOL_BYTES, bytes));
    at = 0;
  }
  at += bytes;
  const hex = pool.toString('hex', at - bytes, at);
  return hex.length === length ? hex : hex.slice(0, length);
}
