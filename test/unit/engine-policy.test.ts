import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ChatMessage, ChatTool } from '../../src/capture/types.js';
import { listShippedPolicies, ScriptedPolicy } from '../../src/engine/policy.js';

const tool = (name: string, param = 'command'): ChatTool => ({
  type: 'function',
  function: { name, parameters: { type: 'object', properties: { [param]: { type: 'string' }, timeout: { type: 'number' } }, required: [param] } },
});
const user: ChatMessage = { role: 'user', content: 'count the lines' };
const assistant: ChatMessage = { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'x', arguments: '{}' } }] };
const toolResult: ChatMessage = { role: 'tool', tool_call_id: 'c', content: '3 notes.txt' };

test('turns are indexed by the number of assistant messages so far', () => {
  const p = ScriptedPolicy.parse({ turns: [{ call: { tool: 'bash|shell', input: 'ls' } }, { say: 'two' }] }, 'inline');
  assert.deepEqual(p.decide([user], [tool('bash')]), { kind: 'script', reasoning: undefined, content: undefined, toolCalls: [{ name: 'bash', arguments: { command: 'ls' } }] });
  assert.deepEqual(p.decide([user, assistant, toolResult], [tool('bash')]), { kind: 'script', reasoning: undefined, content: 'two', toolCalls: [] });
  assert.deepEqual(p.decide([user, assistant, toolResult, assistant, toolResult], [tool('bash')]), { kind: 'sample' }, 'past the script: the model samples');
});

test('rules match the last message, offered tools and task; input goes to the first required string parameter', () => {
  const p = ScriptedPolicy.load('shell-then-answer');
  const first = p.decide([user], [tool('read_file', 'path'), tool('exec_command', 'cmd')]);
  assert.deepEqual(first, { kind: 'script', reasoning: undefined, content: undefined, toolCalls: [{ name: 'exec_command', arguments: { cmd: 'ls -la' } }] });
  assert.equal((p.decide([user, assistant, toolResult], [tool('bash')]) as { content: string }).content, 'I listed the working directory; the files are shown above.');
  assert.match((p.decide([user], []) as { content: string }).content, /no tools/);
});

test('an action whose tool is not offered falls through to the next candidate', () => {
  const p = ScriptedPolicy.parse({ rules: [{ when: {}, then: { call: { tool: '^bash$', arguments: { command: 'ls' } } } }], fallback: { say: 'no shell here' } }, 'inline');
  assert.equal((p.decide([user], [tool('python')]) as { content: string }).content, 'no shell here');
  const task = ScriptedPolicy.parse({ rules: [{ when: { task: 'lines' }, then: { say: 'task matched' } }] }, 'inline');
  assert.equal((task.decide([user], undefined) as { content: string }).content, 'task matched');
  assert.deepEqual(task.decide([{ role: 'user', content: 'other' }], undefined), { kind: 'sample' });
});

test('bad policies fail with the field named', () => {
  assert.throws(() => ScriptedPolicy.parse({ turns: [{ call: { tool: '(' , input: 'x' } }] }, 'p.json'), /invalid policy p\.json: turns\.0.*regular expression/);
  assert.throws(() => ScriptedPolicy.parse({ turns: [{ think: 'only thinking' }] }, 'p.json'), /needs "say" and\/or "call"/);
  assert.throws(() => ScriptedPolicy.parse({ turns: [{ call: { tool: 'bash', input: 'x', arguments: {} } }] }, 'p.json'), /exactly one of/);
  assert.throws(() => ScriptedPolicy.parse({ rules: [], extra: 1 }, 'p.json'), /invalid policy/);
  assert.throws(() => ScriptedPolicy.load('no-such-policy'), /neither a file nor a shipped policy \(.*hello-world/);
});

test('every shipped policy parses', () => {
  const names = listShippedPolicies();
  assert.ok(names.includes('hello-world') && names.includes('two-tool-calls'));
  for (const name of names) ScriptedPolicy.load(name);
});
