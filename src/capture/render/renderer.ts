// The served model's tokenizer and chat template in the proxy: renders a conversation to text and ids
// exactly as the engine would (vLLM: apply_chat_template, then tokenize without adding special
// tokens), and parses sampled ids back into an assistant message (reasoning, text, tool calls) the way
// vLLM's reasoning and tool parsers for the model's family do, but on ids at special-token boundaries.
import { createHash } from 'node:crypto';
import { ChatTemplate } from './chat-template.js';
import { detectFamily, type FamilyInfo } from './families.js';
import { readModelFiles, type ModelFiles } from './model-files.js';
import { pythonJsonDumps } from './python-json.js';
import { cutTokens, SegmentCache, type AddedTokenSpec, type SegmentCacheStats } from './segment-cache.js';
import type { ChatMessage, ChatTool, ChatToolCall } from '../types.js';
import { commonPrefix, idList } from '../token-ids.js';

/** Per-call status of one tool-call block (the renderers project's ToolCallParseStatus, snake case). */
export type ToolCallStatus = 'ok' | 'invalid_json' | 'missing_name' | 'malformed_structure' | 'unclosed_block' | 'unknown_tool';

/**
 * What the answer's tool calls came to: `none` (no block), `ok` (every block parsed) or `failed` (a
 * block did not parse, so the whole answer went to the harness as text, as vLLM's hermes parser does).
 */
export type ToolCallParse = 'none' | 'ok' | 'failed';

export interface ParsedAnswer {
  content: string | null;
  reasoning: string | null;
  toolCalls: ChatToolCall[];
  toolCallParse: ToolCallParse;
  toolCallStatuses: ToolCallStatus[];
  /** Whether the completion ended with a stop token (false: cut by max_tokens or the context). */
  stopped: boolean;
}

export interface RenderTextOptions {
  tools?: ChatTool[] | undefined;
  kwargs?: Record<string, unknown> | undefined;
  addGenerationPrompt?: boolean;
}

type HfTokenizer = import('@huggingface/tokenizers').Tokenizer;

/** What a thread that renders without the vocabulary needs to know of a loaded model (see TokenRenderer). */
export interface RendererDescription {
  source: string;
  chatTemplate: string;
  bosToken: string;
  eosToken: string;
  family: FamilyInfo;
  stopIds: number[];
  templateDigest: string;
  /** The id of the token that closes an assistant turn (eos), when the vocabulary has it. */
  turnCloseId: number | null;
}

/**
 * The renderer as the proxy uses it: the chat template is rendered where it is called (small
 * stand-in conversations), everything that needs the vocabulary (tokenizing, parsing sampled ids)
 * is asynchronous, so it can run on a tokenizer thread (RenderWorkers) or in this one (InThreadRenderer).
 */
export interface TokenRenderer {
  readonly family: FamilyInfo;
  readonly stopIds: readonly number[];
  readonly source: string;
  readonly templateDigest: string;
  readonly turnCloseText: string;
  readonly turnCloseId: number | null;
  renderText(messages: ChatMessage[], opts?: RenderTextOptions): string;
  encode(text: string): Promise<number[]>;
  /** Render and tokenize a whole conversation (a full render). */
  renderIds(messages: ChatMessage[], opts?: RenderTextOptions): Promise<number[]>;
  /**
   * A full render of `messages` set against `ids` (the bridge's check): only its length and the
   * prefix it shares with `ids` come back, not the ids themselves.
   */
  compareRender(messages: ChatMessage[], opts: RenderTextOptions, ids: readonly number[]): Promise<RenderComparison>;
  parseAnswer(ids: readonly number[], opts: { tools?: ChatTool[] | undefined; parseToolCalls: boolean }): Promise<ParsedAnswer>;
}

/** A full render against a prompt: its length in tokens and how many leading tokens they share. */
export interface RenderComparison {
  tokens: number;
  commonPrefix: number;
}

export class Renderer {
  readonly family: FamilyInfo;
  readonly stopIds: readonly number[];
  /** SHA-256 (first 16 hex) of the chat template: part of a turn's identity. */
  readonly templateDigest: string;
  private readonly template: ChatTemplate;
  private readonly stopSet: Set<number>;
  private readonly markerIds: { thinkStart?: number; thinkEnd?: number; toolCallStart?: number; toolCallEnd?: number } = {};
  private readonly segments: SegmentCache;

  private constructor(
    readonly files: ModelFiles,
    private readonly tokenizer: HfTokenizer,
  ) {
    this.template = new ChatTemplate(files.chatTemplate);
    this.templateDigest = createHash('sha256').update(files.chatTemplate).digest('hex').slice(0, 16);
    this.family = detectFamily(files.chatTemplate);
    const stop = new Set(files.stopIds);
    for (const text of this.family.stopTexts) {
      const id = this.tokenId(text);
      if (id !== undefined) stop.add(id);
    }
    this.stopSet = stop;
    this.stopIds = [...stop];
    const m = this.family.markers;
    if (m) {
      for (const key of ['thinkStart', 'thinkEnd', 'toolCallStart', 'toolCallEnd'] as const) {
        const id = this.tokenId(m[key]);
        if (id !== undefined) this.markerIds[key] = id;
      }
    }
    const added = (files.tokenizerJson.added_tokens ?? []) as AddedTokenSpec[];
    this.segments = new SegmentCache(cutTokens(added), (text) => this.encodeUncached(text));
  }

  /** Loads a model folder or GGUF file. The vocabulary is built once; keep the Renderer for the proxy's life. */
  static async load(path: string): Promise<Renderer> {
    const files = await readModelFiles(path);
    const { Tokenizer } = await import('@huggingface/tokenizers');
    // Yield once so the file reads' callbacks and other I/O run before the synchronous vocabulary build.
    await new Promise((r) => setImmediate(r));
    return new Renderer(files, new Tokenizer(files.tokenizerJson, files.tokenizerConfig));
  }

  get source(): string {
    return this.files.source;
  }

  /** The conversation as the chat template writes it. */
  renderText(messages: ChatMessage[], opts: RenderTextOptions = {}): string {
    return this.template.render(messages, {
      tools: opts.tools,
      kwargs: opts.kwargs,
      addGenerationPrompt: opts.addGenerationPrompt ?? true,
      bosToken: this.files.bosToken,
      eosToken: this.files.eosToken,
    });
  }

  /**
   * Text to ids; special tokens written in the text are recognised, none are added. Pieces of text
   * seen before (cut at special tokens, see SegmentCache) are not tokenized again.
   */
  encode(text: string): number[] {
    return idList(this.encodeIds(text));
  }

  /** `encode` as a typed array (what the tokenizer thread hands to the main thread). */
  encodeIds(text: string): Int32Array<ArrayBuffer> {
    if (text === '') return new Int32Array(0);
    return this.segments.encode(text);
  }

  /** `encode` without the piece cache: the library on the whole text. */
  encodeUncached(text: string): number[] {
    if (text === '') return [];
    return this.tokenizer.encode(text, { add_special_tokens: false }).ids;
  }

  /** Render and tokenize a whole conversation. */
  renderIds(messages: ChatMessage[], opts: RenderTextOptions = {}): number[] {
    return idList(this.renderIdsTyped(messages, opts));
  }

  /** `renderIds` as a typed array. */
  renderIdsTyped(messages: ChatMessage[], opts: RenderTextOptions = {}): Int32Array<ArrayBuffer> {
    return this.encodeIds(this.renderText(messages, opts));
  }

  /** A full render of `messages` set against `ids`: see TokenRenderer.compareRender. */
  compareRender(messages: ChatMessage[], opts: RenderTextOptions, ids: ArrayLike<number>): RenderComparison {
    const full = this.renderIdsTyped(messages, opts);
    return { tokens: full.length, commonPrefix: commonPrefix(full, ids) };
  }

  get cacheStats(): SegmentCacheStats {
    return this.segments.snapshot();
  }

  describe(): RendererDescription {
    const close = this.files.eosToken ? this.tokenId(this.files.eosToken) : undefined;
    return {
      source: this.files.source,
      chatTemplate: this.files.chatTemplate,
      bosToken: this.files.bosToken,
      eosToken: this.files.eosToken,
      family: this.family,
      stopIds: [...this.stopIds],
      templateDigest: this.templateDigest,
      turnCloseId: close ?? null,
    };
  }

  decode(ids: readonly number[], skipSpecialTokens = false): string {
    if (ids.length === 0) return '';
    return this.tokenizer.decode([...ids], { skip_special_tokens: skipSpecialTokens, clean_up_tokenization_spaces: false });
  }

  tokenId(text: string): number | undefined {
    return this.tokenizer.token_to_id(text);
  }

  tokenText(id: number): string {
    return this.tokenizer.id_to_token(id) ?? '';
  }

  isStop(id: number): boolean {
    return this.stopSet.has(id);
  }

  /** The text of the token that closes an assistant turn in this template (eos, e.g. `<|im_end|>`). */
  get turnCloseText(): string {
    return this.files.eosToken;
  }

  /**
   * Sampled ids -> assistant message. Reasoning is resolved first (`</think>` splits it off; a
   * completion that opened `<think>` and never closed it is all reasoning, as vLLM's qwen3 parser
   * treats it), and tool calls are looked for only after it. A block that does not parse turns the
   * whole answer into text, as vLLM's hermes parser does; the statuses say which block and why.
   */
  parseAnswer(ids: readonly number[], opts: { tools?: ChatTool[] | undefined; parseToolCalls: boolean }): ParsedAnswer {
    const last = ids[ids.length - 1];
    const stopped = last !== undefined && this.isStop(last);
    const body = stopped ? ids.slice(0, -1) : ids.slice();
    const { thinkStart, thinkEnd, toolCallStart, toolCallEnd } = this.markerIds;
    let reasoning: string | null = null;
    let rest = body;
    const end = thinkEnd === undefined ? -1 : body.indexOf(thinkEnd);
    if (end >= 0) {
      const inner = body.slice(body[0] === thinkStart ? 1 : 0, end);
      reasoning = this.decode(inner, true).replace(/^\n+|\n+$/g, '');
      rest = body.slice(end + 1);
    } else if (thinkStart !== undefined && body[0] === thinkStart) {
      reasoning = this.decode(body.slice(1), true).replace(/^\n+/, '');
      rest = [];
    }
    const restText = () => this.decode(rest, true).replace(reasoning === null ? /^$/ : /^\n+/, '');
    const first = opts.parseToolCalls && toolCallStart !== undefined ? rest.indexOf(toolCallStart) : -1;
    if (first < 0)
      return {
        content: reasoning !== null && rest.length === 0 ? null : restText(),
        reasoning,
        toolCalls: [],
        toolCallParse: 'none',
        toolCallStatuses: [],
        stopped,
      };
    const offered = new Set((opts.tools ?? []).map((t) => t.function.name));
    const statuses: ToolCallStatus[] = [];
    const calls: { name: string; args: unknown }[] = [];
    let at = first;
    while (at >= 0 && at < rest.length) {
      const close = toolCallEnd === undefined ? -1 : rest.indexOf(toolCallEnd, at + 1);
      const next = rest.indexOf(toolCallStart!, at + 1);
      // An unclosed block runs to the next opener or the end (vLLM parses a trailing unclosed block too).
      const stop = close >= 0 && (next < 0 || close < next) ? close : next >= 0 ? next : rest.length;
      const text = this.decode(rest.slice(at + 1, stop), true).trim();
      let status: ToolCallStatus = close === stop ? 'ok' : 'unclosed_block';
      let parsed: unknown;
      if (this.family.toolCallBody === 'xml') {
        parsed = parseXmlToolCall(text, opts.tools);
        if (parsed === null) status = 'malformed_structure';
      } else {
        try {
          parsed = JSON.parse(text);
        } catch {
          status = 'invalid_json';
        }
      }
      if (status !== 'invalid_json' && status !== 'malformed_structure') {
        const o = parsed as { name?: unknown; arguments?: unknown } | null;
        if (!o || typeof o !== 'object' || Array.isArray(o)) status = 'malformed_structure';
        else if (typeof o.name !== 'string' || !o.name) status = 'missing_name';
        else if (!('arguments' in o)) status = 'malformed_structure';
        else {
          if (status === 'ok' && offered.size > 0 && !offered.has(o.name)) status = 'unknown_tool';
          calls.push({ name: o.name, args: o.arguments });
        }
      }
      statuses.push(status);
      at = next;
    }
    const failed = statuses.some((s) => s !== 'ok' && s !== 'unknown_tool' && s !== 'unclosed_block') || statuses.length !== calls.length;
    if (failed) return { content: restText(), reasoning, toolCalls: [], toolCallParse: 'failed', toolCallStatuses: statuses, stopped };
    const digest = createHash('sha256').update(JSON.stringify(ids)).digest('hex').slice(0, 20);
    const toolCalls: ChatToolCall[] = calls.map((c, i) => ({
      id: `call_${digest}_${i}`,
      type: 'function',
      function: { name: c.name, arguments: pythonJsonDumps(c.args) },
    }));
    let before = this.decode(rest.slice(0, first), true)
      .replace(reasoning === null ? /^$/ : /^\n+/, '')
      .replace(/\n$/, '');
    // The XML templates write `\n` + content + `\n` before the first block (content trimmed).
    if (this.family.toolCallBody === 'xml') before = before.replace(/^\n+|\n+$/g, '');
    return { content: before || null, reasoning, toolCalls, toolCallParse: 'ok', toolCallStatuses: statuses, stopped };
  }
}

const XML_FUNCTION = /^<function=([^>\n]+)>\n?([\s\S]*?)\n?<\/function>$/;
const XML_PARAMETER = /<parameter=([^>\n]+)>\n?([\s\S]*?)\n?<\/parameter>/g;

/**
 * A qwen3_coder tool-call body (`<function=NAME>` with `<parameter=KEY>` blocks) as `{name, arguments}`,
 * or null when it is not one. Values are typed by the offered tool's JSON schema, as vLLM's
 * qwen3_coder parser does: strings stay as written, integer/number/boolean are read as such, objects
 * and arrays as JSON, `null` is null; a value that does not read as its type, or an argument the
 * schema does not name, stays the text it was.
 */
export function parseXmlToolCall(
  body: string,
  tools: readonly ChatTool[] | undefined,
): { name: string; arguments: Record<string, unknown> } | null {
  const m = XML_FUNCTION.exec(body);
  if (!m) return null;
  const name = m[1]!.trim();
  const schema = tools?.find((t) => t.function.name === name)?.function.parameters as
    { properties?: Record<string, { type?: unknown }> } | undefined;
  const args: Record<string, unknown> = {};
  const inner = m[2]!;
  let seen = 0;
  for (const p of inner.matchAll(XML_PARAMETER)) {
    seen += p[0].length;
    const key = p[1]!.trim();
    args[key] = typedValue(p[2]!, schema?.properties?.[key]?.type);
  }
  // Text between the parameters other than line breaks is not this format.
  if (inner.replace(XML_PARAMETER, '').trim() !== '' || (seen === 0 && inner.trim() !== '')) return null;
  return { name, arguments: args };
}

function typedValue(text: string, type: unknown): unknown {
  const t = typeof type === 'string' ? type.toLowerCase() : Array.isArray(type) ? String(type[0]).toLowerCase() : null;
  if (text.toLowerCase() === 'null') return null;
  if (t === null || t === 'string' || t === 'str' || t === 'text' || t === 'enum') return text;
  if (t === 'integer' || t === 'int') return /^-?\d+$/.test(text.trim()) ? Number(text.trim()) : text;
  if (t === 'number' || t === 'float') return text.trim() !== '' && Number.isFinite(Number(text)) ? Number(text) : text;
  if (t === 'boolean' || t === 'bool') {
    const v = text.trim().toLowerCase();
    return v === 'true' ? true : v === 'false' ? false : text;
  }
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

/** A Renderer used on the calling thread through the asynchronous interface (tests, tools, a fallback). */
export class InThreadRenderer implements TokenRenderer {
  readonly family: FamilyInfo;
  readonly stopIds: readonly number[];
  readonly source: string;
  readonly templateDigest: string;
  readonly turnCloseText: string;
  readonly turnCloseId: number | null;

  constructor(readonly renderer: Renderer) {
    const d = renderer.describe();
    this.family = d.family;
    this.stopIds = d.stopIds;
    this.source = d.source;
    this.templateDigest = d.templateDigest;
    this.turnCloseText = d.eosToken;
    this.turnCloseId = d.turnCloseId;
  }

  renderText(messages: ChatMessage[], opts?: RenderTextOptions): string {
    return this.renderer.renderText(messages, opts);
  }

  encode(text: string): Promise<number[]> {
    return Promise.resolve(this.renderer.encode(text));
  }

  renderIds(messages: ChatMessage[], opts?: RenderTextOptions): Promise<number[]> {
    return Promise.resolve(this.renderer.renderIds(messages, opts));
  }

  compareRender(messages: ChatMessage[], opts: RenderTextOptions, ids: readonly number[]): Promise<RenderComparison> {
    return Promise.resolve(this.renderer.compareRender(messages, opts, ids));
  }

  parseAnswer(ids: readonly number[], opts: { tools?: ChatTool[] | undefined; parseToolCalls: boolean }): Promise<ParsedAnswer> {
    return Promise.resolve(this.renderer.parseAnswer(ids, opts));
  }
}
