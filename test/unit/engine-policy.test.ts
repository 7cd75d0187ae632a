import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ChatMessage, ChatTool } from '../../src/capture/types.js';
import { listShippedPolicies, ScriptedPolicy } from '../../src/engine/policy.js';

const tool = (name: string, param = 'command'): ChatTool => ({
  type: 'function',
  function: {
    name,
    parameters: { type: 'object', properties: { [param]: { type: 'string' }, timeout: { type: 'number' } }, required: [param] },
  },
});
const user: ChatMessage = { role: 'user', content: 'count the lines' };
const assistant: ChatMessage = {
  role: 'assistant',
  content: null,
  tool_calls: [{ id: 'c', type: 'function', function: { name: 'x', arguments: '{}' } }],
};
const toolResult: ChatMessage = { role: 'tool', tool_call_id: 'c', content: '3 notes.txt' };

test('turns are indexed by the number of assistant messages so far', () => {
  const p = ScriptedPolicy.parse({ turns: [{ call: { tool: 'bash|shell', input: 'ls' } }, { say: 'two' }] }, 'inline');
  assert.deepEqual(p.decide([user], [tool('bash')]), {
    kind: 'script',
    reasoning: undefined,
    content: undefined,
    toolCalls: [{ name: 'bash', arguments: { command: 'ls' } }],
  });
  assert.deepEqual(p.decide([user, assistant, toolResult], [tool('bash')]), {
    kind: 'script',
    reasoning: undefined,
    content: 'two',
    toolCalls: [],
  });
  assert.deepEqual(
    p.decide([user, assistant, toolResult, assistant, toolResult], [tool('bash')]),
    { kind: 'sample' },
    'past the script: the model samples',
  );
});

test('rules match the last message, offered tools and task; input goes to the first required string parameter', () => {
  const p = ScriptedPolicy.load('shell-then-answer');
  const first = p.decide([user], [tool('read_file', 'path'), tool('exec_command', 'cmd')]);
  assert.deepEqual(first, {
    kind: 'script',
    reasoning: undefined,
    content: undefined,
    toolCalls: [{ name: 'exec_command', arguments: { cmd: 'ls -la' } }],
  });
  assert.equal(
    (p.decide([user, assistant, toolResult], [tool('bash')]) as { content: string }).content,
    'I listed the working directory; the files are shown above.',
  );
  assert.match((p.decide([user], []) as { content: string }).content, /no tools/);
});

test('an action whose tool is not offered falls through to the next candidate', () => {
  const p = ScriptedPolicy.parse(
    { rules: [{ when: {}, then: { call: { tool: '^bash$', arguments: { command: 'ls' } } } }], fallback: { say: 'no shell here' } },
    'inline',
  );
  assert.equal((p.decide([user], [tool('python')]) as { content: string }).content, 'no shell here');
  const task = ScriptedPolicy.parse({ rules: [{ when: { task: 'lines' }, then: { say: 'task matched' } }] }, 'inline');
  assert.equal((task.decide([user], undefined) as { content: string }).content, 'task matched');
  assert.deepEqual(task.decide([{ role: 'user', content: 'other' }], undefined), { kind: 'sample' });
});

test('bad policies fail with the field named', () => {
  assert.throws(
    () => ScriptedPolicy.parse({ turns: [{ call: { tool: '(', input: 'x' } }] }, 'p.json'),
    /invalid policy p\.json: turns\.0.*regular expression/,
  );
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

test('"also" adds only the keys the offered tool declares; "sampled_as" travels with the call', () => {
  const p = ScriptedPolicy.parse(
    {
      turns: [
        {
          call: {
            tool: 'bash',
            input: 'ls',
            also: { timeout: 5, description: 'list' },
            sampled_as: { spacing: 'compact', key_order: 'reversed' },
          },
        },
      ],
    },
    'inline',
  );
  const d = p.decide([user], [tool('bash')]);
  assert.deepEqual(d, {
    kind: 'script',
    reasoning: undefined,
    content: undefined,
    toolCalls: [{ name: 'bash', arguments: { command: 'ls', timeout: 5 }, sampledAs: { spacing: 'compact', key_order: 'reversed' } }],
  });
  assert.throws(
    () => ScriptedPolicy.parse({ turns: [{ call: { tool: 'bash', input: 'x', sampled_as: { spacing: 'tabs' } } }] }, 'p.json'),
    /invalid policy p\.json: turns\.0/,
  );
});

test('the thinking policy reasons before every action of the sum-numbers loop; the raw-args one writes calls its own way', () => {
  const thinking = ScriptedPolicy.load('sum-numbers-thinking');
  const raw = ScriptedPolicy.load('sum-numbers-raw-args');
  const task: ChatMessage = { role: 'user', content: 'Read `numbers.txt` ... write their sum to a new file `sum.txt` (just the number)' };
  const result = (text: string): ChatMessage => ({ role: 'tool', tool_call_id: 'c', content: text });
  const steps = [
    [task],
    [task, assistant, result('# numbers-v1\n5')],
    [task, assistant, result('WROTE_SUM')],
    [task, assistant, result('50')],
  ];
  for (const [i, messages] of steps.entries()) {
    const t = thinking.decide(messages, [tool('bash')]);
    assert.ok(t.kind === 'script' && t.reasoning && t.reasoning.length > 20, `turn ${i} reasons`);
    assert.equal(t.toolCalls.length, i < 3 ? 1 : 0, `turn ${i}: a call on the three tool turns, the answer after`);
    const r = raw.decide(messages, [tool('bash'), { type: 'function', function: { name: 'x', parameters: {} } }]);
    assert.ok(r.kind === 'script');
    if (i < 3) assert.deepEqual(r.toolCalls[0]!.sampledAs, { spacing: 'compact', key_order: 'reversed' });
  }
});
