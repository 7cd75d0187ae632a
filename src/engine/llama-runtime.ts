// node-llama-cpp behind a small surface: tokenize, detokenize, and "give me the next-token
// distributions at these positions". One context sequence whose KV cache is reused across calls
// when a new context extends what is already evaluated (multi-turn prompts usually do).
import type { ControlledEvaluateInputItem, Llama, LlamaContext, LlamaContextSequence, LlamaModel, Token } from 'node-llama-cpp';
import { TokenDistribution } from './token-distribution.js';

export interface RuntimeOptions {
  modelPath: string;
  /** Context window in tokens; default min(model's training context, 32768). */
  contextSize?: number;
  /** CPU threads for evaluation; default 1 for tiny models, else the machine's math cores. */
  threads?: number;
}

/** GPT-2 byte-level BPE: the printable stand-in character for each byte (from GPT-2's encoder.py). */
function byteDecoder(): Map<string, number> {
  const bytes: number[] = [];
  for (let b = 33; b <= 126; b++) bytes.push(b);
  for (let b = 161; b <= 172; b++) bytes.push(b);
  for (let b = 174; b <= 255; b++) bytes.push(b);
  const chars = [...bytes];
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bytes.includes(b)) {
      bytes.push(b);
      chars.push(256 + n++);
    }
  }
  return new Map(bytes.map((b, i) => [String.fromCodePoint(chars[i]!), b]));
}

let llamaPromise: Promise<Llama> | null = null;
/** Stands in for a probabilities array handed around node-llama-cpp (see takeFlatProbabilities). */
const FLAT_MARKER = -1;
const DISTRIBUTIONS_PER_BATCH = 8;

/** One process-wide llama.cpp instance: CPU only, prebuilt binary only, never a download or build. */
export function getCpuLlama(): Promise<Llama> {
  llamaPromise ??= import('node-llama-cpp')
    .then(({ getLlama, LlamaLogLevel }) =>
      getLlama({ gpu: false, build: 'never', usePrebuiltBinaries: true, progressLogs: false, logLevel: LlamaLogLevel.error }),
    )
    .catch((err: unknown) => {
      llamaPromise = null;
      throw new Error(
        `node-llama-cpp could not load its prebuilt CPU binary for ${process.platform}-${process.arch} ` +
          `(the embedded engine never downloads or builds llama.cpp; is the matching @node-llama-cpp/* platform package installed?): ${err instanceof Error ? err.message : String(err)}`,
      );
    });
  return llamaPromise;
}

export class LlamaRuntime {
  private readonly tokenStrings: readonly string[] | null;
  private readonly decoder = byteDecoder();
  private readonly bytesCache = new Map<number, number[]>();
  /** Full-vocabulary [id, p, id, p, ...] arrays taken straight from the addon, by slot. */
  private readonly flat: (readonly number[] | undefined)[] = [];
  /** Whether distributions skip node-llama-cpp's Map (the fast path); false means the public path. */
  usesFlatProbabilities = false;

  private constructor(
    readonly modelPath: string,
    private readonly model: LlamaModel,
    private readonly context: LlamaContext,
    private readonly sequence: LlamaContextSequence,
  ) {
    const ggml = (model.fileInfo.metadata as { tokenizer?: { ggml?: { model?: string; tokens?: unknown } } }).tokenizer?.ggml;
    this.tokenStrings = ggml?.model === 'gpt2' && Array.isArray(ggml.tokens) ? (ggml.tokens as string[]) : null;
    this.takeFlatProbabilities();
  }

  /**
   * node-llama-cpp turns each full-vocabulary probability list into a 152k-entry Map, which costs
   * most of a token's time on the tiny model. Its addon already returns a flat, sorted [id, p, ...]
   * array; this wrapper (on the pinned 3.21.1's private `_ctx.sampleToken`) parks that array in a
   * side table and passes a one-entry marker instead, which `distributions` resolves. If the private
   * shape ever differs, nothing is wrapped and the public Map path is used.
   */
  private takeFlatProbabilities(): void {
    const addon = (this.context as unknown as { _ctx?: { sampleToken?: unknown } })._ctx;
    if (!addon || typeof addon.sampleToken !== 'function') return;
    const original = addon.sampleToken.bind(addon) as (...args: unknown[]) => Promise<unknown>;
    const wrapped = async (...args: unknown[]) => {
      const result = await original(...args);
      if (args[2] === true && Array.isArray(result) && Array.isArray(result[1])) {
        const slot = this.flat.push(result[1] as number[]) - 1;
        return [result[0], [FLAT_MARKER, slot], ...result.slice(2)];
      }
      return result;
    };
    // The addon's methods are read-only on its prototype; an own property shadows them.
    try {
      Object.defineProperty(addon, 'sampleToken', { value: wrapped, configurable: true, writable: true });
      this.usesFlatProbabilities = true;
    } catch {
      // not extensible: stay on the public path
    }
  }

  private toDistribution(probs: Map<number, number>): TokenDistribution {
    if (probs.size === 1 && probs.has(FLAT_MARKER)) {
      const slot = probs.get(FLAT_MARKER)!;
      const flat = this.flat[slot];
      this.flat[slot] = undefined;
      if (!flat) throw new Error(`probability slot ${slot} is empty`);
      return TokenDistribution.fromFlat(flat);
    }
    return TokenDistribution.fromProbabilities(probs);
  }

  static async load(opts: RuntimeOptions): Promise<LlamaRuntime> {
    const llama = await getCpuLlama();
    const model = await llama.loadModel({ modelPath: opts.modelPath, gpuLayers: 0 });
    try {
      const tiny = model.size < 200 * 1024 * 1024;
      const contextSize = opts.contextSize ?? Math.min(model.trainContextSize, 32768);
      const context = await model.createContext({ contextSize, sequences: 1, threads: opts.threads ?? (tiny ? 1 : llama.cpuMathCores) });
      return new LlamaRuntime(opts.modelPath, model, context, context.getSequence());
    } catch (err) {
      await model.dispose();
      throw err;
    }
  }

  get contextSize(): number {
    return this.context.contextSize;
  }

  /** The token that ends an assistant turn (end-of-turn, else end-of-sequence), e.g. <|im_end|>. */
  get endOfTurnToken(): number {
    const t = this.model.tokens.eot ?? this.model.tokens.eos;
    if (t === null) throw new Error(`the model ${this.modelPath} defines no end-of-sequence token`);
    return t;
  }

  /** The chat template embedded in the GGUF (`tokenizer.chat_template`), if any. */
  get chatTemplate(): string | null {
    const t = (this.model.fileInfo.metadata as { tokenizer?: { chat_template?: unknown } }).tokenizer?.chat_template;
    return typeof t === 'string' ? t : null;
  }

  /** Text of the BOS and EOS tokens, for templates that write `{{ bos_token }}` (vLLM passes them too). */
  get specialTokenTexts(): { bos: string; eos: string } {
    return { bos: this.model.tokens.bosString ?? '', eos: this.model.tokens.eosString ?? '' };
  }

  /** Entries in the GGUF's vocabulary (tokenizer.ggml.tokens), or null when the file does not list them. */
  get vocabSize(): number | null {
    const tokens = (this.model.fileInfo.metadata as { tokenizer?: { ggml?: { tokens?: unknown } } }).tokenizer?.ggml?.tokens;
    return Array.isArray(tokens) ? tokens.length : null;
  }

  tokenText(id: number, special: boolean): string {
    return this.model.detokenize([id as Token], special);
  }

  /** Text to tokens, with special tokens written in the text (e.g. `<|im_start|>`) recognised. */
  tokenize(text: string): number[] {
    return [...this.model.tokenize(text, true)];
  }

  /** Tokens to text; control tokens are dropped unless `special` (like skip_special_tokens). */
  detokenize(ids: readonly number[], special = false): string {
    return this.model.detokenize(ids as readonly Token[], special);
  }

  isEndOfGeneration(id: number): boolean {
    return this.model.isEogToken(id as Token);
  }

  /** The token's exact bytes (byte-level vocabularies), else the UTF-8 of its text. */
  tokenBytes(id: number): number[] {
    let bytes = this.bytesCache.get(id);
    if (bytes) return bytes;
    const piece = this.tokenStrings?.[id];
    const decoded = piece === undefined ? undefined : [...piece].map((c) => this.decoder.get(c));
    bytes = decoded && decoded.every((b) => b !== undefined) ? (decoded as number[]) : [...Buffer.from(this.tokenText(id, true), 'utf8')];
    if (this.bytesCache.size < 65536) this.bytesCache.set(id, bytes);
    return bytes;
  }

  /**
   * Next-token distributions after each prefix `context[0..i]` for i = from-1 .. context.length-1,
   * i.e. one distribution per position from `from` to `context.length` inclusive of the last.
   * Reuses the evaluated prefix already in the KV cache.
   */
  async distributions(context: readonly number[], from: number): Promise<TokenDistribution[]> {
    if (from < 1 || from > context.length) throw new Error(`distribution start ${from} outside 1..${context.length}`);
    if (context.length > this.context.contextSize) {
      throw new ContextOverflowError(`${context.length} tokens exceed the engine's context size of ${this.context.contextSize}`);
    }
    const cached = this.sequence.contextTokens;
    let keep = 0;
    const limit = Math.min(cached.length, from - 1);
    while (keep < limit && cached[keep] === context[keep]) keep++;
    if (keep < cached.length) await this.sequence.eraseContextTokenRanges([{ start: keep, end: cached.length }]);
    const out: TokenDistribution[] = [];
    // Positions that need a distribution are evaluated a few at a time: node-llama-cpp hands each one
    // back as a Map over the whole vocabulary (~10 MB), so a long forced completion in one batch
    // would hold hundreds of MB at once.
    let at = keep;
    while (at < context.length) {
      const end = at < from - 1 ? from - 1 : Math.min(context.length, at + DISTRIBUTIONS_PER_BATCH);
      const input = context
        .slice(at, Math.max(end, at + 1))
        .map((token, i): ControlledEvaluateInputItem =>
          at + i >= from - 1 ? [token as Token, { generateNext: { probabilities: true } }] : (token as Token),
        );
      const results = await this.sequence.controlledEvaluate(input);
      for (let i = 0; i < input.length; i++) {
        if (at + i < from - 1) continue;
        const probs = results[i]?.next.probabilities;
        if (!probs) throw new Error(`llama.cpp returned no probabilities at position ${at + i}`);
        out.push(this.toDistribution(probs));
      }
      this.flat.length = 0;
      at += input.length;
    }
    return out;
  }

  async dispose(): Promise<void> {
    await this.context.dispose();
    await this.model.dispose();
  }
}

export class ContextOverflowError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ContextOverflowError';
  }
}
