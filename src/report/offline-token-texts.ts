// Prompt-token texts with no engine running: read from the model's own tokenizer. For the embedded
// engine that is the GGUF's vocabulary (node-llama-cpp loads it vocabulary-only); for any other
// model a tokenizer.json next to the model or in the Hugging Face cache, decoded by
// @huggingface/tokenizers. Where neither is found the result says why and how to get text.
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { isTokenId } from '../capture/token-ids.js';
import type { TokenTextResult } from '../capture/token-text.js';
import type { ViewerData } from '../protocol/viewer-data.js';
import { TINY_MODEL_NAME, defaultDataDir, tinyModelPath } from '../engine/tiny-model.js';

export type TokenizerSource = { kind: 'gguf'; path: string } | { kind: 'tokenizer.json'; path: string };

export interface FindTokenizerOptions {
  /** Data directories the embedded engine may have built its model in (HARNESS_LAB_DATA_DIR, the extension's storage). */
  dataDirs?: string[];
  env?: NodeJS.ProcessEnv;
}

/** `<HF_HUB_CACHE>` or `<HF_HOME>/hub` or `~/.cache/huggingface/hub` (huggingface_hub's own order). */
export function huggingFaceHubCache(env: NodeJS.ProcessEnv = process.env): string {
  if (env.HF_HUB_CACHE) return env.HF_HUB_CACHE;
  const home = env.HF_HOME || join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'huggingface');
  return join(home, 'hub');
}

/** The newest snapshot's tokenizer.json of a model in the HF cache (`models--org--name/snapshots/<rev>/`). */
function hubTokenizer(model: string, env: NodeJS.ProcessEnv): string | undefined {
  if (!/^[\w.-]+(\/[\w.-]+)?$/.test(model)) return undefined;
  const snapshots = join(huggingFaceHubCache(env), `models--${model.replace('/', '--')}`, 'snapshots');
  if (!existsSync(snapshots)) return undefined;
  const found = readdirSync(snapshots)
    .map((rev) => join(snapshots, rev, 'tokenizer.json'))
    .filter((p) => existsSync(p))
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  return found[0];
}

/** Where the model's tokenizer is on this machine, for each model name a capture may carry. */
export function findTokenizer(models: readonly string[], opts: FindTokenizerOptions = {}): TokenizerSource | null {
  const env = opts.env ?? process.env;
  for (const model of models) {
    if (!model) continue;
    if (model === TINY_MODEL_NAME || model === TINY_MODEL_NAME.split('/').pop()) {
      for (const dir of [...(opts.dataDirs ?? []), env.HARNESS_LAB_DATA_DIR || defaultDataDir()]) {
        const path = tinyModelPath(0, dir);
        if (existsSync(path)) return { kind: 'gguf', path };
      }
    }
    if (model.endsWith('.gguf') && existsSync(model)) return { kind: 'gguf', path: model };
    // A local model folder (vLLM serves `--model /path/to/dir` under that name), or a file inside one.
    for (const dir of [model, dirname(model)]) {
      const candidate = join(dir, 'tokenizer.json');
      if (dir.startsWith('/') && existsSync(candidate)) return { kind: 'tokenizer.json', path: candidate };
    }
    const hub = hubTokenizer(model, env);
    if (hub) return { kind: 'tokenizer.json', path: hub };
  }
  return null;
}

async function ggufTexts(path: string, ids: readonly number[]): Promise<Map<number, string>> {
  const { getCpuLlama } = await import('../engine/llama-runtime.js');
  const llama = await getCpuLlama();
  const model = await llama.loadModel({ modelPath: path, vocabOnly: true });
  try {
    const tokens = (model.fileInfo.metadata as { tokenizer?: { ggml?: { tokens?: unknown } } }).tokenizer?.ggml?.tokens;
    const n = Array.isArray(tokens) ? tokens.length : Infinity;
    const out = new Map<number, string>();
    for (const id of ids) if (id < n) out.set(id, model.detokenize([id as never], true));
    return out;
  } finally {
    await model.dispose();
  }
}

async function tokenizerJsonTexts(path: string, ids: readonly number[]): Promise<Map<number, string>> {
  const { Tokenizer } = await import('@huggingface/tokenizers');
  const json = JSON.parse(readFileSync(path, 'utf8')) as object;
  const configPath = join(dirname(path), 'tokenizer_config.json');
  const config = existsSync(configPath) ? (JSON.parse(readFileSync(configPath, 'utf8')) as object) : {};
  const tokenizer = new Tokenizer(json, config);
  const out = new Map<number, string>();
  for (const id of ids) out.set(id, tokenizer.decode([id], { skip_special_tokens: false }));
  return out;
}

/** Texts of `ids` from the first model name whose tokenizer is on this machine. */
export async function offlineTokenTexts(
  models: readonly string[],
  ids: readonly number[],
  opts: FindTokenizerOptions = {},
): Promise<TokenTextResult & { source: TokenizerSource | null }> {
  const wanted = [...new Set(ids)].filter(isTokenId);
  const names = [...new Set(models.filter(Boolean))];
  const source = findTokenizer(names, opts);
  if (!source) {
    const model = names[0] ?? '(unknown model)';
    return {
      texts: {},
      missing: wanted,
      source,
      problem:
        `no tokenizer for ${model} on this machine, so prompt tokens are shown as ids. To see text: open the rollout while its engine runs ` +
        `(the viewer asks the engine's /detokenize), pass --engine URL to harness-lab report, or put the model's tokenizer.json in the ` +
        `Hugging Face cache (${huggingFaceHubCache(opts.env)}, e.g. \`huggingface-cli download ${model} tokenizer.json\`).`,
    };
  }
  try {
    const map = source.kind === 'gguf' ? await ggufTexts(source.path, wanted) : await tokenizerJsonTexts(source.path, wanted);
    const texts: Record<string, string> = {};
    const missing: number[] = [];
    for (const id of wanted) {
      const t = map.get(id);
      if (t === undefined) missing.push(id);
      else texts[id] = t;
    }
    return {
      texts,
      missing,
      source,
      problem: missing.length ? `${missing.length} id(s) are outside the vocabulary of ${source.path}` : null,
    };
  } catch (err) {
    return {
      texts: {},
      missing: wanted,
      source,
      problem: `could not read the tokenizer ${source.path}: ${err instanceof Error ? err.message : String(err)}`,
    };
  }
}

/** Every model name a rollout names (the engine-side request's model first: that is the engine's own name). */
export function modelNamesOf(data: ViewerData, doc: { calls: { model: string | null; engine_request: unknown }[] } | null): string[] {
  const engineSide = (doc?.calls ?? [])
    .map((c) => (c.engine_request as { model?: unknown } | null)?.model)
    .filter((m): m is string => typeof m === 'string');
  const recorded = [...(doc?.calls ?? []).map((c) => c.model), ...data.turns.map((t) => t.model)].filter(
    (m): m is string => typeof m === 'string',
  );
  return [...new Set([...engineSide, ...recorded])];
}
