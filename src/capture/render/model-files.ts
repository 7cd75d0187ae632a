// The served model's own tokenizer and chat template, read from disk: a model folder
// (tokenizer.json + tokenizer_config.json with `chat_template`, as vLLM loads them) or a GGUF file
// (its `tokenizer.ggml.*` vocabulary and `tokenizer.chat_template`, as llama.cpp loads them). A GGUF
// holds no tokenizer.json, so one is assembled from the metadata in the shape the Hugging Face
// converter writes for that vocabulary type (byte-level BPE, the pre-tokenizer regex named by
// `tokenizer.ggml.pre`); @huggingface/tokenizers then does all the tokenizing.
import { existsSync, statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';

export class ModelFilesError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ModelFilesError';
  }
}

/** Everything the renderer needs, whatever the files looked like. */
export interface ModelFiles {
  /** Where it came from (a folder or a .gguf path). */
  source: string;
  /** A tokenizer.json document. */
  tokenizerJson: Record<string, unknown>;
  /** A tokenizer_config.json document (bos/eos, chat_template, added tokens). */
  tokenizerConfig: Record<string, unknown>;
  chatTemplate: string;
  bosToken: string;
  eosToken: string;
  /** Ids that end generation (eos, end-of-turn, generation_config's eos ids). */
  stopIds: number[];
  /** Hints for telling the model family apart: architecture, model_type, tokenizer class. */
  familyHints: string[];
}

const tokenText = z.union([z.string(), z.object({ content: z.string() }).passthrough(), z.null()]).optional();
const tokenizerConfigSchema = z
  .object({
    chat_template: z.union([z.string(), z.array(z.object({ name: z.string(), template: z.string() }).passthrough())]).optional(),
    bos_token: tokenText,
    eos_token: tokenText,
    tokenizer_class: z.string().optional(),
  })
  .passthrough();
const idList = z
  .union([z.number().int().nonnegative(), z.array(z.number().int().nonnegative())])
  .optional()
  .nullable();

const textOf = (t: z.infer<typeof tokenText>): string => (t === undefined || t === null ? '' : typeof t === 'string' ? t : t.content);

async function readJsonFile(path: string): Promise<unknown> {
  try {
    return JSON.parse(await readFile(path, 'utf8'));
  } catch (err) {
    throw new ModelFilesError(`could not read ${path}: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** A model folder as vLLM reads it: tokenizer.json, tokenizer_config.json, optional chat_template.jinja and generation_config.json. */
export async function readModelDir(dir: string): Promise<ModelFiles> {
  const tokPath = join(dir, 'tokenizer.json');
  const cfgPath = join(dir, 'tokenizer_config.json');
  if (!existsSync(tokPath)) throw new ModelFilesError(`${dir} has no tokenizer.json`);
  if (!existsSync(cfgPath)) throw new ModelFilesError(`${dir} has no tokenizer_config.json`);
  const tokenizerJson = (await readJsonFile(tokPath)) as Record<string, unknown>;
  const parsed = tokenizerConfigSchema.safeParse(await readJsonFile(cfgPath));
  if (!parsed.success)
    throw new ModelFilesError(`${cfgPath}: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  const cfg = parsed.data;
  let template = typeof cfg.chat_template === 'string' ? cfg.chat_template : cfg.chat_template?.find((t) => t.name === 'default')?.template;
  const jinjaPath = join(dir, 'chat_template.jinja');
  if (template === undefined && existsSync(jinjaPath)) template = await readFile(jinjaPath, 'utf8');
  if (!template) throw new ModelFilesError(`${dir} has no chat template (tokenizer_config.json chat_template or chat_template.jinja)`);
  const added = new Map<string, number>();
  for (const t of (tokenizerJson.added_tokens as { id?: unknown; content?: unknown }[] | undefined) ?? []) {
    if (typeof t.content === 'string' && typeof t.id === 'number') added.set(t.content, t.id);
  }
  const vocab = ((tokenizerJson.model as { vocab?: unknown } | undefined)?.vocab ?? {}) as Record<string, number>;
  const idOf = (text: string): number | undefined => added.get(text) ?? (typeof vocab[text] === 'number' ? vocab[text] : undefined);
  const eosToken = textOf(cfg.eos_token);
  const stop = new Set<number>();
  const eosId = eosToken ? idOf(eosToken) : undefined;
  if (eosId !== undefined) stop.add(eosId);
  const hints: string[] = [cfg.tokenizer_class ?? ''];
  const genPath = join(dir, 'generation_config.json');
  if (existsSync(genPath)) {
    const gen = z
      .object({ eos_token_id: idList })
      .passthrough()
      .safeParse(await readJsonFile(genPath));
    const ids = gen.success ? gen.data.eos_token_id : undefined;
    for (const id of ids === undefined || ids === null ? [] : Array.isArray(ids) ? ids : [ids]) stop.add(id);
  }
  const configPath = join(dir, 'config.json');
  if (existsSync(configPath)) {
    const conf = z
      .object({ model_type: z.string().optional(), architectures: z.array(z.string()).optional() })
      .passthrough()
      .safeParse(await readJsonFile(configPath));
    if (conf.success) hints.push(conf.data.model_type ?? '', ...(conf.data.architectures ?? []));
  }
  return {
    source: dir,
    tokenizerJson,
    tokenizerConfig: cfg as Record<string, unknown>,
    chatTemplate: template,
    bosToken: textOf(cfg.bos_token),
    eosToken,
    stopIds: [...stop],
    familyHints: hints.filter(Boolean),
  };
}

/**
 * Pre-tokenizer split regexes of byte-level BPE vocabularies by `tokenizer.ggml.pre`, as the Hugging
 * Face tokenizer.json of those models writes them (llama.cpp's llama-vocab.cpp uses the same ones).
 */
const PRE_TOKENIZER_REGEX: Record<string, { regex: string; nfc: boolean }> = {
  qwen2: {
    regex:
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    nfc: true,
  },
  'llama-bpe': {
    regex:
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    nfc: false,
  },
};

// llama.cpp token types (llama_token_type).
const TOKEN_TYPE_CONTROL = 3;
const TOKEN_TYPE_USER_DEFINED = 4;

const ggufSchema = z.object({
  general: z.object({ architecture: z.string().optional(), name: z.string().optional() }).passthrough().optional(),
  tokenizer: z
    .object({
      chat_template: z.string().optional(),
      ggml: z
        .object({
          model: z.string(),
          pre: z.string().optional(),
          tokens: z.array(z.string()),
          token_type: z.array(z.number()).optional(),
          merges: z.array(z.string()).optional(),
          bos_token_id: z.number().optional(),
          eos_token_id: z.number().optional(),
          eot_token_id: z.number().optional(),
          eom_token_id: z.number().optional(),
        })
        .passthrough(),
    })
    .passthrough(),
});

/** A GGUF file's tokenizer and chat template (node-llama-cpp's metadata reader; no weights are read). */
export async function readGgufModel(path: string): Promise<ModelFiles> {
  if (!existsSync(path) || !statSync(path).isFile()) throw new ModelFilesError(`${path} is not a file`);
  const { readGgufFileInfo } = await import('node-llama-cpp');
  let metadata: unknown;
  try {
    metadata = (await readGgufFileInfo(path, { readTensorInfo: false })).metadata;
  } catch (err) {
    throw new ModelFilesError(`could not read the GGUF metadata of ${path}: ${err instanceof Error ? err.message : String(err)}`);
  }
  const parsed = ggufSchema.safeParse(metadata);
  if (!parsed.success)
    throw new ModelFilesError(
      `${path} has no usable tokenizer metadata: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
    );
  const { tokenizer, general } = parsed.data;
  const ggml = tokenizer.ggml;
  if (ggml.model !== 'gpt2')
    throw new ModelFilesError(
      `${path}: tokenizer.ggml.model '${ggml.model}' is not supported for proxy-side rendering (only byte-level BPE, 'gpt2'); give the model folder with tokenizer.json instead`,
    );
  const pre = PRE_TOKENIZER_REGEX[ggml.pre ?? ''];
  if (!pre)
    throw new ModelFilesError(
      `${path}: tokenizer.ggml.pre '${ggml.pre ?? '(none)'}' is not one the proxy knows (${Object.keys(PRE_TOKENIZER_REGEX).join(', ')}); give the model folder with tokenizer.json instead`,
    );
  if (!tokenizer.chat_template) throw new ModelFilesError(`${path} has no chat template (tokenizer.chat_template)`);
  const tokens = ggml.tokens;
  const types = ggml.token_type ?? [];
  const vocab: Record<string, number> = {};
  const addedTokens: Record<string, unknown>[] = [];
  for (let id = 0; id < tokens.length; id++) {
    const t = tokens[id]!;
    const type = types[id];
    if (type === TOKEN_TYPE_CONTROL || type === TOKEN_TYPE_USER_DEFINED) {
      addedTokens.push({
        id,
        content: t,
        single_word: false,
        lstrip: false,
        rstrip: false,
        normalized: false,
        special: type === TOKEN_TYPE_CONTROL,
      });
    }
    if (!(t in vocab)) vocab[t] = id;
  }
  const tokenizerJson: Record<string, unknown> = {
    version: '1.0',
    added_tokens: addedTokens,
    normalizer: pre.nfc ? { type: 'NFC' } : null,
    pre_tokenizer: {
      type: 'Sequence',
      pretokenizers: [
        { type: 'Split', pattern: { Regex: pre.regex }, behavior: 'Isolated', invert: false },
        { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
      ],
    },
    post_processor: null,
    decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: '',
      end_of_word_suffix: '',
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges: ggml.merges ?? [],
    },
  };
  const text = (id: number | undefined) => (id === undefined ? '' : (tokens[id] ?? ''));
  const stop = [ggml.eos_token_id, ggml.eot_token_id, ggml.eom_token_id].filter((id): id is number => id !== undefined);
  return {
    source: path,
    tokenizerJson,
    tokenizerConfig: { bos_token: text(ggml.bos_token_id), eos_token: text(ggml.eos_token_id), clean_up_tokenization_spaces: false },
    chatTemplate: tokenizer.chat_template,
    bosToken: text(ggml.bos_token_id),
    eosToken: text(ggml.eos_token_id),
    stopIds: [...new Set(stop)],
    familyHints: [general?.architecture ?? '', general?.name ?? ''].filter(Boolean),
  };
}

/** A model folder or a .gguf file. */
export function readModelFiles(path: string): Promise<ModelFiles> {
  if (path.toLowerCase().endsWith('.gguf')) return readGgufModel(path);
  return readModelDir(path);
}
