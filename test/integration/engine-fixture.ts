// Shared by the engine integration tests: every test file starts its own engine on the tiny model,
// built once per machine into a shared cache directory.
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ChatResponse } from '../../src/capture/types.js';
import { startEmbeddedEngine, type EmbeddedEngine, type EmbeddedEngineOptions } from '../../src/engine/embedded-engine.js';

export const TEST_DATA_DIR = process.env.HARNESS_LAB_DATA_DIR ?? join(tmpdir(), 'harness-lab-test-data');

export function startTestEngine(opts: EmbeddedEngineOptions = {}): Promise<EmbeddedEngine> {
  return startEmbeddedEngine({ dataDir: TEST_DATA_DIR, ...opts });
}

export async function post(url: string, path: string, body: unknown): Promise<{ status: number; body: unknown; text: string }> {
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // SSE or plain text stays a string
  }
  return { status: res.status, body: parsed, text };
}

/** A chat completion that must succeed; returns the vLLM-shaped answer. */
export async function chat(url: string, body: Record<string, unknown>): Promise<ChatResponse> {
  const r = await post(url, '/v1/chat/completions', body);
  if (r.status !== 200) throw new Error(`chat completion answered ${r.status}: ${r.text}`);
  return r.body as ChatResponse;
}

/** What the proxy asks for at the tokens capture level. */
export const CAPTURE_FIELDS = {
  logprobs: true,
  top_logprobs: 0,
  return_token_ids: true,
  return_tokens_as_token_ids: true,
  top_p: 1,
  top_k: -1,
  min_p: 0,
};
