// The verifier's reward, as Harbor defines it: /logs/verifier/reward.json (the key `reward`, or the
// only key) or reward.txt (one number). Several named scores are never combined into one.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export class RewardError extends Error {}

export interface Reward {
  value: number;
  source: 'reward.json' | 'reward.txt';
  /** Every named score in reward.json, for the record. */
  scores: Record<string, number>;
}

function finite(v: unknown, where: string): number {
  const n = typeof v === 'boolean' ? Number(v) : typeof v === 'string' && v.trim() !== '' ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isFinite(n)) throw new RewardError(`${where} is not a finite number: ${JSON.stringify(v)}`);
  return n;
}

export function parseRewardJson(text: string): Reward {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new RewardError('reward.json is not valid JSON');
  }
  if (typeof body === 'number') return { value: finite(body, 'reward.json'), source: 'reward.json', scores: {} };
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw new RewardError('reward.json must be an object of named scores');
  const entries = Object.entries(body as Record<string, unknown>);
  const scores: Record<string, number> = {};
  for (const [k, v] of entries) if (typeof v === 'number' || typeof v === 'boolean') scores[k] = Number(v);
  if ('reward' in (body as object))
    return { value: finite((body as Record<string, unknown>).reward, 'reward.json key "reward"'), source: 'reward.json', scores };
  if (entries.length === 1) return { value: finite(entries[0]![1], `reward.json key "${entries[0]![0]}"`), source: 'reward.json', scores };
  if (entries.length === 0) throw new RewardError('reward.json has no scores');
  throw new RewardError(
    `reward.json has ${entries.length} scores (${entries.map(([k]) => k).join(', ')}) and no "reward" key; refusing to combine them`,
  );
}

export function parseRewardTxt(text: string): Reward {
  const t = text.trim();
  if (!t) throw new RewardError('reward.txt is empty');
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(t))
    throw new RewardError(`reward.txt must hold one number, got ${JSON.stringify(t.slice(0, 40))}`);
  return { value: Number(t), source: 'reward.txt', scores: {} };
}

/** Reads the reward the verifier left in its log directory (reward.json wins over reward.txt). */
export function readReward(verifierDir: string): Reward {
  const json = join(verifierDir, 'reward.json');
  if (existsSync(json)) return parseRewardJson(readFileSync(json, 'utf8'));
  const txt = join(verifierDir, 'reward.txt');
  if (existsSync(txt)) return parseRewardTxt(readFileSync(txt, 'utf8'));
  throw new RewardError('the verifier wrote neither /logs/verifier/reward.json nor reward.txt');
}
