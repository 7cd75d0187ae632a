// Turns generated assistant text into a chat message the way vLLM's qwen3 reasoning parser and hermes
// tool parser do, and back: the scripted policy writes tool calls in exactly the form the Qwen3
// template re-renders, so the next prompt extends this completion token for token.
import { randomBytes } from 'node:crypto';
import { pythonJsonDumps } from '../capture/render/python-json.js';
import type { ChatToolCall } from '../capture/types.js';

export { pythonJsonDumps };

export interface AssistantOutput {
  content: string | null;
  reasoning: string | null;
  toolCalls: ChatToolCall[];
}

/** One Hermes tool call as the Qwen3 template renders it in an assistant turn. */
export function renderToolCall(name: string, args: Record<string, unknown>): string {
  return `<tool_call>\n{"name": ${JSON.stringify(name)}, "arguments": ${pythonJsonDumps(args)}}\n</tool_call>`;
}

/** Assistant text (reasoning, content, tool calls) laid out as the Qwen3 template renders it. */
export function renderAssistantText(opts: { reasoning?: string | undefined; content?: string | undefined; toolCalls?: { name: string; arguments: Record<string, unknown> }[] }): string {
  let text = '';
  if (opts.reasoning !== undefined) text += `<think>\n${opts.reasoning.replace(/^\n+|\n+$/g, '')}\n</think>\n\n`;
  const content = opts.content ?? '';
  text += content;
  (opts.toolCalls ?? []).forEach((call, i) => {
    if (i > 0 || content) text += '\n';
    text += renderToolCall(call.name, call.arguments);
  });
  return text;
}

const TOOL_CALL = /<tool_call>([\s\S]*?)<\/tool_call>|<tool_call>([\s\S]*)$/g;

export function parseAssistantOutput(text: string, opts: { parseToolCalls: boolean }): AssistantOutput {
  let reasoning: string | null = null;
  let rest = text;
  const end = text.indexOf('</think>');
  if (end >= 0) {
    reasoning = text.slice(0, end).replace(/^<think>/, '').replace(/^\n+|\n+$/g, '');
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
