// One embedded engine for a multi-task batch: each call goes to the policy of the task whose
// instruction the conversation carries, wherever the harness put it; a call naming no task gets the
// short fallback instead of another task's script.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import type { ChatMessage, ChatTool } from '../../src/capture/types.js';
import { TaskRoutedPolicy } from '../../src/sandbox/policy-engine.js';

const EXAMPLES = join(__dirname, '..', '..', 'examples', 'tasks');
const task = (name: string) => ({
  instruction: readFileSync(join(EXAMPLES, name, 'instruction.md'), 'utf8'),
  policyFile: join(EXAMPLES, name, 'policy.json'),
});
const tools: ChatTool[] = [
  {
    type: 'function',
    function: { name: 'exec_command', parameters: { type: 'object', properties: { cmd: { type: 'string' } }, required: ['cmd'] } },
  },
];

test('calls are routed by the instruction they carry', () => {
  const policy = new TaskRoutedPolicy([task('hello-file'), task('fix-script')]);
  const wrap = (name: string): ChatMessage[] => [
    { role: 'system', content: 'You are a coding agent.' },
    { role: 'user', content: `<environment_context>cwd=/app</environment_context>\n${task(name).instruction}` },
  ];
  const hello = policy.decide(wrap('hello-file'), tools);
  assert.equal(hello.kind, 'script');
  assert.deepEqual(hello.kind === 'script' && hello.toolCalls, [
    { name: 'exec_command', arguments: { cmd: "printf 'Hello, world!' > hello.txt" } },
  ]);
  const fix = policy.decide(wrap('fix-script'), tools);
  assert.deepEqual(fix.kind === 'script' && fix.toolCalls, [{ name: 'exec_command', arguments: { cmd: 'cat sum.sh' } }]);
  const title = policy.decide([{ role: 'user', content: 'Generate a title for this conversation.' }], undefined);
  assert.deepEqual(title, { kind: 'script', content: 'Done.', toolCalls: [] });
  assert.match(policy.source, /hello-file\/policy\.json, .*fix-script\/policy\.json/);
});
