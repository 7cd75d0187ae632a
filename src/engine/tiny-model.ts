// The embedded engine's default model: a tiny random-weight Qwen3-architecture GGUF with the real
// Qwen3 tokenizer and chat template, built on first use from the llama.cpp source that ships inside
// node-llama-cpp and cached in the data dir. Same seed, same bytes.
//
// Why the weights are shaped rather than purely random: a random model over 151936 tokens is nearly
// uniform, never stops and gives useless logprobs. Here the residual stream carries a constant "bias"
// channel and a one-hot channel per token of a short sentence, and the output head turns them into
// a bigram chain ("The quick brown fox jumps over the lazy dog." then <|im_end|>), with random
// layers adding context-dependent noise. Sampling at T=1 is peaky (top token ~0.6), jumps around the
// chain now and then, and ends with <|im_end|> within a few dozen tokens; greedy decoding says the
// sentence and stops.
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { GgmlType, GgufType, writeGguf, type GgufTensor, type GgufValue } from './gguf-writer.js';
import { readFromLlamaCppBundle } from './llama-source.js';
import { Prng } from './prng.js';

/** Bump when the construction changes, so stale cached files are not reused. */
export const TINY_MODEL_VERSION = 1;
export const TINY_MODEL_NAME = 'harness-lab/tiny-qwen3';

const VOCAB_PATH = 'models/ggml-vocab-qwen2.gguf';
const TEMPLATE_PATH = 'models/templates/Qwen-Qwen3-0.6B.jinja';

/** Qwen3's added tokens after the Qwen2 BPE vocabulary (tokenizer_config.json of Qwen/Qwen3-0.6B). */
export const QWEN3_SPECIAL_TOKENS: readonly [number, string][] = [
  [151643, '<|endoftext|>'],
  [151644, '<|im_start|>'],
  [151645, '<|im_end|>'],
  [151646, '<|object_ref_start|>'],
  [151647, '<|object_ref_end|>'],
  [151648, '<|box_start|>'],
  [151649, '<|box_end|>'],
  [151650, '<|quad_start|>'],
  [151651, '<|quad_end|>'],
  [151652, '<|vision_start|>'],
  [151653, '<|vision_end|>'],
  [151654, '<|vision_pad|>'],
  [151655, '<|image_pad|>'],
  [151656, '<|video_pad|>'],
  [151657, '<tool_call>'],
  [151658, '</tool_call>'],
  [151659, '<|fim_prefix|>'],
  [151660, '<|fim_middle|>'],
  [151661, '<|fim_suffix|>'],
  [151662, '<|fim_pad|>'],
  [151663, '<|repo_name|>'],
  [151664, '<|file_sep|>'],
  [151665, '<tool_response>'],
  [151666, '</tool_response>'],
  [151667, '<think>'],
  [151668, '</think>'],
];
export const IM_END = 151645;
const ENDOFTEXT = 151643;
// llama.cpp token types (llama_token_type): special tokens written as <|...|> are CONTROL, Qwen3's
// non-special added tokens (<tool_call>, <think>, ...) are USER_DEFINED, as convert_hf_to_gguf.py does.
const TOKEN_TYPE_CONTROL = 3;
const TOKEN_TYPE_USER_DEFINED = 4;

/** The sentence the weights encode, as byte-level BPE token strings (Ġ is a leading space). */
const CHAIN = ['The', 'Ġquick', 'Ġbrown', 'Ġfox', 'Ġjumps', 'Ġover', 'Ġthe', 'Ġlazy', 'Ġdog', '.'];

const SHAPE = { nEmbd: 64, nLayer: 2, nHead: 4, nHeadKv: 2, nFf: 128, contextLength: 32768 };

/** `HARNESS_LAB_DATA_DIR`, else `~/.harness-lab`. */
export function defaultDataDir(): string {
  return process.env.HARNESS_LAB_DATA_DIR || join(homedir(), '.harness-lab');
}

export function tinyModelPath(seed: number, dataDir = defaultDataDir()): string {
  return join(dataDir, 'models', `tiny-qwen3-v${TINY_MODEL_VERSION}-seed${seed}.gguf`);
}

export interface TinyModelResult {
  path: string;
  /** True when this call built the file (false: it was cached). */
  built: boolean;
  buildMs: number;
}

/** Returns the cached tiny model for `seed`, building it first if needed. */
export async function ensureTinyModel(opts: { seed?: number; dataDir?: string } = {}): Promise<TinyModelResult> {
  const seed = opts.seed ?? 0;
  if (!Number.isSafeInteger(seed) || seed < 0) throw new Error(`model seed must be a non-negative integer, got ${seed}`);
  const path = tinyModelPath(seed, opts.dataDir);
  if (existsSync(path)) return { path, built: false, buildMs: 0 };
  const started = performance.now();
  await buildTinyModel(path, seed);
  return { path, built: true, buildMs: performance.now() - started };
}

const vocabSchema = z.object({
  metadata: z.object({
    tokenizer: z.object({
      ggml: z.object({
        model: z.literal('gpt2'),
        pre: z.string(),
        tokens: z.array(z.string()),
        token_type: z.array(z.number()),
        merges: z.array(z.string()),
      }),
    }),
  }),
});

async function readQwenVocab(vocabBytes: Buffer) {
  const dir = await mkdtemp(join(tmpdir(), 'harness-lab-vocab-'));
  try {
    const file = join(dir, 'vocab.gguf');
    await writeFile(file, vocabBytes);
    const { readGgufFileInfo } = await import('node-llama-cpp');
    const parsed = vocabSchema.safeParse(await readGgufFileInfo(file, { readTensorInfo: false }));
    if (!parsed.success)
      throw new Error(`${VOCAB_PATH} in the llama.cpp bundle is not a byte-level BPE vocabulary: ${parsed.error.message}`);
    const ggml = parsed.data.metadata.tokenizer.ggml;
    const tokens = [...ggml.tokens];
    const types = [...ggml.token_type];
    if (tokens.length !== 151936) throw new Error(`expected the 151936-token Qwen2 vocabulary in ${VOCAB_PATH}, found ${tokens.length}`);
    for (const [id, text] of QWEN3_SPECIAL_TOKENS) {
      if (id <= IM_END && tokens[id] !== text) throw new Error(`${VOCAB_PATH}: token ${id} is '${tokens[id]}', expected '${text}'`);
      tokens[id] = text;
      types[id] = text.startsWith('<|') ? TOKEN_TYPE_CONTROL : TOKEN_TYPE_USER_DEFINED;
    }
    return { pre: ggml.pre, tokens, types, merges: ggml.merges };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

async function buildTinyModel(path: string, seed: number): Promise<void> {
  const files = await readFromLlamaCppBundle([VOCAB_PATH, TEMPLATE_PATH]);
  const vocab = await readQwenVocab(files.get(VOCAB_PATH)!);
  const template = files.get(TEMPLATE_PATH)!.toString('utf8');
  const chain = CHAIN.map((t) => {
    const id = vocab.tokens.indexOf(t);
    if (id < 0) throw new Error(`token '${t}' not found in the Qwen vocabulary`);
    return id;
  });
  const { nEmbd, nLayer, nHead, nHeadKv, nFf, contextLength } = SHAPE;
  const headDim = nEmbd / nHead;
  const nVocab = vocab.tokens.length;
  const metadata: Record<string, GgufValue> = {
    'general.architecture': { type: GgufType.STRING, value: 'qwen3' },
    'general.name': { type: GgufType.STRING, value: `${TINY_MODEL_NAME} (random weights, seed ${seed})` },
    'general.file_type': { type: GgufType.UINT32, value: 1 },
    'qwen3.context_length': { type: GgufType.UINT32, value: contextLength },
    'qwen3.embedding_length': { type: GgufType.UINT32, value: nEmbd },
    'qwen3.feed_forward_length': { type: GgufType.UINT32, value: nFf },
    'qwen3.block_count': { type: GgufType.UINT32, value: nLayer },
    'qwen3.attention.head_count': { type: GgufType.UINT32, value: nHead },
    'qwen3.attention.head_count_kv': { type: GgufType.UINT32, value: nHeadKv },
    'qwen3.attention.key_length': { type: GgufType.UINT32, value: headDim },
    'qwen3.attention.value_length': { type: GgufType.UINT32, value: headDim },
    'qwen3.attention.layer_norm_rms_epsilon': { type: GgufType.FLOAT32, value: 1e-6 },
    'qwen3.rope.freq_base': { type: GgufType.FLOAT32, value: 1000000 },
    'tokenizer.ggml.model': { type: GgufType.STRING, value: 'gpt2' },
    'tokenizer.ggml.pre': { type: GgufType.STRING, value: vocab.pre },
    'tokenizer.ggml.tokens': { type: GgufType.ARRAY, itemType: GgufType.STRING, value: vocab.tokens },
    'tokenizer.ggml.token_type': { type: GgufType.ARRAY, itemType: GgufType.INT32, value: vocab.types },
    'tokenizer.ggml.merges': { type: GgufType.ARRAY, itemType: GgufType.STRING, value: vocab.merges },
    'tokenizer.ggml.eos_token_id': { type: GgufType.UINT32, value: IM_END },
    'tokenizer.ggml.padding_token_id': { type: GgufType.UINT32, value: ENDOFTEXT },
    'tokenizer.ggml.bos_token_id': { type: GgufType.UINT32, value: ENDOFTEXT },
    'tokenizer.ggml.add_bos_token': { type: GgufType.BOOL, value: false },
    'tokenizer.chat_template': { type: GgufType.STRING, value: template },
  };
  const tensors = buildWeights(seed, nVocab, chain);
  await mkdir(join(path, '..'), { recursive: true });
  // Concurrent builders (parallel test files) each write their own temp file; rename is atomic.
  const tmp = `${path}.${process.pid}.${Date.now()}.tmp`;
  try {
    await writeGguf(tmp, metadata, tensors);
    await rename(tmp, path);
  } finally {
    await rm(tmp, { force: true });
  }
}

function buildWeights(seed: number, nVocab: number, chain: number[]): GgufTensor[] {
  const { nEmbd, nLayer, nHead, nHeadKv, nFf } = SHAPE;
  const headDim = nEmbd / nHead;
  const rng = new Prng(`tiny-qwen3:${seed}`);
  const m = chain.length;
  const BIAS = 0; // residual dim holding a constant
  const OTHER = 1 + m; // residual dim marking "a token outside the chain"
  const NOISE0 = 2 + m; // first dim the layers write to
  const C = 10; // bias channel value in every embedding
  const A = 10; // one-hot channel value
  // After RMS norm the bias channel reads about C / rms(h); logits below are divided by it.
  const k = C / Math.sqrt((C * C + A * A + (nEmbd - NOISE0) * 1.0 * 1.0) / nEmbd);

  const ones = (n: number) => new Float32Array(n).fill(1);
  const normal = (n: number, std: number) => {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = rng.normal() * std;
    return a;
  };
  /** A [out][in] matrix whose rows below `firstRow` are zero (those residual dims stay clean). */
  const projection = (nOut: number, nIn: number, std: number, firstRow = 0) => {
    const a = normal(nOut * nIn, std);
    a.fill(0, 0, firstRow * nIn);
    return a;
  };

  const chainIndex = new Map(chain.map((id, i) => [id, i]));
  const embd = new Float32Array(nVocab * nEmbd);
  for (let v = 0; v < nVocab; v++) {
    const row = v * nEmbd;
    embd[row + BIAS] = C;
    const ci = chainIndex.get(v);
    embd[row + (ci === undefined ? OTHER : 1 + ci)] = A;
    for (let j = NOISE0; j < nEmbd; j++) embd[row + j] = rng.normal() * 0.5;
  }

  // Output head, in logit units (divided by k so the bias channel contributes these values).
  const CHAIN_BIAS = 15; // chain tokens tower over the ~150k others (their mass stays ~0.2%)
  const END_BIAS = 15.5; // <|im_end|> stays a live option at every step (~5%)
  const NEXT = 3; // the chain successor is the top token (~0.6 at T=1)
  const END_AFTER_PERIOD = 8; // after "." the answer ends
  const SUPPRESS = -10; // other special tokens and padding never come out
  const out = new Float32Array(nVocab * nEmbd);
  for (let v = 0; v < nVocab; v++) {
    const row = v * nEmbd;
    const ci = chainIndex.get(v);
    const std = ci === undefined && v !== IM_END ? 0.1 : 0.15;
    for (let j = NOISE0; j < nEmbd; j++) out[row + j] = rng.normal() * std;
    if (ci !== undefined) {
      out[row + BIAS] = CHAIN_BIAS / k;
      out[row + (ci === 0 ? OTHER : ci)] = NEXT / k; // successor of chain[ci-1] (or of any other token)
    } else if (v === IM_END) {
      out[row + BIAS] = END_BIAS / k;
      out[row + m] = END_AFTER_PERIOD / k;
    } else if (v >= ENDOFTEXT) {
      out[row + BIAS] = SUPPRESS / k;
    }
  }

  const tensors: GgufTensor[] = [
    { name: 'token_embd.weight', dims: [nEmbd, nVocab], type: GgmlType.F16, data: embd },
    { name: 'output_norm.weight', dims: [nEmbd], type: GgmlType.F32, data: ones(nEmbd) },
    { name: 'output.weight', dims: [nEmbd, nVocab], type: GgmlType.F16, data: out },
  ];
  for (let l = 0; l < nLayer; l++) {
    const p = `blk.${l}.`;
    tensors.push(
      { name: `${p}attn_norm.weight`, dims: [nEmbd], type: GgmlType.F32, data: ones(nEmbd) },
      { name: `${p}attn_q.weight`, dims: [nEmbd, nHead * headDim], type: GgmlType.F32, data: projection(nHead * headDim, nEmbd, 0.3) },
      { name: `${p}attn_k.weight`, dims: [nEmbd, nHeadKv * headDim], type: GgmlType.F32, data: projection(nHeadKv * headDim, nEmbd, 0.3) },
      { name: `${p}attn_v.weight`, dims: [nEmbd, nHeadKv * headDim], type: GgmlType.F32, data: projection(nHeadKv * headDim, nEmbd, 0.3) },
      {
        name: `${p}attn_output.weight`,
        dims: [nHead * headDim, nEmbd],
        type: GgmlType.F32,
        data: projection(nEmbd, nHead * headDim, 0.02, NOISE0),
      },
      { name: `${p}attn_q_norm.weight`, dims: [headDim], type: GgmlType.F32, data: ones(headDim) },
      { name: `${p}attn_k_norm.weight`, dims: [headDim], type: GgmlType.F32, data: ones(headDim) },
      { name: `${p}ffn_norm.weight`, dims: [nEmbd], type: GgmlType.F32, data: ones(nEmbd) },
      { name: `${p}ffn_gate.weight`, dims: [nEmbd, nFf], type: GgmlType.F32, data: projection(nFf, nEmbd, 0.3) },
      { name: `${p}ffn_up.weight`, dims: [nEmbd, nFf], type: GgmlType.F32, data: projection(nFf, nEmbd, 0.3) },
      { name: `${p}ffn_down.weight`, dims: [nFf, nEmbd], type: GgmlType.F32, data: projection(nEmbd, nFf, 0.01, NOISE0) },
    );
  }
  return tensors;
}
