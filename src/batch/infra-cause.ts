// Infra failures by class: what failed when a rollout was discarded as infra_error (classify.ts), so a
// batch, a served group and a training run can report their infra-failed rate with its causes, and
// the circuit breaker (breaker.ts) can name what it saw.
/** The classes, most specific first (batch status and /metrics count these). */
export const INFRA_CAUSES = [
  'backend_down',
  'image_build',
  'quota',
  'api_refused',
  'sandbox_setup',
  'startup_timeout',
  'sandbox_lost',
  'harness_crash',
  'verifier',
  'no_model_calls',
  'capture',
  /** Stopped from outside before its end (a server whose trainer went away). */
  'stopped',
  'other',
] as const;
export type InfraCause = (typeof INFRA_CAUSES)[number];

/**
 * The class of an infra failure from what classify.ts and the backends say. Backends report facts in
 * prose (their users read them); this is the one place that reads the prose back into a class.
 */
export function infraCause(error: string, setupFailure = false): InfraCause {
  const e = error.toLowerCase();
  if (/cannot connect to the docker daemon|docker daemon|docker\.sock|econnrefused|is the docker daemon running/.test(e))
    return 'backend_down';
  if (/cluster .*unreachable|api server .*(unreachable|not answer)|getaddrinfo|etimedout|socket hang up/.test(e)) return 'backend_down';
  if (/exceeded quota|resourcequota|quota exceeded|insufficient (cpu|memory)|unschedulable/.test(e)) return 'quota';
  if (/forbidden|violates podsecurity|admission|\b403\b|denied|refused the/.test(e)) return 'api_refused';
  if (/start-?up .*(budget|deadline)|did not start within/.test(e)) return 'startup_timeout';
  if (/image|build|dockerfile|imagepull|errimage/.test(e)) return 'image_build';
  if (setupFailure) return 'sandbox_setup';
  if (/oomkilled|evicted|sandbox (was )?(lost|removed|gone)|killed from outside|container .*(gone|removed)/.test(e)) return 'sandbox_lost';
  if (/killed by signal/.test(e)) return 'harness_crash';
  if (/verifier/.test(e)) return 'verifier';
  if (/no model calls/.test(e)) return 'no_model_calls';
  if (/capture/.test(e)) return 'capture';
  return 'other';
}
