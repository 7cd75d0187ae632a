// Gemini function-call ids are optional on the wire, and some harnesses drop them when they replay
// history (pi's google-generative-ai provider sends functionCall and functionResponse without `id`).
// The proxy gave every call an id when it answered, so a missing one is restored from this session's
// earlier answers: a replayed functionCall takes the id of the earlier call with the same name and
// arguments, and a functionResponse without id the id of the pending call of that name before it.
// The recorded request body stays as received; only what goes on to the engine carries the ids.
import type { CallRecord, JsonObject } from '../types.js';
import { isObject } from './common.js';

export interface RestoredIds {
  body: JsonObject;
  /** How many functionCall / functionResponse parts got an id; 0 leaves `body` the input object. */
  restored: number;
  /** A finding for the call record, or undefined when nothing was restored. */
  finding: string | undefined;
}

function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (isObject(value))
    return `{${Object.keys(value)
      .sort()
      .filter((k) => value[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`)
      .join(',')}}`;
  return JSON.stringify(value) ?? 'null';
}

function argsKey(name: string, args: unknown): string {
  let parsed = args;
  if (typeof args === 'string') {
    try {
      parsed = JSON.parse(args);
    } catch {
      parsed = args;
    }
  }
  return `${name}\u0000${canonical(parsed ?? {})}`;
}

/** The ids the proxy answered with, earliest first, by (name, canonical arguments). */
/**
 * How far back the ids are looked for. A harness replays the ids of its own recent turns; scanning a
 * whole long session on every call made the cost quadratic in its length (10,000 fuzzed calls took
 * minutes).
 */
export const ID_LOOKBACK_CALLS = 256;

function answeredIds(previous: readonly CallRecord[]): Map<string, string[]> {
  const byKey = new Map<string, string[]>();
  for (const record of previous.slice(-ID_LOOKBACK_CALLS)) {
    for (const call of record.engine_response?.choices?.[0]?.message?.tool_calls ?? []) {
      if (!call?.id || !call.function?.name) continue;
      const key = argsKey(call.function.name, call.function.arguments);
      const list = byKey.get(key) ?? [];
      list.push(call.id);
      byKey.set(key, list);
    }
  }
  return byKey;
}

const hasId = (v: JsonObject) => typeof v.id === 'string' && v.id !== '';

/**
 * `previous`: the session's earlier calls, or a function that reads them, called only when a part
 * lacks its id (a session kept only in the store is then read back; gemini-cli sends every id).
 */
export function restoreGeminiCallIds(body: JsonObject, previous: readonly CallRecord[] | (() => readonly CallRecord[])): RestoredIds {
  const contents = Array.isArray(body.contents) ? body.contents : [];
  const missing = contents.some(
    (c) =>
      isObject(c) &&
      Array.isArray(c.parts) &&
      c.parts.some((p) => {
        const inner = isObject(p) ? (p.functionCall ?? p.function_call ?? p.functionResponse ?? p.function_response) : undefined;
        return isObject(inner) && !hasId(inner);
      }),
  );
  if (!missing) return { body, restored: 0, finding: undefined };

  const answered = answeredIds(typeof previous === 'function' ? previous() : previous);
  const used = new Set<string>();
  let restored = 0;
  let unmatched = 0;
  // Calls of the latest model turn still waiting for their response, by name, in order.
  let pending = new Map<string, string[]>();
  const newContents = contents.map((content) => {
    if (!isObject(content) || !Array.isArray(content.parts)) return content;
    const isModel = content.role === 'model' || content.role === 'assistant';
    if (isModel) pending = new Map();
    const parts = content.parts.map((part) => {
      if (!isObject(part)) return part;
      const callKey = part.functionCall !== undefined ? 'functionCall' : part.function_call !== undefined ? 'function_call' : undefined;
      const call = callKey ? part[callKey] : undefined;
      if (callKey && isObject(call) && typeof call.name === 'string') {
        let id = hasId(call) ? (call.id as string) : undefined;
        if (!id) {
          id = (answered.get(argsKey(call.name, call.args ?? {})) ?? []).find((candidate) => !used.has(candidate));
          if (id) restored++;
          else unmatched++;
        }
        if (!id) return part;
        used.add(id);
        const list = pending.get(call.name) ?? [];
        list.push(id);
        pending.set(call.name, list);
        return hasId(call) ? part : { ...part, [callKey]: { ...call, id } };
      }
      const responseKey =
        part.functionResponse !== undefined ? 'functionResponse' : part.function_response !== undefined ? 'function_response' : undefined;
      const response = responseKey ? part[responseKey] : undefined;
      if (responseKey && isObject(response) && typeof response.name === 'string') {
        const waiting = pending.get(response.name) ?? [];
        if (hasId(response)) {
          const at = waiting.indexOf(response.id as string);
          if (at >= 0) waiting.splice(at, 1);
          return part;
        }
        const id = waiting.shift();
        if (!id) {
          unmatched++;
          return part;
        }
        restored++;
        return { ...part, [responseKey]: { ...response, id } };
      }
      return part;
    });
    return { ...content, parts };
  });
  if (!restored)
    return {
      body,
      restored: 0,
      finding: unmatched
        ? `[INFO] call_ids_missing: ${unmatched} functionCall/functionResponse part(s) came without an id and match no earlier answer of this session`
        : undefined,
    };
  const tail = unmatched ? `; ${unmatched} more had no match` : '';
  return {
    body: { ...body, contents: newContents },
    restored,
    finding:
      `[INFO] call_ids_restored: ${restored} functionCall/functionResponse part(s) came without an id (the ` +
      `harness dropped them on replay) and got the id of this session's earlier answer${tail}`,
  };
}
