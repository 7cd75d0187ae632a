// Texts of prompt tokens for the rollout viewer, from the engine's own tokenizer. vLLM answers
// `POST /detokenize {model, tokens}` with `{prompt}`; llama.cpp answers it with `{content}` and can
// also split text into `{id, piece}` pairs with `POST /tokenize {content, with_pieces: true}`, which
// names thousands of ids in one call. Texts are cached by id, once per engine, for the process lifetime.
import { z } from 'zod';
import { EngineClient, normaliseEngineUrl } from './engine-client.js';
import { isTokenId } from './token-ids.js';

const VllmDetok = z.looseObject({ prompt: z.string() });
const LlamaDetok = z.looseObject({ content: z.string() });
const LlamaPieces = z.looseObject({
  tokens: z.array(z.union([z.looseObject({ id: z.int(), piece: z.union([z.string(), z.array(z.int().min(0).max(255))]) }), z.int()])),
});

export interface TokenTextResult {
  /** id -> text for every requested id the engine could name. */
  texts: Record<string, string>;
  /** Requested ids the engine could not name (shown as ids). */
  missing: number[];
  /** Why some or all texts are missing, in the user's terms; null when all arrived. */
  problem: string | null;
}

type EngineKind = 'vllm' | 'llama.cpp' | 'none';

interface EngineCache {
  texts: Map<number, string>;
  kind: EngineKind | null;
}

const caches = new Map<string, EngineCache>();

/** Forget every cached text (tests). */
export function clearTokenTextCache(): void {
  caches.clear();
}

export interface TokenTextOptions {
  model?: string;
  apiKey?: string;
  /** Parallel single-id requests. Default 8. */
  concurrency?: number;
  signal?: AbortSignal;
}

function pieceText(piece: string | number[]): string {
  if (typeof piece === 'string') return piece;
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(new Uint8Array(piece));
  } catch {
    return piece.map((b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : `\\x${b.toString(16).padStart(2, '0')}`)).join('');
  }
}

export async function fetchTokenTexts(engineUrl: string, ids: readonly number[], opts: TokenTextOptions = {}): Promise<TokenTextResult> {
  const key = normaliseEngineUrl(engineUrl);
  let cache = caches.get(key);
  if (!cache) caches.set(key, (cache = { texts: new Map(), kind: null }));
  const wanted = [...new Set(ids)].filter(isTokenId);
  let todo = wanted.filter((id) => !cache.texts.has(id));
  let problem: string | null = null;
  if (todo.length > 0 && cache.kind !== 'none') {
    const client = new EngineClient(engineUrl, { connections: opts.concurrency ?? 8, ...(opts.apiKey ? { apiKey: opts.apiKey } : {}) });
    try {
      const detok = async (tokens: number[]): Promise<string | null> => {
        const reply = await client.post('/detokenize', { ...(opts.model ? { model: opts.model } : {}), tokens }, opts.signal);
        if (reply.status !== 200) {
          if (reply.status === 404 || reply.status === 405) cache.kind = 'none';
          throw new Error(`/detokenize answered ${reply.status}`);
        }
        const v = VllmDetok.safeParse(reply.body);
        if (v.success) {
          cache.kind ??= 'vllm';
          return v.data.prompt;
        }
        const l = LlamaDetok.safeParse(reply.body);
        if (l.success) {
          cache.kind ??= 'llama.cpp';
          return l.data.content;
        }
        throw new Error('/detokenize answered neither {prompt} nor {content}');
      };
      // The first id tells which engine this is.
      const first = todo[0]!;
      cache.texts.set(first, (await detok([first])) ?? '');
      todo = todo.slice(1);
      if (cache.kind === 'llama.cpp' && todo.length > 1) {
        // One detokenize of everything, then pieces for every id the retokenisation reproduces.
        const text = await detok(todo);
        const reply = await client.post(
          '/tokenize',
          { content: text, with_pieces: true, add_special: false, parse_special: true },
          opts.signal,
        );
        const pieces = LlamaPieces.safeParse(reply.body);
        if (reply.status === 200 && pieces.success) {
          for (const t of pieces.data.tokens)
            if (typeof t === 'object' && !cache.texts.has(t.id)) cache.texts.set(t.id, pieceText(t.piece));
        }
        todo = todo.filter((id) => !cache.texts.has(id));
      }
      let next = 0;
      const worker = async () => {
        while (next < todo.length) {
          const id = todo[next++]!;
          const text = await detok([id]);
          if (text !== null) cache.texts.set(id, text);
        }
      };
      await Promise.all(Array.from({ length: Math.min(opts.concurrency ?? 8, todo.length) }, worker));
    } catch (err) {
      if (opts.signal?.aborted) throw err;
      problem =
        (cache.kind as EngineKind | null) === 'none'
          ? `the engine at ${key} has no /detokenize route; prompt tokens are shown as ids`
          : `token texts from ${key} are incomplete: ${err instanceof Error ? err.message : String(err)}`;
    } finally {
      await client.close();
    }
  } else if (todo.length > 0) {
    problem = `the engine at ${key} has no /detokenize route; prompt tokens are shown as ids`;
  }
  const texts: Record<string, string> = {};
  const missing: number[] = [];
  for (const id of wanted) {
    const t = cache.texts.get(id);
    if (t === undefined) missing.push(id);
    else texts[id] = t;
  }
  return { texts, missing, problem };
}
