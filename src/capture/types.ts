// Shared shapes of the capture pipeline. The internal form of every model call is an OpenAI
// chat-completions request and response; dialects convert into and out of it.
import type { RenderInfo } from './render/render-info.js';

export type { RenderInfo };

export type DialectName = 'openai_chat' | 'openai_responses' | 'anthropic_messages' | 'google_gemini';

export type JsonObject = Record<string, unknown>;

export interface ChatToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export interface ChatContentPart {
  type: string; // 'text' | 'image_url' | ...
  text?: string;
  image_url?: { url: string; detail?: string };
  [key: string]: unknown;
}

export interface ChatMessage {
  role: string; // system | user | assistant | tool
  content?: string | ChatContentPart[] | null;
  name?: string;
  tool_calls?: ChatToolCall[];
  tool_call_id?: string;
  reasoning_content?: string | null;
  [key: string]: unknown;
}

export interface ChatTool {
  type: 'function';
  function: { name: string; description?: string; parameters?: JsonObject; [key: string]: unknown };
}

/** An OpenAI chat-completions request, as sent to the engine. Unknown fields pass through. */
export interface ChatRequest {
  model?: string;
  messages: ChatMessage[];
  tools?: ChatTool[];
  tool_choice?: unknown;
  stream?: boolean;
  max_tokens?: number;
  temperature?: number;
  [key: string]: unknown;
}

export interface LogprobEntry {
  token: string;
  logprob: number | null;
  bytes?: number[] | null;
  top_logprobs?: { token: string; logprob: number; bytes?: number[] | null }[];
  token_id?: number;
}

export interface ChatChoice {
  index: number;
  message: ChatMessage;
  finish_reason: string | null;
  logprobs?: { content?: LogprobEntry[] | null } | null;
  token_ids?: number[] | null;
  [key: string]: unknown;
}

export interface ChatUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details?: { cached_tokens?: number; [key: string]: unknown } | null;
  completion_tokens_details?: JsonObject | null;
  [key: string]: unknown;
}

/** An engine's chat-completions answer (vLLM shape: top-level prompt_token_ids, choices[].token_ids). */
export interface ChatResponse {
  id: string;
  object: string;
  created: number;
  model: string;
  choices: ChatChoice[];
  usage?: ChatUsage;
  prompt_token_ids?: number[] | null;
  [key: string]: unknown;
}

/** One server-sent event. `event` is the named event type (Anthropic, Responses); bare events omit it. */
export interface SseEvent {
  event?: string;
  /** JSON-serialisable payload, or a raw string (e.g. "[DONE]"). */
  data: unknown;
}

export interface DialectContext {
  /** Request path with query, as received (e.g. `/v1beta/models/m:streamGenerateContent?alt=sse`). */
  path: string;
  /** The model name the client used (body `model`, or the Gemini path segment). */
  clientModel: string | undefined;
  /** The request as the client sent it (parsed JSON body). */
  request: JsonObject;
  /** The engine's served model, when known (drives model-specific defaults such as Qwen3.5 thinking). */
  servedModel?: string;
}

/** Raised by a dialect for input it cannot convert; becomes a 400 in that dialect's error shape. */
export class DialectError extends Error {
  constructor(
    message: string,
    readonly status = 400,
  ) {
    super(message);
    this.name = 'DialectError';
  }
}

/**
 * One API dialect. Both conversions are pure functions; the proxy owns I/O.
 * The engine answer handed to `fromChat`/`streamEvents` is normalised (reasoning in
 * `message.reasoning_content`, usage details filled) and never carries token ids to the client.
 */
export interface Dialect {
  readonly name: DialectName;
  /** False when the dialect's SDKs cannot parse SSE comment lines, so keepalives must not use them. */
  readonly sseComments?: boolean;
  /** The model name the client asked for (for echoing it back). */
  clientModel(body: JsonObject, path: string): string | undefined;
  /** Whether the client wants a stream (body flag, or the URL for Gemini). */
  wantsStream(body: JsonObject, path: string): boolean;
  /** Client request -> chat-completions request. Throws DialectError on bad input. */
  toChat(body: JsonObject, ctx: DialectContext): ChatRequest;
  /** Engine answer -> the client's JSON body. */
  fromChat(response: ChatResponse, ctx: DialectContext): unknown;
  /** Engine answer -> the client's exact SSE event sequence (without keepalives). */
  streamEvents(response: ChatResponse, ctx: DialectContext): SseEvent[];
  /** Error body for a non-streamed error reply. */
  errorBody(status: number, message: string): unknown;
  /** Error event for a failure after stream headers were sent. */
  streamErrorEvent(status: number, message: string): SseEvent;
}

export type CaptureLevel = 'tokens' | 'logprobs' | 'text';

/** What the engine produced for one call, exactly as it saw and sampled it. */
export interface TokenCapture {
  prompt_token_ids: number[] | null;
  completion_token_ids: number[] | null;
  /** Behaviour logprobs of the sampled tokens; null when missing or misaligned (turn stays context). */
  logprobs: number[] | null;
  /** Top alternatives per sampled position, when the engine returned them. */
  top_logprobs: { token_id: number | null; token: string; logprob: number }[][] | null;
  /** Raw bytes of each sampled token, when the engine returned them (for the viewer). */
  token_bytes: (number[] | null)[] | null;
}

export interface CallError {
  status: number;
  message: string;
  /** Where it failed: bad client input, the engine, or the budget stop. */
  kind: 'client' | 'engine' | 'internal';
}

/** One answered model call as stored and exported. */
export interface CallRecord extends TokenCapture {
  call_id: string; // 12 hex, doubles as the graph node id
  session_id: string;
  index: number; // arrival order within the session
  dialect: DialectName;
  path: string;
  stream: boolean;
  started_at: string; // ISO-8601
  ended_at: string;
  latency_ms: number;
  /** The harness's own session id (x-session-id etc.), recorded, never routed on. */
  harness_session_id: string | null;
  /** Request as received: headers with secrets redacted, and the parsed body. */
  request: { headers: Record<string, string>; body: unknown };
  engine_url: string;
  engine_request: ChatRequest | null;
  engine_response: ChatResponse | null;
  /** The non-streamed body the client got back (for streams: the JSON equivalent of the replay). */
  response_body: unknown;
  model: string | null;
  finish_reason: string | null;
  usage: ChatUsage | null;
  n_tools: number;
  requested_sampling_params: JsonObject;
  sampling_params: JsonObject;
  /** Graded ingest findings, e.g. "[FATAL] logprob_misalign: ...". */
  findings: string[];
  error: CallError | null;
  /**
   * Set when the proxy rendered the prompt itself (token-in mode, `--render proxy`): how the prompt
   * ids were made (bridge from an anchor call, or a full render and why), the drift against a full
   * render, the answer's tool-call parse status, and a digest of the recorded tokens. See docs/token-in.md.
   */
  render?: RenderInfo;
}

/** The sampling keys a session may pin on every call it forwards (a batch's or a served rollout's training sampling). */
export const PINNABLE_SAMPLING_KEYS = [
  'temperature',
  'top_p',
  'top_k',
  'min_p',
  'frequency_penalty',
  'presence_penalty',
  'repetition_penalty',
  'seed',
] as const;
/** Sampling a session pins; the harness's own values are overridden (and recorded as requested). */
export type PinnedSampling = Partial<Record<(typeof PINNABLE_SAMPLING_KEYS)[number], number>>;

export interface SessionInfo {
  session_id: string;
  created_at: string;
  model: string;
  engine_url: string;
  max_model_calls: number; // 0 = unlimited
  metadata: JsonObject;
  /** The engine's capture level when the session was created (below `tokens`: evaluation only). */
  capture_level?: CaptureLevel;
  /** Sampling pinned on every call of this session (a batch's); the harness's own values are recorded as requested. */
  sampling?: PinnedSampling;
  /**
   * Set for a session created with its own secret key: the key's SHA-256 (hex). Such a session is
   * reached on the model routes by that key only, never by its id; the key itself is never stored.
   */
  key_sha256?: string;
}

/** Where the proxy and its session registry say what they do (the CLI's stderr, VS Code's output channel). */
export interface ProxyLogger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
  debug?(message: string): void;
}
