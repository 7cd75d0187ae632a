// Real harness CLIs from npm (installed by scripts/harness-install.sh) run as local processes against
// the capture proxy, with the fake engine scripted to call the harness's shell tool once and then
// answer. Each must finish cleanly, really run the tool, and leave token-carrying captured calls.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { CallRecord, ChatRequest, ChatTool, JsonObject } from '../../src/capture/types.js';
import type { FakeAnswer } from '../../src/engine/fake-engine.js';
import { RolloutGraph } from '../../src/capture/graph.js';
import { resolveHarnessBin, runHarnessLocal, type RunLocalResult } from '../../src/harness/run-local.js';
import { capturedTerminalEnv, harnessConfigFiles } from '../../src/extension/terminal-env.js';
import { HARNESSES, HARNESS_NAMES, wireHarness, type HarnessName } from '../../src/harness/wiring.js';
import { createSession, startLab, type Lab } from './helpers.js';

// Generous for a loaded 2-core machine (opencode alone took 60 s there); a healthy run takes seconds.
const HARNESS_TIMEOUT_MS = 120_000;
const MODEL = 'test-model';
const FINAL_TEXT = 'PROOF_DONE: the proof file is written.';
const INSTRUCTION = 'Use your shell tool to write the proof file, then say you are done.';
const SHELL_TOOL = /bash|shell|exec|run_shell_command|command/i;
// What a harness prints when it chokes on the proxy's answer or the proxy rejects its request.
const PROTOCOL_ERROR =
  /protocol error|invalid_request_error|unexpected (event|token|end of)|failed to parse|ZodError|stream (disconnected|error)|API Error|status code [45]\d\d|\b(400|401|404|422|500|502) (Bad Request|Unauthorized|Not Found)/i;

/** The proof the current run's tool call writes (harnesses run one at a time). */
let proof = '';
/** `rich`: the tool-calling answer also has text and a second, parallel shell call (what real models do). */
let rich = false;
/** `thinking`: every answer carries reasoning, as a thinking model's does. */
let thinking = false;

function shellTool(tools: ChatTool[] | undefined): ChatTool | undefined {
  return tools?.find((t) => SHELL_TOOL.test(t.function.name) && !/stdin|background|output/i.test(t.function.name));
}

/** Arguments for the harness's own shell-tool schema: argv array, `cmd` or `command`, plus required extras. */
function shellArguments(tool: ChatTool, command: string): JsonObject {
  const schema = (tool.function.parameters ?? {}) as { properties?: Record<string, { type?: unknown }>; required?: string[] };
  const props = schema.properties ?? {};
  const args: JsonObject = {};
  if (props.command?.type === 'array') args.command = ['bash', '-lc', command];
  else if ('cmd' in props && !('command' in props)) args.cmd = command;
  else args.command = command;
  for (const key of schema.required ?? []) {
    if (key in args) continue;
    const type = props[key]?.type;
    args[key] = type === 'boolean' ? false : type === 'number' || type === 'integer' ? 60 : 'write the proof file';
  }
  return args;
}

/** A value matching a JSON schema, for structured side calls (e.g. gemini-cli's next-speaker check). */
function valueFor(schema: unknown): unknown {
  const s = (schema ?? {}) as { type?: string; enum?: unknown[]; properties?: Record<string, unknown>; items?: unknown };
  if (Array.isArray(s.enum)) return s.enum.includes('user') ? 'user' : s.enum[0];
  switch (String(s.type).toLowerCase()) {
    case 'object':
      return Object.fromEntries(Object.entries(s.properties ?? {}).map(([k, v]) => [k, valueFor(v)]));
    case 'array':
      return [];
    case 'integer':
    case 'number':
      return 1;
    case 'boolean':
      return false;
    default:
      return 'done';
  }
}

function script(request: ChatRequest): FakeAnswer {
  const answer = scriptedAnswer(request);
  return thinking && !answer.content?.startsWith('{')
    ? { ...answer, reasoning: 'The user wants the proof file; the shell tool writes it.' }
    : answer;
}

function scriptedAnswer(request: ChatRequest): FakeAnswer {
  const format = request.response_format as { type?: string; json_schema?: { schema?: unknown } } | undefined;
  if (format?.type === 'json_schema') return { content: JSON.stringify(valueFor(format.json_schema?.schema)) };
  if (format?.type === 'json_object') return { content: '{}' };
  const tool = shellTool(request.tools);
  // "Turn 0" is "no tool result yet": qwen-code opens with a canned assistant message.
  const toolRan = request.messages.some((m) => m.role === 'tool');
  // The output is echoed too, so the tool result carried back to the engine can be checked.
  if (tool && !toolRan) {
    const call = (command: string) => ({ name: tool.function.name, arguments: shellArguments(tool, command) });
    if (!rich) return { tool_calls: [call(`echo ${proof} > proof.txt && cat proof.txt`)] };
    return {
      content: 'Writing the proof files.',
      tool_calls: [call(`echo ${proof} > proof.txt && cat proof.txt`), call(`echo ${proof}-2 > proof2.txt`)],
    };
  }
  return { content: tool || request.tools?.length ? FINAL_TEXT : 'Harness proof run' };
}

function tail(text: string, n = 3000): string {
  return text.length > n ? `...${text.slice(-n)}` : text;
}

function diagnose(result: RunLocalResult, calls: CallRecord[]): string {
  const summary = calls
    .map(
      (c) =>
        `  #${c.index} ${c.path} tools=${c.n_tools} finish=${c.finish_reason ?? '-'} ${c.error ? `ERROR ${c.error.status} ${c.error.message}` : 'ok'}`,
    )
    .join('\n');
  return `exit=${result.exitCode} signal=${result.signal} timedOut=${result.timedOut} ${result.durationMs}ms\ncalls:\n${summary}\nstdout:\n${tail(result.stdout)}\nstderr:\n${tail(result.stderr)}`;
}

const roots: string[] = [];

/** Runs one harness against a lab's proxy and checks the whole round trip; returns a summary line. */
async function runAndCheck(
  lab: Lab,
  name: HarnessName,
  richAnswer = false,
  onCalls?: (calls: CallRecord[], why: string) => void,
): Promise<string> {
  const spec = HARNESSES[name];
  // Not installed is a failure, not a skip: the wiring is only proven by running the real CLI.
  resolveHarnessBin(name);
  const root = mkdtempSync(join(tmpdir(), `hl-harness-${name}-`));
  roots.push(root);
  const home = join(root, 'home');
  const workdir = join(root, 'work');
  mkdirSync(home, { recursive: true });
  mkdirSync(workdir, { recursive: true });
  const { session_id } = await createSession(lab.proxy, { metadata: { harness: name } });
  proof = `hl-proof-${name}`;
  rich = richAnswer;
  const wired = wireHarness(name, {
    proxyUrl: lab.proxy.url,
    sessionKey: session_id,
    model: MODEL,
    home,
    workdir,
    instruction: INSTRUCTION,
  });

  const result = await runHarnessLocal(wired, { home, cwd: workdir, timeoutMs: HARNESS_TIMEOUT_MS });
  const calls = lab.proxy.sessions.calls(session_id);
  const why = diagnose(result, calls);

  assert.equal(result.timedOut, false, `timed out after ${HARNESS_TIMEOUT_MS} ms\n${why}`);
  assert.equal(result.exitCode, spec.successExit, `unexpected exit\n${why}`);
  assert.doesNotMatch(`${result.stdout}\n${result.stderr}`, PROTOCOL_ERROR, `protocol error in the harness output\n${why}`);
  assert.deepEqual(
    calls.filter((c) => c.error).map((c) => c.error),
    [],
    `calls the proxy failed\n${why}`,
  );
  assert.ok(`${result.stdout}\n${result.stderr}`.includes(FINAL_TEXT.slice(0, 10)), `the final answer is not in the output\n${why}`);

  let written = '';
  try {
    written = readFileSync(join(workdir, 'proof.txt'), 'utf8');
  } catch {
    assert.fail(`the shell tool did not write ${join(workdir, 'proof.txt')}\n${why}`);
  }
  assert.equal(written.trim(), proof, 'the tool call ran the scripted command');
  if (richAnswer) {
    const second = join(workdir, 'proof2.txt');
    assert.equal(
      existsSync(second) ? readFileSync(second, 'utf8').trim() : '(missing)',
      `${proof}-2`,
      `the second parallel call ran its own command\n${why}`,
    );
  }

  assert.ok(
    calls.every((c) => c.dialect === spec.dialect),
    `dialects ${[...new Set(calls.map((c) => c.dialect))].join(',')}, expected ${spec.dialect}\n${why}`,
  );
  const withTokens = calls.filter((c) => c.prompt_token_ids?.length && c.completion_token_ids?.length);
  assert.ok(withTokens.length >= 2, `only ${withTokens.length} call(s) carry prompt and completion token ids\n${why}`);
  const toolCall = calls.find((c) => c.finish_reason === 'tool_calls');
  assert.ok(toolCall, `no captured call ended in a tool call\n${why}`);
  const roundTrip = calls.find((c) => c.index > toolCall.index && c.engine_request?.messages.some((m) => m.role === 'tool'));
  assert.ok(roundTrip, `no later call carried the tool result back\n${why}`);
  const toolResult = roundTrip
    .engine_request!.messages.filter((m) => m.role === 'tool')
    .map((m) => JSON.stringify(m.content))
    .join('\n');
  assert.ok(
    toolResult.includes(proof),
    `the tool result sent back does not hold the command's output: ${toolResult.slice(0, 500)}\n${why}`,
  );
  // Gemini ids are optional and pi drops them on replay: what reaches the engine carries the ids the
  // proxy answered with (restored from the session when the harness left them out).
  if (spec.dialect === 'google_gemini') {
    const answered = (toolCall.engine_response?.choices?.[0]?.message?.tool_calls ?? []).map((c) => c.id);
    const replayed = roundTrip.engine_request!.messages.filter((m) => m.role === 'tool').map((m) => m.tool_call_id);
    assert.deepEqual(replayed.slice(-answered.length), answered, `tool results carry the answered call ids\n${why}`);
  }
  // The rollout graph links calls by exact token prefix: the follow-up must extend the tool call.
  const expected = [...toolCall.prompt_token_ids!, ...toolCall.completion_token_ids!];
  if (onCalls) onCalls(calls, why);
  else
    assert.deepEqual(
      roundTrip.prompt_token_ids!.slice(0, expected.length),
      expected,
      `the follow-up prompt does not extend the tool call token for token\n${why}`,
    );
  return `${name}: exit ${result.exitCode} in ${result.durationMs} ms, ${calls.length} call(s) captured, ${withTokens.length} with token ids`;
}

after(() => {
  for (const root of roots) rmSync(root, { recursive: true, force: true });
});

describe('real harness CLIs against the capture proxy', () => {
  let lab: Lab;
  before(async () => {
    lab = await startLab({ script });
  });
  after(() => lab.close());

  for (const name of HARNESS_NAMES) {
    const spec = HARNESSES[name];
    test(
      `${name} (${spec.package}@${spec.version}, ${spec.dialect}): tool round trip, captured with token ids`,
      { timeout: HARNESS_TIMEOUT_MS + 20_000 },
      async () => {
        console.log(`# ${await runAndCheck(lab, name)}`);
      },
    );
  }
});

// Closer to a real engine: slower than the keepalive grace (the stream is committed and keepalives
// come before the answer), and an answer with text plus two parallel tool calls. One harness per
// dialect parser; gemini-cli's reader once choked on SSE comment keepalives, and pi's Responses
// reader ran the first of two parallel calls twice; plus the four newer CLIs, each with its own client.
describe('real harness CLIs against a slow engine with richer answers', () => {
  let lab: Lab;
  before(async () => {
    lab = await startLab({ script, thinkMs: 400 }, { keepaliveGraceMs: 50, keepaliveIntervalMs: 100 });
  });
  after(() => lab.close());

  for (const name of [
    'codex',
    'claude-code',
    'gemini-cli',
    'pi-openai-completions',
    'pi-openai-responses',
    'openclaw',
    'kilo',
    'continue',
    'copilot',
  ] as const) {
    test(
      `${name} (${HARNESSES[name].dialect}): keepalives, text and two parallel tool calls`,
      { timeout: HARNESS_TIMEOUT_MS + 20_000 },
      async () => {
        console.log(`# slow engine, rich answer, ${await runAndCheck(lab, name, true)}`);
      },
    );
  }
});

// A thinking model: gemini-cli does not send the reasoning back, so the follow-up does not extend the
// tool call token for token; the graph links it as a continuation with a finding instead of a new root.
describe('real harness CLIs against a thinking model', () => {
  let lab: Lab;
  before(async () => {
    lab = await startLab({ script });
    thinking = true;
  });
  after(async () => {
    thinking = false;
    await lab.close();
  });

  test(
    'gemini-cli (google_gemini): reasoning not sent back, the turn after the tool call continues it',
    { timeout: HARNESS_TIMEOUT_MS + 20_000 },
    async () => {
      const summary = await runAndCheck(lab, 'gemini-cli', false, (calls, why) => {
        const graph = RolloutGraph.fromRecords(calls);
        const toolCall = graph.nodes().find((n) => n.record.finish_reason === 'tool_calls')!;
        assert.ok(toolCall.response_message?.reasoning, `the tool-call answer had reasoning\n${why}`);
        const next = graph.nodes().find((n) => n.index > toolCall.index && n.request_messages.some((m) => m.role === 'tool'))!;
        assert.equal(next.parent?.node_id, toolCall.node_id, `linked to the tool call, not a new root\n${why}`);
        assert.ok(
          next.findings.some((f) => f.startsWith('[WARN] reasoning_stripped:')),
          `${next.findings.join('\n')}\n${why}`,
        );
      });
      console.log(`# thinking model, ${summary}`);
    },
  );
});

// The extension's captured terminal: only its environment (and the config files it writes for the
// harnesses that read the proxy from a file) plus the command a user would type.
describe("real harness CLIs in the extension's captured-terminal environment", () => {
  let lab: Lab;
  before(async () => {
    lab = await startLab({ script });
  });
  after(() => lab.close());

  const typed: Partial<Record<HarnessName, (instruction: string) => string[]>> = {
    copilot: (i) => ['copilot', '--allow-all-tools', `--prompt=${i}`],
    kilo: (i) => ['kilo', 'run', '--model', `harnesslab/${MODEL}`, '--auto', '--', i],
    continue: (i) => ['cn', '-p', '--auto', '--', i],
    openclaw: (i) => ['openclaw', 'agent', 'exec', '--cwd', '.', '--', i],
  };
  for (const [name, argv] of Object.entries(typed) as [HarnessName, (i: string) => string[]][]) {
    test(`${name}: the terminal env alone reaches the session, and the tool runs`, { timeout: HARNESS_TIMEOUT_MS + 20_000 }, async () => {
      resolveHarnessBin(name);
      const root = mkdtempSync(join(tmpdir(), `hl-terminal-${name}-`));
      roots.push(root);
      const home = join(root, 'home');
      const workdir = join(root, 'work');
      const configDir = join(root, 'harness-config');
      mkdirSync(home, { recursive: true });
      const { session_id } = await createSession(lab.proxy, { metadata: { source: 'terminal' } });
      proof = `hl-proof-terminal-${name}`;
      rich = false;
      const target = { proxyUrl: lab.proxy.url, sessionKey: session_id, model: MODEL, configDir };
      const files = harnessConfigFiles(target).map((f) => ({ path: join(configDir, f.path), content: f.content }));
      const wired = { name, dialect: HARNESSES[name].dialect, argv: argv(INSTRUCTION), env: capturedTerminalEnv(target), files };
      const result = await runHarnessLocal(wired, { home, cwd: workdir, timeoutMs: HARNESS_TIMEOUT_MS });
      const calls = lab.proxy.sessions.calls(session_id);
      const why = diagnose(result, calls);
      assert.equal(result.exitCode, 0, why);
      assert.ok(calls.length >= 2 && calls.every((c) => !c.error && c.prompt_token_ids?.length), why);
      assert.equal(readFileSync(join(workdir, 'proof.txt'), 'utf8').trim(), proof, why);
    });
  }
});
