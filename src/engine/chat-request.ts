// The chat-completions request the embedded engine accepts: OpenAI's fields plus vLLM's extensions
// (return_token_ids, return_tokens_as_token_ids, top_k, min_p, chat_template_kwargs, ...).
// Unknown fields pass through untouched, as with vLLM.
import { z } from 'zod';

const contentPart = z.object({ type: z.string() }).passthrough();

const message = z
  .object({
    role: z.enum(['system', 'developer', 'user', 'assistant', 'tool']),
    content: z.union([z.string(), z.array(contentPart), z.null()]).optional(),
    tool_calls: z
      .array(
        z
          .object({
            id: z.string().optional(),
            type: z.literal('function').optional(),
            function: z.object({ name: z.string(), arguments: z.union([z.string(), z.record(z.string(), z.unknown())]) }).passthrough(),
          })
          .passthrough(),
      )
      .optional()
      .nullable(),
  })
  .passthrough();

const tool = z
  .object({
    type: z.literal('function'),
    function: z
      .object({ name: z.string().min(1), description: z.string().optional(), parameters: z.record(z.string(), z.unknown()).optional() })
      .passthrough(),
  })
  .passthrough();

const nonNegInt = z.number().int().nonnegative();

export const chatRequestSchema = z
  .object({
    model: z.string().optional(),
    messages: z.array(message).min(1, 'messages must not be empty'),
    tools: z.array(tool).optional().nullable(),
    tool_choice: z.unknown().optional(),
    stream: z.boolean().optional().nullable(),
    stream_options: z.object({ include_usage: z.boolean().optional() }).passthrough().optional().nullable(),
    max_tokens: nonNegInt.optional().nullable(),
    max_completion_tokens: nonNegInt.optional().nullable(),
    temperature: z.number().min(0).max(100).optional().nullable(),
    top_p: z.number().gt(0).max(1).optional().nullable(),
    top_k: z.number().int().min(-1).optional().nullable(),
    min_p: z.number().min(0).max(1).optional().nullable(),
    seed: z.number().int().optional().nullable(),
    stop: z
      .union([z.string(), z.array(z.string())])
      .optional()
      .nullable(),
    n: z.number().int().optional().nullable(),
    logprobs: z.boolean().optional().nullable(),
    top_logprobs: z.number().int().min(0).max(20).optional().nullable(),
    return_token_ids: z.boolean().optional().nullable(),
    return_tokens_as_token_ids: z.boolean().optional().nullable(),
    /** Engine extension: 'processed' or 'raw' for this request (default: the server's mode). */
    logprobs_mode: z.enum(['processed', 'raw']).optional().nullable(),
    chat_template_kwargs: z.record(z.string(), z.unknown()).optional().nullable(),
    add_generation_prompt: z.boolean().optional().nullable(),
    frequency_penalty: z.number().optional().nullable(),
    presence_penalty: z.number().optional().nullable(),
    repetition_penalty: z.number().optional().nullable(),
  })
  .passthrough();

export type EngineChatRequest = z.infer<typeof chatRequestSchema>;

export const tokenizeRequestSchema = z.union([
  z.object({ model: z.string().optional(), prompt: z.string(), add_special_tokens: z.boolean().optional() }).passthrough(),
  z
    .object({
      model: z.string().optional(),
      messages: chatRequestSchema.shape.messages,
      tools: chatRequestSchema.shape.tools,
      add_generation_prompt: z.boolean().optional(),
      chat_template_kwargs: z.record(z.string(), z.unknown()).optional(),
    })
    .passthrough(),
]);

export type TokenizeRequest = z.infer<typeof tokenizeRequestSchema>;

/**
 * POST /v1/completions as the embedded engine serves it: teacher-forced scoring of a token-id prompt
 * (vLLM's `prompt_logprobs`), which is what `harness-lab rescore` asks any engine for. The engine
 * generates nothing (max_tokens is accepted, the text is empty).
 */
export const completionRequestSchema = z
  .object({
    model: z.string().optional(),
    prompt: z.array(nonNegInt).min(2, 'prompt must hold at least two token ids to score'),
    max_tokens: nonNegInt.optional().nullable(),
    prompt_logprobs: z.number().int().min(0).max(20),
    temperature: chatRequestSchema.shape.temperature,
    top_p: chatRequestSchema.shape.top_p,
    top_k: chatRequestSchema.shape.top_k,
    min_p: chatRequestSchema.shape.min_p,
    logprobs_mode: chatRequestSchema.shape.logprobs_mode,
    /** Engine extension: positions before this one get null (vLLM ignores it and scores every position). */
    prompt_logprobs_start: z.number().int().min(1).optional().nullable(),
  })
  .passthrough();

export type CompletionRequest = z.infer<typeof completionRequestSchema>;

/**
 * POST /v1/completions without `prompt_logprobs`: generation from a token-id prompt, in vLLM's shape
 * (what the capture proxy sends in token-in mode): sampled ids in `choices[0].token_ids`, the prompt
 * echoed in `choices[0].prompt_token_ids`, logprobs as `token_logprobs` with `token_id:N` tokens.
 */
export const tokenCompletionRequestSchema = z
  .object({
    model: z.string().optional(),
    prompt: z.array(nonNegInt).min(1, 'prompt must hold at least one token id'),
    max_tokens: nonNegInt.optional().nullable(),
    temperature: chatRequestSchema.shape.temperature,
    top_p: chatRequestSchema.shape.top_p,
    top_k: chatRequestSchema.shape.top_k,
    min_p: chatRequestSchema.shape.min_p,
    seed: chatRequestSchema.shape.seed,
    n: chatRequestSchema.shape.n,
    stop: chatRequestSchema.shape.stop,
    stop_token_ids: z.array(nonNegInt).optional().nullable(),
    logprobs: z.number().int().min(0).max(20).optional().nullable(),
    return_token_ids: z.boolean().optional().nullable(),
    return_tokens_as_token_ids: z.boolean().optional().nullable(),
    logprobs_mode: chatRequestSchema.shape.logprobs_mode,
    stream: z.literal(false).optional().nullable(),
    frequency_penalty: chatRequestSchema.shape.frequency_penalty,
    presence_penalty: chatRequestSchema.shape.presence_penalty,
    repetition_penalty: chatRequestSchema.shape.repetition_penalty,
  })
  .passthrough();

export type TokenCompletionRequest = z.infer<typeof tokenCompletionRequestSchema>;
/** vLLM's `POST /detokenize` body. */
export const detokenizeRequestSchema = z
  .object({ model: z.string().optional(), tokens: z.array(z.int().min(0)).max(1_000_000) })
  .passthrough();

export type DetokenizeRequest = z.infer<typeof detokenizeRequestSchema>;

/** A request the engine refuses; `status` becomes the HTTP status. */
export class EngineRequestError extends Error {
  constructor(
    message: string,
    readonly status = 400,
    readonly param: string | null = null,
  ) {
    super(message);
    this.name = 'EngineRequestError';
  }
}

/** zod issues as one readable line naming the fields. */
export function describeIssues(err: z.ZodError): string {
  return err.issues.map((i) => `${i.path.join('.') || 'body'}: ${i.message}`).join('; ');
}
