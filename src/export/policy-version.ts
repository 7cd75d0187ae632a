// Which policy (weights version) sampled a call. Staleness is only meaningful per call: a long rollout
// can straddle a weight update, and TRL's async GRPO drops samples more than `max_staleness` optimizer
// steps old. A call carries its version, most specific first:
//   1. the request header `x-harness-lab-policy-version` (recorded as received in `request.headers`),
//      set by whoever forwards the call and knows the serving weights (a batch runner, a gateway, a trainer);
//   2. the session's metadata `policy_version` (the batch runner stamps the version it created the session under);
//   3. the rollout's state `policy_version`, then the batch manifest's.
import type { CallRecord, JsonObject } from '../capture/types.js';

export const POLICY_VERSION_HEADER = 'x-harness-lab-policy-version';
export const POLICY_VERSION_METADATA_KEY = 'policy_version';

export type PolicyVersionSource = 'header' | 'session' | 'rollout' | 'batch';

export interface CallPolicyVersion {
  version: string | null;
  source: PolicyVersionSource | null;
}

function asVersion(value: unknown): string | null {
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  if (typeof value === 'string' && value.trim() !== '') return value.trim();
  return null;
}

export function sessionPolicyVersion(metadata: JsonObject | undefined): string | null {
  return asVersion(metadata?.[POLICY_VERSION_METADATA_KEY]);
}

export function callPolicyVersion(
  call: Pick<CallRecord, 'request'>,
  fallbacks: { session?: string | null; rollout?: string | null; batch?: string | null },
): CallPolicyVersion {
  const header = asVersion(call.request?.headers?.[POLICY_VERSION_HEADER]);
  if (header !== null) return { version: header, source: 'header' };
  if (fallbacks.session) return { version: fallbacks.session, source: 'session' };
  if (fallbacks.rollout) return { version: fallbacks.rollout, source: 'rollout' };
  if (fallbacks.batch) return { version: fallbacks.batch, source: 'batch' };
  return { version: null, source: null };
}

/**
 * The ordinal of a version: an integer optimizer step ("12"), or a name ending in one ("step-12",
 * "v12", "ckpt_0012"). Null when it has none; such versions are reported but never counted stale.
 */
export function versionOrdinal(version: string): number | null {
  const m = /(\d+)$/.exec(version);
  if (!m) return null;
  const n = Number(m[1]);
  return Number.isSafeInteger(n) ? n : null;
}

/** Versions sorted by ordinal (unordered ones last, by name). */
export function sortVersions(versions: Iterable<string>): string[] {
  return [...new Set(versions)].sort((a, b) => {
    const x = versionOrdinal(a);
    const y = versionOrdinal(b);
    if (x !== null && y !== null && x !== y) return x - y;
    if (x === null && y !== null) return 1;
    if (y === null && x !== null) return -1;
    return a < b ? -1 : a > b ? 1 : 0;
  });
}
