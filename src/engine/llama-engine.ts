// The embedded engine: renders the chat template, samples (or, under a scripted policy, teacher-forces)
// the completion through the model, and answers in vLLM's shape with prompt ids, sampled ids and
// per-token logprobs. One request at a time; the KV cache is reused across requests.
import { randomBytes } from 'node:crypto';
import type { ChatMessage, ChatResponse, ChatTool, LogprobEntry } from '../capture/types.js';
import { parseAssistantOutput, renderAssistantText } from './assistant-output.js';
import { ChatTemplate } from './chat-template.js';
import {
  EngineRequestError,
  type CompletionRequest,
  type EngineChatRequest,
  type DetokenizeRequest,
  type TokenCompletionRequest,
  type TokenizeRequest,
} from './chat-request.js';
import { ContextOverflowError, type LlamaRuntime } from './llama-runtime.js';
import type { PolicyDecision, ScriptedPolicy } from './policy.js';
import { parseChatMlPrompt } from './prompt-messages.js';
import { Prng } from './prng.js';
import { finiteLogprob, rawTop, type SamplingParams, type TokenDistribution } from './token-distribution.js';

export type LogprobsMode = 'processed' | 'raw';

export interface LlamaEngineOptions {
  runtime: LlamaRuntime;
  /** The served model name (`/v1/models`, the `model` field of answers). */
  modelName: string;
  policy?: ScriptedPolicy | null;
  /** Seeds the sampler of requests that carry no `seed`, so a fresh engine replays the same outputs. */
  seed?: number;
  logprobsMode?: LogprobsMode;
}

/** One generated or forced token, as it goes into token_ids and logprobs.content. */
export interface GeneratedToken {
  id: number;
  logprob: number;
  top: { id: number; logprob: number }[];
}

export interface CompletionEvents {
  /** Called once the prompt is rendered and tokenized, before any completion token. */
  onStart?(info: { promptIds: number[]; parseToolCalls: boolean; stop: string[] }): void;
  /** Called as each completion token is decided (streaming). */
  onToken?(token: GeneratedToken, index: number): void;
}

interface Plan {
  promptIds: number[];
  promptText: string;
  sampling: SamplingParams;
  maxTokens: number;
  stop: string[];
  wantLogprobs: boolean;
  topLogprobs: number;
  mode: LogprobsMode;
  parseToolCalls: boolean;
  /** Token ids that end generation besides the model's end-of-generation tokens (vLLM stop_token_ids). */
  stopIds?: ReadonlySet<number>;
}

const NEUTRAL_PENALTIES: [string, number][] = [
  ['frequency_penalty', 0],
  ['presence_penalty', 0],
  ['repetition_penalty', 1],
];

export class LlamaEngine {
  readonly modelName: string;
  private readonly runtime: LlamaRuntime;
  private readonly template: ChatTemplate | null;
  private readonly policy: ScriptedPolicy | null;
  private readonly engineRng: Prng;
  readonly logprobsMode: LogprobsMode;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(opts: LlamaEngineOptions) {
    this.runtime = opts.runtime;
    this.modelName = opts.modelName;
    this.policy = opts.policy ?? null;
    this.engineRng = new Prng(`engine:${opts.seed ?? 0}`);
    this.logprobsMode = opts.logprobsMode ?? 'processed';
    const source = opts.runtime.chatTemplate;
    this.template = source === null ? null : new ChatTemplate(source);
  }

  /** The GGUF file the engine serves (its tokenizer and chat template too). */
  get modelPath(): string {
    return this.runtime.modelPath;
  }

  get contextSize(): number {
    return this.runtime.contextSize;
  }

  get policySource(): string | null {
    return this.policy?.source ?? null;
  }

  /** Runs `fn` after every earlier request finished (the model has one sequence). */
  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => undefined);
    return run;
  }

  checkModel(model: string | undefined | null): void {
    if (model && model !== this.modelName) {
      throw new EngineRequestError(`The model \`${model}\` does not exist. This engine serves \`${this.modelName}\`.`, 404, 'model');
    }
  }

  renderPrompt(
    messages: ChatMessage[],
    tools: ChatTool[] | undefined,
    kwargs: Record<string, unknown> | undefined,
    addGenerationPrompt = true,
  ): string {
    if (!this.template) throw new EngineRequestError(`the model ${this.runtime.modelPath} has no chat template (tokenizer.chat_template)`);
    try {
      const { bos, eos } = this.runtime.specialTokenTexts;
      return this.template.render(messages, { tools, kwargs, addGenerationPrompt, bosToken: bos, eosToken: eos });
    } catch (err) {
      throw new EngineRequestError((err as Error).message);
    }
  }

  tokenize(req: TokenizeRequest): { count: number; max_model_len: number; tokens: number[]; token_strs: null } {
    this.checkModel(req.model);
    const text =
      'prompt' in req && typeof req.prompt === 'string'
        ? req.prompt
        : this.renderPrompt(
            (req as { messages: ChatMessage[] }).messages,
            ((req as { tools?: ChatTool[] | null }).tools ?? undefined) || undefined,
            (req as { chat_template_kwargs?: Record<string, unknown> }).chat_template_kwargs,
            (req as { add_generation_prompt?: boolean }).add_generation_prompt ?? true,
          );
    const tokens = this.runtime.tokenize(text);
    return { count: tokens.length, max_model_len: this.runtime.contextSize, tokens, token_strs: null };
  }

  /** vLLM's `POST /detokenize`: ids to text, special tokens written out (so a prompt reads as the model saw it). */
  detokenize(req: DetokenizeRequest): { prompt: string } {
    this.checkModel(req.model);
    const n = this.runtime.vocabSize;
    const bad = req.tokens.find((id) => n !== null && id >= n);
    if (bad !== undefined) throw new EngineRequestError(`token id ${bad} is outside the vocabulary (${n} tokens)`);
    return { prompt: this.runtime.detokenize(req.tokens, true) };
  }

  /** Answers one chat completion (non-streamed shape; streaming wraps it with `events`). */
  complete(req: EngineChatRequest, events: CompletionEvents = {}): Promise<ChatResponse> {
    this.checkModel(req.model);
    const plan = this.plan(req);
    const tools = req.tools?.length ? (req.tools as ChatTool[]) : undefined;
    // One sampler per request: a policy's `choose` draws from it first, then the model's tokens.
    const rng = req.seed !== undefined && req.seed !== null ? new Prng(req.seed) : new Prng(this.engineRng.nextUint32());
    const decision = this.policy ? this.policy.decide(req.messages as ChatMessage[], tools, () => rng.next()) : { kind: 'sample' as const };
    return this.exclusive(async () => {
      events.onStart?.({ promptIds: plan.promptIds, parseToolCalls: plan.parseToolCalls, stop: plan.stop });
      try {
        const generated =
          decision.kind === 'script' ? await this.force(plan, renderAssistantText(decision), events) : await this.sample(plan, rng, events);
        return this.answer(req, plan, generated);
      } catch (err) {
        if (err instanceof ContextOverflowError)
          throw new EngineRequestError(
            `This model's maximum context length is ${this.runtime.contextSize} tokens: ${err.message}`,
            400,
            'messages',
          );
        throw err;
      }
    });
  }

  /**
   * vLLM's `/v1/completions` with a token-id prompt: generates from exactly these ids (no chat template
   * is applied). Under a scripted policy the prompt is read back into messages (parseChatMlPrompt) so
   * the policy decides as it does for chat requests, and its text is forced through the model.
   */
  completeTokens(req: TokenCompletionRequest): Promise<Record<string, unknown>> {
    this.checkModel(req.model);
    this.checkCommon(req);
    const n = this.runtime.vocabSize;
    const bad = req.prompt.find((id) => n !== null && id >= n);
    if (bad !== undefined) throw new EngineRequestError(`token id ${bad} is outside the vocabulary (${n} tokens)`, 400, 'prompt');
    const promptIds = req.prompt;
    const promptText = this.runtime.detokenize(promptIds, true);
    const limit = this.runtime.contextSize;
    if (promptIds.length >= limit) {
      throw new EngineRequestError(
        `This model's maximum context length is ${limit} tokens. However, your request has ${promptIds.length} input tokens.`,
        400,
        'prompt',
      );
    }
    // vLLM's default for completions is 16 tokens.
    const asked = req.max_tokens ?? 16;
    if (promptIds.length + asked > limit) {
      throw new EngineRequestError(
        `You passed ${promptIds.length} input tokens and requested ${asked} output tokens. However, the model's ` +
          `context length is only ${limit} tokens, resulting in a maximum input length of ${limit - asked} tokens. ` +
          `This model's maximum context length is ${limit} tokens.`,
        400,
        'max_tokens',
      );
    }
    const topK = req.top_k ?? -1;
    const plan: Plan = {
      promptIds,
      promptText,
      sampling: { temperature: req.temperature ?? 1, topP: req.top_p ?? 1, topK: topK > 0 ? topK : 0, minP: req.min_p ?? 0 },
      maxTokens: asked,
      stop:
        req.stop === undefined || req.stop === null ? [] : (Array.isArray(req.stop) ? req.stop : [req.stop]).filter((s) => s.length > 0),
      wantLogprobs: req.logprobs !== undefined && req.logprobs !== null,
      topLogprobs: req.logprobs ?? 0,
      mode: req.logprobs_mode ?? this.logprobsMode,
      parseToolCalls: false,
      stopIds: new Set(req.stop_token_ids ?? []),
    };
    // One sampler per request, as for chat: a policy's `choose` draws from it first (so a pinned seed
    // decides the move in token-in mode too), then the model's tokens.
    const rng = req.seed !== undefined && req.seed !== null ? new Prng(req.seed) : new Prng(this.engineRng.nextUint32());
    let decision: PolicyDecision = { kind: 'sample' };
    if (this.policy) {
      const conversation = parseChatMlPrompt(promptText);
      if (conversation) decision = this.policy.decide(conversation.messages, conversation.tools, () => rng.next());
    }
    return this.exclusive(async () => {
      let generated: Generated;
      try {
        generated =
          decision.kind === 'script' ? await this.force(plan, renderAssistantText(decision), {}) : await this.sample(plan, rng, {});
      } catch (err) {
        if (err instanceof ContextOverflowError)
          throw new EngineRequestError(`This model's maximum context length is ${limit} tokens: ${err.message}`, 400, 'prompt');
        throw err;
      }
      return this.completionAnswer(req, plan, generated);
    });
  }

  private completionAnswer(req: TokenCompletionRequest, plan: Plan, gen: Generated): Record<string, unknown> {
    const ids = gen.tokens.map((t) => t.id);
    const last = ids[ids.length - 1];
    const stopped = last !== undefined && (this.runtime.isEndOfGeneration(last) || plan.stopIds?.has(last) === true);
    const special = req.skip_special_tokens === false;
    let text = this.runtime.detokenize(stopped ? ids.slice(0, -1) : ids, special);
    if (gen.stopCut !== null) text = text.slice(0, gen.stopCut);
    const asIds = req.return_tokens_as_token_ids === true;
    const render = (id: number) => (asIds ? `token_id:${id}` : this.runtime.tokenText(id, true));
    let offset = 0;
    const logprobs = plan.wantLogprobs
      ? {
          text_offset: gen.tokens.map((t) => {
            const at = offset;
            offset += this.runtime.tokenText(t.id, special).length;
            return at;
          }),
          token_logprobs: gen.tokens.map((t) => finiteLogprob(t.logprob)),
          tokens: gen.tokens.map((t) => render(t.id)),
          top_logprobs: gen.tokens.map((t) => {
            const entry: Record<string, number | null> = { [render(t.id)]: finiteLogprob(t.logprob) };
            for (const a of t.top) entry[render(a.id)] ??= finiteLogprob(a.logprob);
            return entry;
          }),
        }
      : null;
    const withIds = req.return_token_ids === true;
    return {
      id: `cmpl-${randomBytes(12).toString('hex')}`,
      object: 'text_completion',
      created: Math.floor(Date.now() / 1000),
      model: this.modelName,
      choices: [
        {
          index: 0,
          text,
          logprobs,
          finish_reason: gen.finish,
          stop_reason: stopped && plan.stopIds?.has(last!) ? last : null,
          ...(withIds ? { token_ids: ids, prompt_token_ids: plan.promptIds } : {}),
        },
      ],
      usage: { prompt_tokens: plan.promptIds.length, completion_tokens: ids.length, total_tokens: plan.promptIds.length + ids.length },
    };
  }

  private checkCommon(req: { n?: number | null | undefined; [key: string]: unknown }): void {
    if ((req.n ?? 1) !== 1) throw new EngineRequestError('the embedded engine answers one choice per request (n must be 1)', 400, 'n');
    for (const [field, neutral] of NEUTRAL_PENALTIES) {
      const v = req[field];
      if (v !== undefined && v !== null && v !== neutral) {
        throw new EngineRequestError(`${field}=${String(v)} is not supported by the embedded engine (only ${neutral})`, 400, field);
      }
    }
  }

  private plan(req: EngineChatRequest): Plan {
    this.checkCommon(req);
    const tools = req.tools?.length ? (req.tools as ChatTool[]) : undefined;
    const kwargs = req.chat_template_kwargs ?? undefined;
    const promptText = this.renderPrompt(req.messages as ChatMessage[], tools, kwargs, req.add_generation_prompt ?? true);
    const promptIds = this.runtime.tokenize(promptText);
    if (promptIds.length === 0) throw new EngineRequestError('the rendered prompt is empty', 400, 'messages');
    const room = this.runtime.contextSize - promptIds.length;
    if (room <= 0) {
      throw new EngineRequestError(
        `This model's maximum context length is ${this.runtime.contextSize} tokens. However, your request has ${promptIds.length} input tokens.`,
        400,
        'messages',
      );
    }
    const asked = req.max_completion_tokens ?? req.max_tokens ?? undefined;
    if (asked !== undefined && asked > room) {
      throw new EngineRequestError(
        `This model's maximum context length is ${this.runtime.contextSize} tokens. However, you requested ${asked + promptIds.length} ` +
          `tokens (${promptIds.length} in the messages, ${asked} in the completion).`,
        400,
        'max_tokens',
      );
    }
    const stop =
      req.stop === undefined || req.stop === null ? [] : (Array.isArray(req.stop) ? req.stop : [req.stop]).filter((s) => s.length > 0);
    const topK = req.top_k ?? -1;
    return {
      promptIds,
      promptText,
      sampling: { temperature: req.temperature ?? 1, topP: req.top_p ?? 1, topK: topK > 0 ? topK : 0, minP: req.min_p ?? 0 },
      maxTokens: asked ?? room,
      stop,
      // vLLM fills logprobs.content only when top_logprobs is not null (or logprobs is set).
      wantLogprobs: req.logprobs === true || (req.top_logprobs !== undefined && req.top_logprobs !== null),
      topLogprobs: req.top_logprobs ?? 0,
      mode: req.logprobs_mode ?? this.logprobsMode,
      parseToolCalls: !!tools && req.tool_choice !== 'none',
    };
  }

  private reported(plan: Pick<Plan, 'sampling' | 'topLogprobs' | 'mode'>, dist: TokenDistribution, id: number): GeneratedToken {
    if (plan.mode === 'raw') return { id, logprob: dist.rawLogprob(id), top: plan.topLogprobs > 0 ? rawTop(dist, plan.topLogprobs) : [] };
    const p = dist.processed(plan.sampling);
    return { id, logprob: p.logprob(id), top: plan.topLogprobs > 0 ? p.top(plan.topLogprobs) : [] };
  }

  private async sample(plan: Plan, rng: Prng, events: CompletionEvents): Promise<Generated> {
    const context = [...plan.promptIds];
    const tokens: GeneratedToken[] = [];
    let finish: 'stop' | 'length' = 'length';
    let stopCut: number | null = null;
    while (tokens.length < plan.maxTokens) {
      const [dist] = await this.runtime.distributions(context, context.length);
      const id = dist!.processed(plan.sampling).sample(rng);
      const token = this.reported(plan, dist!, id);
      tokens.push(token);
      context.push(id);
      events.onToken?.(token, tokens.length - 1);
      if (this.runtime.isEndOfGeneration(id) || plan.stopIds?.has(id)) {
        finish = 'stop';
        break;
      }
      if (plan.stop.length) {
        const text = this.runtime.detokenize(tokens.map((t) => t.id));
        const at = firstStop(text, plan.stop);
        if (at !== null) {
          stopCut = at;
          finish = 'stop';
          break;
        }
      }
    }
    return { tokens, finish, stopCut };
  }

  /** Teacher forcing: the completion is `text` + end of turn; every position is scored by the model. */
  private async force(plan: Plan, text: string, events: CompletionEvents): Promise<Generated> {
    // Tokenize in context so the ids equal what the next prompt's rendering will produce.
    const joint = this.runtime.tokenize(plan.promptText + text);
    const extends_ = joint.length >= plan.promptIds.length && plan.promptIds.every((t, i) => joint[i] === t);
    const ids = [...(extends_ ? joint.slice(plan.promptIds.length) : this.runtime.tokenize(text)), this.runtime.endOfTurnToken];
    const forced = ids.slice(0, plan.maxTokens);
    const dists = await this.runtime.distributions([...plan.promptIds, ...forced.slice(0, -1)], plan.promptIds.length);
    const tokens = forced.map((id, i) => this.reported(plan, dists[i]!, id));
    tokens.forEach((t, i) => events.onToken?.(t, i));
    return { tokens, finish: forced.length === ids.length ? 'stop' : 'length', stopCut: null };
  }

  /**
   * vLLM's prompt_logprobs: per prompt position the logprob of the token there given everything before
   * it (null at position 0 and before `prompt_logprobs_start`), keyed by token id, plus the top
   * alternatives. Logprobs follow the request's sampling and logprobs mode exactly as sampling reports
   * them, so re-scoring a captured completion with the same weights gives the captured logprobs.
   */
  scorePrompt(req: CompletionRequest): Promise<(Record<string, { logprob: number | null; rank: number; decoded_token: string }> | null)[]> {
    this.checkModel(req.model);
    const ids = req.prompt;
    if (ids.length > this.runtime.contextSize)
      throw new EngineRequestError(
        `This model's maximum context length is ${this.runtime.contextSize} tokens. However, your request has ${ids.length} input tokens.`,
        400,
        'prompt',
      );
    const start = Math.min(Math.max(1, req.prompt_logprobs_start ?? 1), ids.length - 1);
    const topK = req.top_k ?? -1;
    const plan = {
      sampling: { temperature: req.temperature ?? 1, topP: req.top_p ?? 1, topK: topK > 0 ? topK : 0, minP: req.min_p ?? 0 },
      topLogprobs: req.prompt_logprobs,
      mode: req.logprobs_mode ?? this.logprobsMode,
    };
    return this.exclusive(async () => {
      const dists = await this.runtime.distributions(ids.slice(0, -1), start);
      const out: (Record<string, { logprob: number | null; rank: number; decoded_token: string }> | null)[] = new Array(start).fill(null);
      dists.forEach((d, k) => {
        const id = ids[start + k]!;
        const t = this.reported(plan, d, id);
        const entry: Record<string, { logprob: number | null; rank: number; decoded_token: string }> = {};
        t.top.forEach(
          (a, r) =>
            (entry[String(a.id)] = { logprob: finiteLogprob(a.logprob), rank: r + 1, decoded_token: this.runtime.tokenText(a.id, true) }),
        );
        entry[String(id)] = { logprob: finiteLogprob(t.logprob), rank: d.rank(id) + 1, decoded_token: this.runtime.tokenText(id, true) };
        out.push(entry);
      });
      return out;
    });
  }

  /** One `logprobs.content[]` entry; `asIds` renders tokens as `token_id:N` (vLLM's --return-tokens-as-token-ids). */
  logprobEntry(t: GeneratedToken, asIds: boolean): LogprobEntry {
    const render = (id: number) => (asIds ? `token_id:${id}` : this.runtime.tokenText(id, true));
    return {
      token: render(t.id),
      logprob: finiteLogprob(t.logprob),
      bytes: this.runtime.tokenBytes(t.id),
      top_logprobs: t.top.map((a) => ({ token: render(a.id), logprob: finiteLogprob(a.logprob), bytes: this.runtime.tokenBytes(a.id) })),
    };
  }

  /** Text of completion tokens, without control tokens such as <|im_end|>. */
  decode(ids: readonly number[]): string {
    return this.runtime.detokenize(ids);
  }

  private answer(req: EngineChatRequest, plan: Plan, gen: Generated): ChatResponse {
    const ids = gen.tokens.map((t) => t.id);
    const last = ids[ids.length - 1];
    const textIds = last !== undefined && this.runtime.isEndOfGeneration(last) ? ids.slice(0, -1) : ids;
    let text = this.runtime.detokenize(textIds);
    if (gen.stopCut !== null) text = text.slice(0, gen.stopCut);
    const out = parseAssistantOutput(text, { parseToolCalls: plan.parseToolCalls });
    const finish = out.toolCalls.length && gen.finish === 'stop' ? 'tool_calls' : gen.finish;
    const asIds = req.return_tokens_as_token_ids === true;
    const logprobs = plan.wantLogprobs ? { content: gen.tokens.map((t) => this.logprobEntry(t, asIds)) } : null;
    const response: ChatResponse = {
      id: `chatcmpl-${randomBytes(12).toString('hex')}`,
      object: 'chat.completion',
      created: Math.floor(Date.now() / 1000),
      model: this.modelName,
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: out.content, reasoning: out.reasoning, tool_calls: out.toolCalls },
          logprobs,
          finish_reason: finish,
          stop_reason: null,
          token_ids: req.return_token_ids === true ? ids : null,
        },
      ],
      usage: {
        prompt_tokens: plan.promptIds.length,
        completion_tokens: ids.length,
        total_tokens: plan.promptIds.length + ids.length,
        prompt_tokens_details: null,
      },
      prompt_token_ids: req.return_token_ids === true ? plan.promptIds : null,
    };
    return response;
  }
}

interface Generated {
  tokens: GeneratedToken[];
  finish: 'stop' | 'length';
  /** Character offset where a stop string begins (the text is cut there). */
  stopCut: number | null;
}

function firstStop(text: string, stops: string[]): number | null {
  let best: number | null = null;
  for (const s of stops) {
    const i = text.indexOf(s);
    if (i >= 0 && (best === null || i < best)) best = i;
  }
  return best;
}
