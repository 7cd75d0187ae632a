// The embedded engine renders tool-call arguments like vLLM: parsed, then re-dumped by the template.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ChatTemplate } from '../../src/engine/chat-template.js';
import type { ChatMessage } from '../../src/capture/types.js';

// The tool-call part of Qwen3's template, verbatim in its logic.
const TEMPLATE = `{%- for m in messages %}{%- if m.tool_calls %}{%- for tc in m.tool_calls %}<tool_call>{"name": "{{ tc.function.name }}", "arguments": {% if tc.function.arguments is string %}{{ tc.function.arguments }}{% else %}{{ tc.function.arguments | tojson }}{% endif %}}</tool_call>{%- endfor %}{%- endif %}{%- endfor %}`;

const withArguments = (args: string): ChatMessage[] => [
  { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'bash', arguments: args } }] },
];

test('re-serialised arguments (compact, reordered whitespace) render exactly like the engine wrote them', () => {
  const template = new ChatTemplate(TEMPLATE);
  const asSampled = template.render(withArguments('{"command": "ls -la", "timeout": 5}'), { addGenerationPrompt: false });
  assert.equal(asSampled, '<tool_call>{"name": "bash", "arguments": {"command": "ls -la", "timeout": 5}}</tool_call>');
  assert.equal(template.render(withArguments('{"command":"ls -la","timeout":5}'), { addGenerationPrompt: false }), asSampled);
  assert.equal(template.render(withArguments('{ "command" : "ls -la" ,\n "timeout" : 5 }'), { addGenerationPrompt: false }), asSampled);
});

test('arguments that are not a JSON object are rendered as the string that came', () => {
  const template = new ChatTemplate(TEMPLATE);
  assert.equal(
    template.render(withArguments('not json'), { addGenerationPrompt: false }),
    '<tool_call>{"name": "bash", "arguments": not json}</tool_call>',
  );
  assert.equal(
    template.render(withArguments('[1,2]'), { addGenerationPrompt: false }),
    '<tool_call>{"name": "bash", "arguments": [1,2]}</tool_call>',
  );
});
