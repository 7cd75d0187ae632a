// Turns generated assistant text into a chat message the way vLLM's qwen3 reasoning parser and hermes
// tool parser do, and back: the scripted policy writes tool calls in the form the Qwen3 template
// re-renders (so a re-render extends this completion token for token) unless a call says `sampled_as`,
// which writes them as a real model may (other spacing, key order) to prove the token-in bridge.
import { randomBytes } from 'node:crypto';
import { pythonJsonDumps } from '../capture/render/python-json.js';
import type { ChatToolCall } from '../capture/types.js';
import type { SampledAs, ScriptedToolCall } from './policy.js';

export { pythonJsonDumps };

export interface AssistantOutput {
  content: string | null;
  reasoning: string | null;
  toolCalls: ChatToolCall[];
}

/**
 * JSON written another way than the template does: `compact` is JSON.stringify's, `pretty` indents by
 * two, `python` is json.dumps'; `reversed` turns the key order of every object around.
 */
export function sampledJson(value: unknown, style: SampledAs): string {
  const ordered = style.key_order === 'reversed' ? reverseKeys(value) : value;
  if (style.spacing === 'python') return pythonJsonDumps(ordered);
  return JSON.stringify(ordered, null, style.spacing === 'pretty' ? 2 : undefined);
}

function reverseKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(reverseKeys);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.entries(value as Record<string, unknown>)
      .reverse()
      .map(([k, v]) => [k, reverseKeys(v)]),
  );
}

/**
 * One Hermes tool call as the Qwen3 template renders it in an assistant turn, or, with `sampledAs`,
 * as a model might sample it instead (the hermes parser accepts both; the re-render does not match).
 */
export function renderToolCall(name: string, args: Record<string, unknown>, sampledAs?: SampledAs): string {
  const body = sampledAs
    ? sampledJson({ name, arguments: args }, sampledAs)
    : `{"name": ${JSON.stringify(name)}, "arguments": ${pythonJsonDumps(args)}}`;
  return `<tool_call>\n${body}\n</tool_call>`;
}

/** Assistant text (reasoning, content, tool calls) laid out as the Qwen3 template renders it. */
export function renderAssistantText(opts: {
  reasoning?: string | undefined;
  content?: string | undefined;
  toolCalls?: ScriptedToolCall[];
}): string {
  let text = '';
  if (opts.reasoning !== undefined) text += `<think>\n${opts.reasoning.replace(/^\n+|\n+$/g, '')}\n</think>\n\n`;
  const content = opts.content ?? '';
  text += content;
  (opts.toolCalls ?? []).forEach((call, i) => {
    if (i > 0 || content) text += '\n';
    text += renderToolCall(call.name, call.arguments, call.sampledAs);
  });
  return text;
}

const TOOL_CALL = /<tool_call>([\s\S]*?)<\/tool_call>|<tool_call>([\s\S]*)$/g;

export function parseAssistantOutput(text: string, opts: { parseToolCalls: boolean }): AssistantOutput {
  let reasoning: string | null = null;
  let rest = text;
  const end = text.indexOf('</think>');
  if (end >= 0) {
    reasoning = text
      .slice(0, end)
      .replace(/^<think>/, '')
      .replace(/^\n+|\n+$/g, '');
    rest = text.slice(end + '</think>'.length).replace(/^\n+/, '');
  }
  const toolCalls: ChatToolCall[] = [];
  const start = opts.parseToolCalls ? rest.indexOf('<tool_call>') : -1;
  if (start >= 0) {
    for (const m of rest.matchAll(TOOL_CALL)) {
      let call: unknown;
      try {
        call = JSON.parse((m[1] ?? m[2] ?? '').trim());
      } catch {
        // Like vLLM: one malformed call and the whole output stays plain content.
        return { content: rest || null, reasoning, toolCalls: [] };
      }
      const c = call as { name?: unknown; arguments?: unknown };
      if (typeof c?.name !== 'string') return { content: rest || null, reasoning, toolCalls: [] };
      toolCalls.push({
        id: `chatcmpl-tool-${randomBytes(8).toString('hex')}`,
        type: 'function',
        function: { name: c.name, arguments: pythonJsonDumps(c.arguments ?? {}) },
      });
    }
    // The template puts one '\n' between content and the first call; drop it so a re-render is exact.
    const content = rest.slice(0, start).replace(/\n$/, '');
    return { content: content || null, reasoning, toolCalls };
  }
  return { content: rest, reasoning, toolCalls };
}
