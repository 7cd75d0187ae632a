// The capture contract an export relies on and a trainer never re-checks. TRL's harness worker treats a
// bad turn as fatal (it stops and closes every in-flight session), so a call that breaks it stops the
// export instead, naming the file, the session and the call, rather than reaching a trainer.
import { tokensDigestMatches } from '../capture/render/digest.js';
import { firstNonTokenId } from '../capture/token-ids.js';
import type { CallRecord } from '../capture/types.js';

export class ExportContractError extends Error {
  constructor(
    readonly file: string,
    readonly sessionId: string,
    readonly callId: string | null,
    readonly problem: string,
  ) {
    super(`${file}: session ${sessionId}${callId ? `, call ${callId}` : ''}: ${problem}`);
    this.name = 'ExportContractError';
  }
}

/** The first contract violation of one call, or null. `completion_token_ids` may be empty (nothing sampled). */
export function callContractProblem(call: CallRecord): string | null {
  const where = `(index ${call.index})`;
  const prompt = call.prompt_token_ids;
  if (!Array.isArray(prompt) || prompt.length === 0) return `${where} empty prompt ids: the engine returned no prompt_token_ids`;
  const bad = firstNonTokenId(prompt);
  if (bad >= 0) return `${where} prompt id at position ${bad} is not a non-negative integer (${JSON.stringify(prompt[bad])})`;
  const completion = call.completion_token_ids ?? [];
  if (!Array.isArray(completion)) return `${where} completion_token_ids is not an array`;
  const badC = firstNonTokenId(completion);
  if (badC >= 0) return `${where} completion id at position ${badC} is not a non-negative integer (${JSON.stringify(completion[badC])})`;
  if (completion.length === 0) return null;
  const lps = call.logprobs as unknown;
  if (!Array.isArray(lps)) return `${where} missing logprobs for ${completion.length} completion tokens`;
  if (lps.length !== completion.length)
    return `${where} mask length mismatch: ${lps.length} logprobs for ${completion.length} completion tokens`;
  for (let i = 0; i < lps.length; i++) {
    const lp: unknown = lps[i];
    // NaN does not survive JSON: it is written as null.
    if (typeof lp !== 'number' || !Number.isFinite(lp))
      return `${where} NaN or non-finite logprob at completion position ${i} (${JSON.stringify(lp)})`;
    if (lp > 0) return `${where} positive logprob ${lp} at completion position ${i}`;
  }
  // Token-in records carry a digest of their tokens as the proxy recorded them: a stored record whose
  // prompt ids, sampled ids or logprobs changed since (one token is enough) is not trained on.
  const digest = call.render?.tokens_digest;
  if (digest !== undefined && !tokensDigestMatches(digest, prompt, completion, lps as number[])) {
    return `${where} tokens differ from what the proxy recorded (tokens_digest mismatch): the stored prompt ids, sampled ids or logprobs were changed`;
  }
  return null;
}

/** Throws ExportContractError for the first call (in arrival order) that breaks the contract. */
export function checkCalls(file: string, sessionId: string, calls: Iterable<CallRecord>): void {
  for (const call of calls) {
    const problem = callContractProblem(call);
    if (problem) throw new ExportContractError(file, sessionId, call.call_id, problem);
  }
}

/** A row's own alignment: ids, mask and logprobs of equal length, masks 0/1, masked logprobs 0. */
export function checkAligned(
  file: string,
  sessionId: string,
  what: string,
  ids: readonly number[],
  mask: readonly number[],
  logprobs: readonly number[],
): void {
  if (ids.length !== mask.length || ids.length !== logprobs.length) {
    throw new ExportContractError(
      file,
      sessionId,
      null,
      `${what}: mask length mismatch (${ids.length} ids, ${mask.length} mask, ${logprobs.length} logprobs)`,
    );
  }
  for (let i = 0; i < mask.length; i++) {
    if (mask[i] !== 0 && mask[i] !== 1) throw new ExportContractError(file, sessionId, null, `${what}: mask value ${mask[i]} at ${i}`);
    if (mask[i] === 0 && logprobs[i] !== 0)
      throw new ExportContractError(file, sessionId, null, `${what}: masked position ${i} carries logprob ${logprobs[i]}`);
  }
}
