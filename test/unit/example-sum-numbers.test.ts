// The sum-numbers example: its scripted policy, fed the tool results its own commands produce, makes
// three shell calls and then answers, and the verifier rewards what those commands leave behind.
// Catches drift between instruction.md, the policy's triggers, the environment and tests/test.sh.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { ChatMessage, ChatTool } from '../../src/capture/types.js';
import { ScriptedPolicy } from '../../src/engine/policy.js';
import { loadTask } from '../../src/tasks/task.js';

const TASK = join(__dirname, '..', '..', 'examples', 'tasks', 'sum-numbers');
const bash: ChatTool = {
  type: 'function',
  function: { name: 'bash', parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] } },
};

test('sum-numbers: three shell calls from the policy, then an answer, and the verifier gives reward 1', () => {
  const task = loadTask(TASK);
  assert.equal(task.environment.networkMode, 'no-network');
  const policy = ScriptedPolicy.load(join(TASK, 'policy.json'));
  const app = mkdtempSync(join(tmpdir(), 'hl-sum-'));
  cpSync(join(TASK, 'environment', 'numbers.txt'), join(app, 'numbers.txt'));
  const messages: ChatMessage[] = [{ role: 'user', content: readFileSync(join(TASK, 'instruction.md'), 'utf8') }];
  const commands: string[] = [];
  for (let turn = 0; turn < 6; turn++) {
    const decision = policy.decide(messages, [bash]);
    assert.equal(decision.kind, 'script');
    if (decision.kind !== 'script') break;
    if (!decision.toolCalls.length) break;
    const command = String(decision.toolCalls[0]!.arguments.command);
    commands.push(command);
    const output = execFileSync('bash', ['-c', command], { cwd: app, encoding: 'utf8' });
    messages.push({
      role: 'assistant',
      content: decision.content ?? null,
      tool_calls: [{ id: `c${turn}`, type: 'function', function: { name: 'bash', arguments: JSON.stringify({ command }) } }],
    });
    messages.push({ role: 'tool', tool_call_id: `c${turn}`, content: output });
  }
  assert.equal(commands.length, 3, commands.join('\n'));
  assert.doesNotMatch(commands.join('\n'), /\$\(|`/, "gemini-cli's shell tool refuses $(...) and backticks");
  const logs = mkdtempSync(join(tmpdir(), 'hl-sum-logs-'));
  execFileSync('bash', [join(TASK, 'tests', 'test.sh')], {
    env: { PATH: process.env.PATH, HARNESS_LAB_WORKDIR: app, HARNESS_LAB_LOGS: logs },
  });
  assert.equal(readFileSync(join(logs, 'verifier', 'reward.txt'), 'utf8').trim(), '1');
});

test('sum-numbers: a wrong sum gets reward 0', () => {
  const app = mkdtempSync(join(tmpdir(), 'hl-sum-'));
  cpSync(join(TASK, 'environment', 'numbers.txt'), join(app, 'numbers.txt'));
  execFileSync('bash', ['-c', 'echo 54 > sum.txt'], { cwd: app });
  const logs = mkdtempSync(join(tmpdir(), 'hl-sum-logs-'));
  execFileSync('bash', [join(TASK, 'tests', 'test.sh')], {
    env: { PATH: process.env.PATH, HARNESS_LAB_WORKDIR: app, HARNESS_LAB_LOGS: logs },
  });
  assert.equal(readFileSync(join(logs, 'verifier', 'reward.txt'), 'utf8').trim(), '0');
});
