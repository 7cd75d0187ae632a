import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseAssistantOutput, pythonJsonDumps, renderAssistantText } from '../../src/engine/assistant-output.js';

test('arguments are serialised like Python json.dumps (what vLLM returns)', () => {
  assert.equal(
    pythonJsonDumps({ command: 'ls -la', n: 2, ok: true, list: [1, 'a'], nested: { x: null } }),
    '{"command": "ls -la", "n": 2, "ok": true, "list": [1, "a"], "nested": {"x": null}}',
  );
  assert.equal(pythonJsonDumps({ s: 'é "q"\n' }), '{"s": "é \\"q\\"\\n"}');
});

test('Hermes tool calls parse into tool_calls; content before them loses the joining newline', () => {
  const text = renderAssistantText({
    content: 'Checking.',
    toolCalls: [
      { name: 'bash', arguments: { command: 'ls' } },
      { name: 'bash', arguments: { command: 'pwd' } },
    ],
  });
  assert.equal(
    text,
    'Checking.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>\n<tool_call>\n{"name": "bash", "arguments": {"command": "pwd"}}\n</tool_call>',
  );
  const out = parseAssistantOutput(text, { parseToolCalls: true });
  assert.equal(out.content, 'Checking.');
  assert.deepEqual(
    out.toolCalls.map((c) => [c.type, c.function.name, c.function.arguments]),
    [
      ['function', 'bash', '{"command": "ls"}'],
      ['function', 'bash', '{"command": "pwd"}'],
    ],
  );
  assert.match(out.toolCalls[0]!.id, /^chatcmpl-tool-[0-9a-f]{16}$/);
});

test('a call without content has null content; tool parsing off keeps the text', () => {
  const text = renderAssistantText({ toolCalls: [{ name: 'bash', arguments: { command: 'ls' } }] });
  assert.ok(text.startsWith('<tool_call>\n'));
  assert.equal(parseAssistantOutput(text, { parseToolCalls: true }).content, null);
  const plain = parseAssistantOutput(text, { parseToolCalls: false });
  assert.equal(plain.content, text);
  assert.equal(plain.toolCalls.length, 0);
});

test('malformed call JSON leaves everything as content (like vLLM)', () => {
  const out = parseAssistantOutput('x\n<tool_call>\n{"name": bash}\n</tool_call>', { parseToolCalls: true });
  assert.equal(out.toolCalls.length, 0);
  assert.equal(out.content, 'x\n<tool_call>\n{"name": bash}\n</tool_call>');
});

test('reasoning splits at </think> and renders back the Qwen3 way', () => {
  const text = renderAssistantText({ reasoning: 'Plan it.', content: 'Done.' });
  assert.equal(text, '<think>\nPlan it.\n</think>\n\nDone.');
  assert.deepEqual(parseAssistantOutput(text, { parseToolCalls: true }), { content: 'Done.', reasoning: 'Plan it.', toolCalls: [] });
  assert.equal(parseAssistantOutput('no thinking', { parseToolCalls: false }).reasoning, null);
});

test('a call sampled its own way (compact, keys reversed) parses to the same call the template would write', () => {
  const args = { command: 'cat numbers.txt', description: 'Print numbers.txt' };
  const text = renderAssistantText({
    toolCalls: [{ name: 'bash', arguments: args, sampledAs: { spacing: 'compact', key_order: 'reversed' } }],
  });
  assert.equal(
    text,
    '<tool_call>\n{"arguments":{"description":"Print numbers.txt","command":"cat numbers.txt"},"name":"bash"}\n</tool_call>',
  );
  const templated = renderAssistantText({
    toolCalls: [{ name: 'bash', arguments: { description: 'Print numbers.txt', command: 'cat numbers.txt' } }],
  });
  assert.notEqual(text, templated, 'the sampled text is not what the template re-renders');
  const out = parseAssistantOutput(text, { parseToolCalls: true });
  assert.equal(out.toolCalls[0]!.function.name, 'bash');
  assert.deepEqual(JSON.parse(out.toolCalls[0]!.function.arguments), { description: 'Print numbers.txt', command: 'cat numbers.txt' });
  const pretty = renderAssistantText({
    toolCalls: [{ name: 'bash', arguments: { command: 'ls' }, sampledAs: { spacing: 'pretty', key_order: 'given' } }],
  });
  assert.equal(pretty, '<tool_call>\n{\n  "name": "bash",\n  "arguments": {\n    "command": "ls"\n  }\n}\n</tool_call>');
  assert.equal(parseAssistantOutput(pretty, { parseToolCalls: true }).toolCalls[0]!.function.arguments, '{"command": "ls"}');
});
