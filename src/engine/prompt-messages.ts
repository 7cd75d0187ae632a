// Reads a rendered ChatML prompt (Qwen2.5/Qwen3's chat format) back into chat messages and tools, so
// the scripted policy, which decides from messages, also works when the engine is called with token
// ids (the proxy renders in token-in mode and sends only ids). It inverts what the Qwen3 template
// writes: the system block's <tools> list, user turns, assistant turns with <think> and <tool_call>
// blocks, and user turns made of <tool_response> sections (tool results).
import type { ChatMessage, ChatTool } from '../capture/types.js';
import { parseAssistantOutput } from './assistant-output.js';

export interface PromptConversation {
  messages: ChatMessage[];
  tools: ChatTool[] | undefined;
}

const TURN = /<\|im_start\|>(\w+)\n([\s\S]*?)(?:<\|im_end\|>|$)/g;
const TOOLS_BLOCK = /# Tools\n[\s\S]*?<tools>\n([\s\S]*?)\n<\/tools>[\s\S]*$/;
const TOOL_RESPONSE = /<tool_response>\n([\s\S]*?)\n<\/tool_response>/g;

/** null when the text is not in ChatML form (no `<|im_start|>` turn). */
export function parseChatMlPrompt(text: string): PromptConversation | null {
  const messages: ChatMessage[] = [];
  let tools: ChatTool[] | undefined;
  let any = false;
  for (const m of text.matchAll(TURN)) {
    any = true;
    const role = m[1]!;
    let body = m[2]!;
    // The generation prompt: an open assistant turn at the end.
    if (role === 'assistant' && m.index! + m[0].length === text.length && !m[0].endsWith('<|im_end|>')) break;
    if (role === 'system') {
      const toolsMatch = TOOLS_BLOCK.exec(body);
      if (toolsMatch) {
        tools = toolsMatch[1]!
          .split('\n')
          .filter((l) => l.trim())
          .flatMap((l) => {
            try {
              return [JSON.parse(l) as ChatTool];
            } catch {
              return [];
            }
          });
        body = body.slice(0, toolsMatch.index).replace(/\n\n$/, '');
        if (!body) continue;
      }
      messages.push({ role: 'system', content: body });
    } else if (role === 'user') {
      const trimmed = body.trim();
      if (trimmed.startsWith('<tool_response>') && trimmed.endsWith('</tool_response>')) {
        for (const r of body.matchAll(TOOL_RESPONSE)) messages.push({ role: 'tool', content: r[1]! });
      } else messages.push({ role: 'user', content: body });
    } else if (role === 'assistant') {
      const out = parseAssistantOutput(body, { parseToolCalls: true });
      const msg: ChatMessage = { role: 'assistant', content: out.content };
      if (out.reasoning !== null) msg.reasoning_content = out.reasoning;
      if (out.toolCalls.length) msg.tool_calls = out.toolCalls;
      messages.push(msg);
    } else messages.push({ role, content: body });
  }
  return any ? { messages, tools } : null;
}
