// `prompt-cost`: the capture proxy's CPU per call at the prompt sizes real harnesses send, against the
// least any capture must do with the same answer: JSON.parse and JSON.stringify of the engine's
// answer with its prompt ids (issue 16, part 2).
//
// For each size (1k, 8k and 32k prompt tokens by default) a real proxy process (dist/cli.js, durable
// store) records agent-style sessions against the fake engine (think time 0): a system prompt of
// that many tokens, then tool calls, tool results and user follow-ups, so each call extends the
// last, as a harness resends its history. The proxy's CPU time (all threads, /proc) over the
// measured calls, divided by the calls, is compared with the floor: the same engine answers (the
// bench sends each call's engine request to the engine directly too) parsed and stringified in
// this process, timed with process.cpuUsage over repetitions. Also reported: bytes the store wrote
// per call (session files; the journal is a transient copy, checkpointed away).
//
//   node --import tsx bench/prompt-cost.ts [--quick] [--sizes 1000,8000,32000] [--calls 300,120,60] [--profile]
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { cpuMs, startNode, stopChild, threadCpuMs, type Started } from './processes.js';

const ROOT = join(__dirname, '..');

export const PROMPT_COST_TARGET = { maxFloorRatio: 3 } as const;

/** Turns per session: after this many the next session starts again from the system prompt, so prompts stay near the size. */
const TURNS_PER_SESSION = 4;
/** Bytes of each tool result; with the system prompt sized to leave room for them, prompts average about the target size. */
const TOOL_OUTPUT_BYTES = 120;

/** The fields the proxy adds at capture level `tokens` (as bench/load-generator.ts sends on its direct path). */
const CAPTURE_FIELDS = {
  stream: false,
  max_tokens: 8192,
  logprobs: true,
  top_logprobs: 0,
  top_p: 1,
  top_k: -1,
  min_p: 0,
  frequency_penalty: 0,
  presence_penalty: 0,
  repetition_penalty: 1,
  return_token_ids: true,
  return_tokens_as_token_ids: true,
};

const BASH_TOOL = {
  type: 'function',
  function: {
    name: 'bash',
    description: 'Run a shell command in the task container and return its output.',
    parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
  },
};

interface Message {
  role: string;
  content: string | null;
  tool_calls?: { id: string; type: 'function'; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

export interface PromptCostRow {
  prompt_tokens_target: number;
  calls: number;
  prompt_tokens_mean: number;
  proxy_cpu_ms_per_call: number;
  /** The proxy's CPU per call by thread name (main: the event loop). */
  proxy_cpu_ms_per_call_by_thread: Record<string, number>;
  /** The bare pass-through's CPU per call on the same engine requests: what any HTTP hop costs. */
  passthrough_cpu_ms_per_call: number;
  floor_ms_per_call: number;
  ratio: number;
  /** The proxy's CPU per POST /sessions, registered before the calls (not in the CPU per call). */
  registration_cpu_ms_per_session: number;
  engine_answer_bytes_mean: number;
  stored_bytes_per_call: number;
  pass: boolean;
}

function filler(label: string, bytes: number): string {
  const sentence = `${label}: the agent reads files, runs commands and edits code until the tests pass. `;
  return sentence.repeat(Math.ceil(bytes / sentence.length)).slice(0, bytes);
}

async function post(url: string, body: unknown, key?: string): Promise<{ status: number; text: string }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify(body),
  });
  return { status: res.status, text: await res.text() };
}

function sessionBytes(dataDir: string): number {
  const dir = join(dataDir, 'sessions');
  if (!existsSync(dir)) return 0;
  let bytes = 0;
  for (const name of readdirSync(dir)) bytes += statSync(join(dir, name)).size;
  return bytes;
}

/** CPU ms of JSON.parse + JSON.stringify of each text, per text, over enough repetitions to beat the clock's grain. */
function parseStringifyFloor(texts: string[]): number {
  const once = () => {
    for (const t of texts) JSON.stringify(JSON.parse(t));
  };
  once(); // warm up
  let reps = 0;
  const start = process.cpuUsage();
  let used = 0;
  while (reps < 3 || used < 500_000) {
    once();
    reps++;
    const u = process.cpuUsage(start);
    used = u.user + u.system;
  }
  return used / 1000 / reps / texts.length;
}

interface SizeRun {
  tokens: number;
  calls: number;
}

interface Hop {
  url: string;
  process: Started;
}

function threadTotals(pid: number): Map<string, number> {
  return new Map([...threadCpuMs(pid)].map(([name, t]) => [name, t.user + t.sys]));
}

async function measureSize(
  proxy: Hop,
  passthrough: Hop,
  model: string,
  dataDir: string,
  run: SizeRun,
  log: (m: string) => void,
): Promise<PromptCostRow> {
  const proxyUrl = proxy.url;
  // The fake engine's tokenizer is bytewise (bytes = tokens); the tool schema and chat template take ~400, the turns ~100 each.
  const system = filler('System prompt', Math.max(100, run.tokens - 400 - ((TURNS_PER_SESSION / 2) * (TOOL_OUTPUT_BYTES + 160)) / 2));
  const engineTexts: string[] = [];
  let promptTokens = 0;
  let measured = 0;
  const bytesBefore = sessionBytes(dataDir);
  // The sessions are registered first, their CPU measured on its own: a session is a rollout, paid
  // for once, not per call (and the pass-through, the floor, registers nothing).
  const registrationBefore = cpuMs(proxy.process.pid) ?? 0;
  const keys: string[] = [];
  for (let s = 0; s < Math.ceil(run.calls / TURNS_PER_SESSION); s++) {
    const { text } = await post(`${proxyUrl}/sessions`, { metadata: { bench: 'prompt-cost', tokens: run.tokens, s } });
    keys.push((JSON.parse(text) as { session_id: string }).session_id);
  }
  await new Promise((r) => setTimeout(r, 200));
  const registrationCpu = (cpuMs(proxy.process.pid) ?? registrationBefore) - registrationBefore;
  // The whole loop, not each call's round trip: work the proxy does after answering (the journal's
  // completion, GC) belongs to the call too. It is idle while the bench asks the engine directly.
  const cpuBefore = cpuMs(proxy.process.pid) ?? 0;
  const threadsBefore = threadTotals(proxy.process.pid);
  let passthroughCpu = 0;
  for (let s = 0; measured < run.calls; s++) {
    const key = keys[s]!;
    const messages: Message[] = [
      { role: 'system', content: system },
      { role: 'user', content: `Task ${s}: find the failing test and fix it.` },
    ];
    for (let t = 0; t < TURNS_PER_SESSION && measured < run.calls; t++) {
      const body = { model, messages, tools: [BASH_TOOL] };
      const answer = await post(`${proxyUrl}/v1/chat/completions`, body, key);
      if (answer.status !== 200) throw new Error(`proxy answered ${answer.status}: ${answer.text.slice(0, 300)}`);
      const message = (JSON.parse(answer.text) as { choices: { message: Message }[] }).choices[0]!.message;
      // The floor's input: the engine's answer to the same request, with its prompt ids (through the pass-through, timed too).
      const ptBefore = cpuMs(passthrough.process.pid) ?? 0;
      const direct = await post(`${passthrough.url}/v1/chat/completions`, { ...body, ...CAPTURE_FIELDS });
      passthroughCpu += (cpuMs(passthrough.process.pid) ?? ptBefore) - ptBefore;
      if (direct.status !== 200) throw new Error(`pass-through answered ${direct.status}: ${direct.text.slice(0, 300)}`);
      engineTexts.push(direct.text);
      promptTokens += (JSON.parse(direct.text) as { usage: { prompt_tokens: number } }).usage.prompt_tokens;
      measured++;
      messages.push({
        role: 'assistant',
        content: message.content ?? null,
        ...(message.tool_calls?.length ? { tool_calls: message.tool_calls } : {}),
      });
      const toolCall = message.tool_calls?.[0];
      if (toolCall) messages.push({ role: 'tool', tool_call_id: toolCall.id, content: filler('Output', TOOL_OUTPUT_BYTES) });
      else messages.push({ role: 'user', content: `Now run the tests again (${t}).` });
    }
  }
  await new Promise((r) => setTimeout(r, 200));
  const cpu = (cpuMs(proxy.process.pid) ?? cpuBefore) - cpuBefore;
  const byThread: Record<string, number> = {};
  for (const [name, ms] of threadTotals(proxy.process.pid))
    byThread[name] = Math.round(((ms - (threadsBefore.get(name) ?? 0)) / measured) * 1000) / 1000;
  const stored = sessionBytes(dataDir) - bytesBefore;
  const floor = parseStringifyFloor(engineTexts);
  const perCall = cpu / measured;
  const ratio = Math.round((perCall / floor) * 100) / 100;
  const row: PromptCostRow = {
    prompt_tokens_target: run.tokens,
    calls: measured,
    prompt_tokens_mean: Math.round(promptTokens / measured),
    proxy_cpu_ms_per_call: Math.round(perCall * 1000) / 1000,
    proxy_cpu_ms_per_call_by_thread: byThread,
    passthrough_cpu_ms_per_call: Math.round((passthroughCpu / measured) * 1000) / 1000,
    floor_ms_per_call: Math.round(floor * 1000) / 1000,
    ratio,
    registration_cpu_ms_per_session: Math.round((registrationCpu / keys.length) * 1000) / 1000,
    engine_answer_bytes_mean: Math.round(engineTexts.reduce((n, t) => n + t.length, 0) / measured),
    stored_bytes_per_call: Math.round(stored / measured),
    pass: ratio <= PROMPT_COST_TARGET.maxFloorRatio,
  };
  log(`prompt-cost ${run.tokens} tokens: ${JSON.stringify(row)}`);
  return row;
}

export interface PromptCostOptions {
  sizes: number[];
  calls: number[];
  profile: boolean;
  /** Quick mode: a 4-call warm-up instead of one as long as the measured calls. */
  quick: boolean;
  out: string;
  cli: string;
  log: (m: string) => void;
}

export async function runPromptCost(
  o: PromptCostOptions,
): Promise<{ rows: PromptCostRow[]; pass: boolean; host: { cpus: number; load_1m_start: number; load_1m_end: number } }> {
  const loadStart = loadavg()[0]!;
  const entry = existsSync(o.cli) ? [o.cli] : ['--import', 'tsx', join(ROOT, 'src', 'cli', 'main.ts')];
  const engine = await startNode(
    'fake engine',
    ['--import', 'tsx', join(ROOT, 'bench', 'fake-engine-process.ts'), '--think-ms', '0'],
    (l) => l.startsWith('{'),
  );
  const { url: engineUrl, model } = JSON.parse(engine.line) as { url: string; model: string };
  const rows: PromptCostRow[] = [];
  const pt = await startNode('pass-through', ['--import', 'tsx', join(ROOT, 'bench', 'passthrough.ts'), '--engine-url', engineUrl], (l) =>
    l.startsWith('{'),
  );
  const passthrough = { url: (JSON.parse(pt.line) as { url: string }).url, process: pt };
  try {
    for (const [i, tokens] of o.sizes.entries()) {
      const dataDir = mkdtempSync(join(tmpdir(), 'hl-bench-prompt-cost-'));
      const profileDir = join(ROOT, 'bench-results', 'profiles');
      if (o.profile) mkdirSync(profileDir, { recursive: true });
      const prof = o.profile
        ? ['--cpu-prof', '--cpu-prof-interval', '100', '--cpu-prof-dir', profileDir, '--cpu-prof-name', `prompt-cost-${tokens}.cpuprofile`]
        : [];
      const proxy = await startNode(
        'proxy',
        [...prof, ...entry, 'proxy', '--engine-url', engineUrl, '--model', model, '--data-dir', dataDir],
        (l) => l.startsWith('proxy listening on '),
      );
      const proxyUrl = proxy.line.slice('proxy listening on '.length).trim();
      try {
        // Warm-up: as many calls at this size as are measured, not measured. Four calls left V8
        // compiling during the measured ones (start-up cost, not the cost per call of a proxy
        // that runs for days); the pass-through is warmed by the same calls.
        const hop = { url: proxyUrl, process: proxy };
        const calls = o.calls[i] ?? o.calls[o.calls.length - 1]!;
        await measureSize(hop, passthrough, model, dataDir, { tokens, calls: o.quick ? 4 : calls }, () => {});
        rows.push(await measureSize(hop, passthrough, model, dataDir, { tokens, calls }, o.log));
      } finally {
        await stopChild(proxy.child);
        rmSync(dataDir, { recursive: true, force: true });
      }
    }
  } finally {
    await stopChild(pt.child);
    await stopChild(engine.child);
  }
  const result = {
    rows,
    pass: rows.every((r) => r.pass),
    host: { cpus: cpus().length, load_1m_start: Math.round(loadStart * 100) / 100, load_1m_end: Math.round(loadavg()[0]! * 100) / 100 },
  };
  mkdirSync(dirname(o.out), { recursive: true });
  writeFileSync(
    o.out,
    `${JSON.stringify({ bench: 'prompt-cost', started_at: new Date().toISOString(), target: PROMPT_COST_TARGET, ...result }, null, 2)}\n`,
  );
  return result;
}

function intList(text: string, name: string): number[] {
  const list = text.split(',').map((s) => Number(s.trim()));
  if (list.length === 0 || list.some((n) => !Number.isInteger(n) || n <= 0))
    throw new Error(`--${name} must be a comma-separated list of positive integers, got '${text}'`);
  return list;
}

export function parsePromptCostArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): PromptCostOptions {
  const { values } = parseArgs({
    args: argv,
    options: {
      quick: { type: 'boolean', default: false },
      sizes: { type: 'string' },
      calls: { type: 'string' },
      profile: { type: 'boolean', default: false },
      out: { type: 'string' },
      cli: { type: 'string' },
    },
  });
  const quick = values.quick || env.BENCH_QUICK === '1';
  return {
    sizes: intList(values.sizes ?? '1000,8000,32000', 'sizes'),
    calls: intList(values.calls ?? (quick ? '80,40,20' : '600,300,200'), 'calls'),
    profile: values.profile,
    quick,
    out: values.out ?? join(ROOT, 'bench-results', quick ? 'prompt-cost-quick.json' : 'prompt-cost.json'),
    cli: values.cli ?? join(ROOT, 'dist', 'cli.js'),
    log: (m) => process.stderr.write(`${m}\n`),
  };
}

export function formatPromptCost(rows: PromptCostRow[]): string {
  const head = [
    'prompt tokens',
    'calls',
    'proxy CPU ms/call',
    'of it main thread',
    'pass-through CPU ms/call',
    'parse+stringify floor ms',
    'ratio',
    'answer KB',
    'stored KB/call',
    'CPU ms/session created',
    'verdict',
  ];
  const lines = [head.join('  ')];
  for (const r of rows)
    lines.push(
      [
        r.prompt_tokens_mean,
        r.calls,
        r.proxy_cpu_ms_per_call.toFixed(2),
        (r.proxy_cpu_ms_per_call_by_thread.main ?? 0).toFixed(2),
        r.passthrough_cpu_ms_per_call.toFixed(2),
        r.floor_ms_per_call.toFixed(3),
        `${r.ratio.toFixed(2)}x`,
        (r.engine_answer_bytes_mean / 1024).toFixed(1),
        (r.stored_bytes_per_call / 1024).toFixed(1),
        r.registration_cpu_ms_per_session.toFixed(2),
        r.pass ? 'ok' : 'FAIL',
      ].join('  '),
    );
  return lines.join('\n');
}

if (process.argv[1]?.endsWith('prompt-cost.ts')) {
  (async () => {
    const options = parsePromptCostArgs(process.argv.slice(2));
    const result = await runPromptCost(options);
    process.stdout.write(
      `\nprompt cost (${result.host.cpus} cores, load ${result.host.load_1m_start} at start)\n${formatPromptCost(result.rows)}\n${result.pass ? 'PASS' : 'FAIL'}: proxy CPU per call <= ${PROMPT_COST_TARGET.maxFloorRatio}x JSON parse+stringify of the engine answer\nJSON: ${options.out}\n`,
    );
    process.exitCode = result.pass ? 0 : 1;
  })().catch((err: unknown) => {
    process.stderr.write(`prompt-cost: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 2;
  });
}
