import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HARNESS_REGISTRY, UnknownHarnessError, harnessEntry, harnessNames, launchPlan, type LaunchContext } from '../../src/harness/registry.js';
import { HARNESSES } from '../../src/harness/wiring.js';

const ctx: LaunchContext = {
  harnessesDir: '/opt/harness-lab/harnesses',
  binDir: '/opt/harness-lab/bin',
  home: '/tmp/harness-home',
  workdir: '/app',
  logsDir: '/logs',
  proxyUrl: 'http://127.0.0.1:4567',
  sessionKey: 'sKEY123',
  model: 'policy',
  instruction: "Create hello.txt with 'Hello, world!'",
};

function tmp(): string {
  return mkdtempSync(join(tmpdir(), 'hl-registry-'));
}
function write(path: string, lines: unknown[]): void {
  mkdirSync(join(path, '..'), { recursive: true });
  writeFileSync(path, lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l))).join('\n'));
}

test('the registry has the required harnesses, each with a dialect, an install and a native log', () => {
  for (const name of ['react', 'codex', 'claude-code', 'opencode', 'gemini-cli', 'qwen-code', 'pi']) assert.ok(HARNESS_REGISTRY.has(name), name);
  for (const e of HARNESS_REGISTRY.values()) {
    assert.ok(e.nativeLog.endsWith('.txt'));
    if (e.wiring) {
      assert.equal(e.install.kind, 'npm-cache');
      assert.equal(e.dialect, HARNESSES[e.wiring].dialect, `${e.name} dialect comes from the wiring table`);
      if (e.install.kind === 'npm-cache') assert.equal(e.install.version, HARNESSES[e.wiring].version);
    }
  }
  assert.equal(harnessEntry('pi').wiring, 'pi-openai-completions');
});

test('an unknown harness is an error that lists the known ones', () => {
  assert.throws(() => harnessEntry('cursor-cli'), (err: unknown) => err instanceof UnknownHarnessError && err.message.includes('cursor-cli') && harnessNames().every((n) => err.message.includes(n)));
  assert.throws(() => harnessEntry('pi-anthropic'), /wiring-table variant/);
});

test('every npm harness launches its pinned binary from the mounted cache, keyed by the session id', () => {
  for (const e of HARNESS_REGISTRY.values()) {
    if (e.install.kind !== 'npm-cache') continue;
    const plan = launchPlan(e, ctx);
    assert.ok(plan.script.startsWith(`/opt/harness-lab/harnesses/${e.install.package}@${e.install.version}/node_modules/.bin/${e.install.bin} `), plan.script);
    assert.match(plan.script, /< \/dev\/null\nstatus=\$\?\n/);
    assert.ok(plan.script.endsWith('exit $status'));
    const carried = JSON.stringify(plan.env) + JSON.stringify(plan.files);
    assert.ok(carried.includes('sKEY123'), `${e.name} carries the session id as its key`);
    assert.ok(carried.includes('http://127.0.0.1:4567'), `${e.name} points at the proxy`);
    // One single-quoted argument (`'...'` or `'--prompt=...'`), the inner quotes escaped for bash.
    assert.match(plan.script, / '(--prompt=)?Create hello\.txt with '\\''Hello, world!'\\'''/, `${e.name} passes the instruction as one quoted argument`);
    for (const f of plan.files) assert.ok(f.path.startsWith('/tmp/harness-home/'), f.path);
  }
});

test('argument tweaks for machine-readable native logs stay before the -- separator', () => {
  const claude = launchPlan(harnessEntry('claude-code'), ctx).script;
  assert.match(claude, /--output-format stream-json .*--verbose -- /);
  assert.doesNotMatch(claude, /--output-format json/);
  assert.match(launchPlan(harnessEntry('codex'), ctx).script, /exec .*--json -- /);
  assert.match(launchPlan(harnessEntry('opencode'), ctx).script, /--format json -- /);
  assert.match(launchPlan(harnessEntry('pi'), ctx).script, /\/pi --session-dir \/logs\/agent\/native\/pi-sessions /);
  assert.match(launchPlan(harnessEntry('codex'), ctx).script, /cp -r \/tmp\/harness-home\/.codex\/sessions \/logs\/agent\/native\//);
});

test('the reference harness runs the bundled script with node and writes ATIF to /logs/agent', () => {
  const plan = launchPlan(harnessEntry('react'), ctx);
  assert.equal(plan.script, "exec node /opt/harness-lab/bin/react-harness.js 'Create hello.txt with '\\''Hello, world!'\\''' < /dev/null");
  assert.deepEqual(plan.env, { HARNESS_LAB_BASE_URL: 'http://127.0.0.1:4567/v1', HARNESS_LAB_API_KEY: 'sKEY123', HARNESS_LAB_MODEL: 'policy', HARNESS_LAB_ATIF: '/logs/agent/trajectory.json' });
});

test('claude-code ATIF: transcripts (final usage) win over stream-json (usage at message start)', () => {
  const dir = tmp();
  const msg = (id: string, out: number, content: unknown[]) => ({ type: 'assistant', session_id: 'S', message: { id, model: 'policy', content, usage: { input_tokens: 100, output_tokens: out, cache_read_input_tokens: 5 } } });
  write(join(dir, 'claude-code.txt'), [{ type: 'system', subtype: 'init' }, msg('m1', 0, [{ type: 'tool_use', id: 't1', name: 'Bash', input: { command: 'ls' } }]), msg('m2', 0, [{ type: 'text', text: 'done' }])]);
  const fromStream = harnessEntry('claude-code').toAtif(dir)!;
  assert.deepEqual(fromStream.steps.map((s) => s.metrics?.completion_tokens), [0, 0]);
  write(join(dir, 'native', 'projects', '-app', 'S.jsonl'), [msg('m1', 81, [{ type: 'tool_use', id: 't1', name: 'Bash', input: { command: 'ls' } }]), { type: 'user' }, msg('m2', 48, [{ type: 'text', text: 'done' }]), { model: '<synthetic>' }]);
  const t = harnessEntry('claude-code').toAtif(dir)!;
  assert.deepEqual(t.steps.map((s) => s.metrics?.completion_tokens), [81, 48]);
  assert.equal(t.steps[0]!.metrics?.prompt_tokens, 105);
  assert.equal(t.steps[0]!.tool_calls?.[0]?.function_name, 'Bash');
  assert.equal(t.session_id, 'S');
});

test('opencode ATIF: one step per step_finish, reasoning counted as completion', () => {
  const dir = tmp();
  write(join(dir, 'opencode.txt'), [
    'INFO starting',
    { type: 'tool_use', sessionID: 'ses1', part: { tool: 'bash', callID: 'c1', state: { input: { command: 'ls' } } } },
    { type: 'step_finish', part: { tokens: { input: 30529, output: 81, reasoning: 2, cache: { read: 0 } } } },
    { type: 'text', part: { text: 'done' } },
    { type: 'step_finish', part: { tokens: { input: 30674, output: 48, reasoning: 0, cache: { read: 10 } } } },
  ]);
  const t = harnessEntry('opencode').toAtif(dir)!;
  assert.deepEqual(t.steps.map((s) => s.metrics?.completion_tokens), [83, 48]);
  assert.equal(t.steps[1]!.message, 'done');
  assert.equal(t.steps[1]!.metrics?.prompt_tokens, 30684);
});

test('codex ATIF: token_count events after each call; a repeated total is not a new call', () => {
  const dir = tmp();
  const tc = (total: number, last: number) => ({ type: 'event_msg', payload: { type: 'token_count', info: { total_token_usage: { output_tokens: total }, last_token_usage: { input_tokens: 1000, cached_input_tokens: 0, output_tokens: last } } } });
  write(join(dir, 'native', 'sessions', '2026', '11', '30', 'rollout-x.jsonl'), [
    { type: 'session_meta', payload: { id: 'thread-1' } },
    { type: 'response_item', payload: { type: 'function_call', call_id: 'call_1', name: 'exec_command', arguments: '{"cmd":"ls"}' } },
    tc(85, 85),
    tc(85, 85),
    { type: 'response_item', payload: { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'done' }] } },
    tc(133, 48),
  ]);
  const t = harnessEntry('codex').toAtif(dir)!;
  assert.deepEqual(t.steps.map((s) => s.metrics?.completion_tokens), [85, 48]);
  assert.deepEqual(t.steps[0]!.tool_calls, [{ tool_call_id: 'call_1', function_name: 'exec_command', arguments: { cmd: 'ls' } }]);
  assert.equal(t.session_id, 'thread-1');
});

test('gemini-cli ATIF: the chat recording re-appends a changed message; the last record of an id counts once', () => {
  const dir = tmp();
  const g = (id: string, out: number, extra: object = {}) => ({ id, type: 'gemini', content: '', tokens: { input: 48242, output: out, thoughts: 0 }, model: 'policy', ...extra });
  write(join(dir, 'native', 'tmp', 'app', 'chats', 'session-1.jsonl'), [{ sessionId: 'gs' }, { id: 'u', type: 'user' }, g('a', 94), { $set: {} }, g('a', 94, { toolCalls: [{ id: 'run_1', name: 'run_shell_command', args: { command: 'ls' } }] }), g('b', 48)]);
  const t = harnessEntry('gemini-cli').toAtif(dir)!;
  assert.deepEqual(t.steps.map((s) => s.metrics?.completion_tokens), [94, 48]);
  assert.equal(t.steps[0]!.tool_calls?.[0]?.function_name, 'run_shell_command');
  assert.equal(t.session_id, 'gs');
});

test('no native log gives no trajectory rather than an empty one', () => {
  const dir = tmp();
  for (const e of HARNESS_REGISTRY.values()) assert.equal(e.toAtif(dir), undefined, e.name);
});

test('qwen-code ATIF: assistant records of the chat recording, with usageMetadata', () => {
  const dir = tmp();
  const a = (out: number, parts: unknown[]) => ({ type: 'assistant', sessionId: 'q', model: 'policy', message: { role: 'model', parts }, usageMetadata: { promptTokenCount: 63668, candidatesTokenCount: out, thoughtsTokenCount: 0 } });
  write(join(dir, 'native', 'projects', '-app', 'chats', 'q.jsonl'), [{ type: 'user' }, { type: 'system', subtype: 'ui_telemetry' }, a(94, [{ functionCall: { id: 'c1', name: 'run_shell_command', args: { command: 'ls' } } }]), { type: 'tool_result' }, a(48, [{ text: 'done' }])]);
  const t = harnessEntry('qwen-code').toAtif(dir)!;
  assert.deepEqual(t.steps.map((s) => s.metrics?.completion_tokens), [94, 48]);
  assert.equal(t.steps[0]!.tool_calls?.[0]?.tool_call_id, 'c1');
  assert.equal(t.steps[1]!.message, 'done');
});
