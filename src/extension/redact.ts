// Scrubs secrets out of anything that goes to the log: session keys act as API keys, and the admin
// key and engine credentials must never appear in an output channel.
const HEADER_SECRET =
  /\b(authorization|x-api-key|x-goog-api-key|api-key|proxy-authorization)(["']?\s*[:=]\s*["']?)(bearer\s+)?[^\s"',}]+/gi;
const BEARER = /\b(bearer\s+)[A-Za-z0-9._~+/=-]{6,}/gi;
const KEY_VAR = /\b([A-Z0-9_]*(?:API_KEY|AUTH_TOKEN|ADMIN_KEY|SECRET)[A-Z0-9_]*)(=|:\s*)("?)[^\s"]+/g;
const SK_TOKEN = /\bsk-[A-Za-z0-9_-]{8,}/g;

export const REDACTED = '<redacted>';

/** Replaces known secret shapes and every literal in `secrets` (if 4+ characters long). */
export function redact(text: string, secrets: Iterable<string> = []): string {
  let out = text;
  for (const secret of secrets) {
    if (secret.length >= 4) out = out.split(secret).join(REDACTED);
  }
  return out
    .replace(HEADER_SECRET, (_m, name: string, sep: string, bearer: string | undefined) => `${name}${sep}${bearer ?? ''}${REDACTED}`)
    .replace(BEARER, (_m, prefix: string) => `${prefix}${REDACTED}`)
    .replace(KEY_VAR, (_m, name: string, sep: string, quote: string) => `${name}${sep}${quote}${REDACTED}`)
    .replace(SK_TOKEN, REDACTED);
}
