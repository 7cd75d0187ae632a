// `token-in-cost`: the capture proxy's CPU per turn when it renders (token in, token out), at 8k, 32k
// and 128k-token contexts, side by side with the proxy in chat mode (the engine renders) and the bare
// pass-through, on the same long tool loops against one fast engine (bench/token-engine-process.ts:
// the tiny Qwen3's real tokenizer and template, a fixed tool call, no model) (issue 25).
//
// Per size, a harness-like client runs tool loops: a system prompt of that many tokens, then turns of
// one tool call and its result (about 90 new tokens a turn), resending the whole history each time.
// Each hop (token-in proxy as it runs by default, with the full-render check sampled, and with the check
// on every turn; chat-mode proxy; pass-through) is
// its own process; its CPU over the measured turns (after as many warm-up turns) divided by the turns
// is the cost per turn. The claim: in token-in mode the cost follows the new tokens of a turn, not the
// context, so the 128k row is within 1.5x of the 8k row.
//
//   node --import tsx bench/token-in-cost.ts [--quick] [--sizes 8000,32000,128000] [--turns 24] [--loops 3] [--hops token-in,chat]
//     [--profile DIR] [--out FILE]
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { cpuMs, rssMb, schedCpuMs, startNode, stopChild, type Started } from './processes.js';

const ROOT = join(__dirname, '..');

export const TOKEN_IN_COST_TARGET = { maxRatio128kTo8k: 1.5 } as const;

/** A tool result's text: about 60 tokens with the Qwen3 tokenizer. */
const TOOL_OUTPUT = 'total 24\ndrwxr-xr-x 2 agent agent 4096 Dec  2 12:00 .\n-rw-r--r-- 1 agent agent  220 Dec  2 12:00 numbers.txt\n';

const BASH_TOOL = {
  type: 'function',
  function: {
    name: 'bash',
    description: 'Run a shell command in the task container and return its output.',
    parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
  },
};

/** The fields a proxy at capture level `tokens` adds to a chat request (so the pass-through carries the same answer). */
const CAPTURE_FIELDS = {
  stream: false,
  max_tokens: 4096,
  logprobs: true,
  top_logprobs: 0,
  return_token_ids: true,
  return_tokens_as_token_ids: true,
};

export type Hop = 'token-in' | 'token-in+check' | 'chat' | 'pass-through';
export const HOPS: readonly Hop[] = ['token-in', 'token-in+check', 'chat', 'pass-through'];

export interface TokenInCostRow {
  hop: Hop;
  context_tokens_target: number;
  turns: number;
  /** Measured loops of `turns` (each its own session); the CPU is their mean per turn. */
  loops: number;
  /** Mean prompt tokens of the measured turns (the engine's count). */
  prompt_tokens_mean: number;
  cpu_ms_per_turn: number;
  /**
   * A session's first turn and the turns after it apart (per-thread schedstat around each call, mean
   * over the loops): the first turn's new tokens are the whole context (it renders, tokenizes and
   * stores all of it), every later turn's about 90, so the turns after the first are where "the cost
   * follows the new tokens" is seen. Null where /proc has no schedstat.
   */
  first_turn_cpu_ms: number | null;
  cpu_ms_per_turn_after_first: number | null;
  /**
   * The hop's resident memory after the measured loop, MB (its process serves every size in turn, so
   * it holds the smaller sizes' sessions too): what the sessions' ids cost to keep.
   */
  rss_mb: number | null;
}

interface Message {
  role: string;
  content: string | null;
  tool_calls?: unknown[];
  tool_call_id?: string;
}

async function post(url: string, body: unknown, key?: string): Promise<{ status: number; text: string }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify(body),
  });
  return { status: res.status, text: await res.text() };
}

/** About `tokens` tokens of prose (the Qwen3 tokenizer makes ~4.3 characters a token of this text). */
function systemPrompt(tokens: number): string {
  const sentence = 'The agent reads files, runs commands and edits code until every test passes. ';
  return `You are a careful software agent.\n${sentence.repeat(Math.ceil((tokens * 4.3) / sentence.length))}`;
}

/**
 * One tool loop through `url`: `turns` calls, each resending the history; returns the mean prompt
 * tokens and, when `cpu` reads the hop's CPU, each call's CPU ms (from its request to the next one's).
 */
async function toolLoop(
  url: string,
  model: string,
  system: string,
  turns: number,
  hop: Hop,
  key: string | undefined,
  cpu: () => number | undefined = () => undefined,
): Promise<{ promptTokens: number; turnCpuMs: (number | undefined)[] }> {
  const messages: Message[] = [
    { role: 'system', content: system },
    { role: 'user', content: 'Find the failing test and fix it.' },
  ];
  let promptTokens = 0;
  const marks = [cpu()];
  for (let t = 0; t < turns; t++) {
    if (t > 0) marks.push(cpu());
    const body = { model, messages, tools: [BASH_TOOL], ...(hop === 'pass-through' ? CAPTURE_FIELDS : {}) };
    const answer = await post(`${url}/v1/chat/completions`, body, key);
    if (answer.status !== 200) throw new Error(`${hop} answered ${answer.status}: ${answer.text.slice(0, 300)}`);
    const parsed = JSON.parse(answer.text) as {
      choices: { message: Message & { tool_calls?: { id: string }[] } }[];
      usage: { prompt_tokens: number };
    };
    promptTokens += parsed.usage.prompt_tokens;
    const message = parsed.choices[0]!.message;
    const call = message.tool_calls?.[0];
    if (!call) throw new Error(`${hop}: no tool call in the answer: ${answer.text.slice(0, 300)}`);
    messages.push({ role: 'assistant', content: message.content ?? null, tool_calls: message.tool_calls });
    messages.push({ role: 'tool', tool_call_id: call.id, content: `${TOOL_OUTPUT}(turn ${t})` });
  }
  // The last call's work after its answer (a store commit's tail, a collection) is counted after a pause.
  await new Promise((r) => setTimeout(r, 100));
  marks.push(cpu());
  const turnCpuMs = marks.slice(1).map((m, i) => (m === undefined || marks[i] === undefined ? undefined : m - marks[i]!));
  return { promptTokens: promptTokens / turns, turnCpuMs };
}

async function startHop(
  hop: Hop,
  engine: { url: string; model: string; gguf: string },
  dataDir: string,
  profileDir: string | null,
): Promise<{ url: string; process: Started; proxy: boolean }> {
  if (hop === 'pass-through') {
    const p = await startNode('pass-through', ['--import', 'tsx', join(ROOT, 'bench', 'passthrough.ts'), '--engine-url', engine.url], (l) =>
      l.startsWith('{'),
    );
    return { url: (JSON.parse(p.line) as { url: string }).url, process: p, proxy: false };
  }
  const render = hop === 'chat' ? 'engine' : 'proxy';
  // One folder per hop and Node's default file names: tsx's loader runs in a worker thread that writes
  // its own profile, and a fixed --cpu-prof-name would let it overwrite the main thread's.
  const prof = profileDir ? ['--cpu-prof', '--cpu-prof-dir', join(profileDir, `token-in-cost-${hop}`)] : [];
  const args = [
    ...prof,
    '--import',
    'tsx',
    join(ROOT, 'bench', 'capture-proxy-process.ts'),
    '--engine-url',
    engine.url,
    '--model',
    engine.model,
    '--data-dir',
    dataDir,
    '--render',
    render,
    '--render-model',
    engine.gguf,
  ];
  // token-in: the proxy's default (the full-render check sampled); token-in+check: on every bridged turn.
  args.push('--full-render-check', hop === 'token-in+check' ? 'always' : 'sampled');
  const p = await startNode(`proxy (${hop})`, args, (l) => l.startsWith('proxy listening on '), { timeoutMs: 120_000 });
  return { url: p.line.slice('proxy listening on '.length).trim(), process: p, proxy: true };
}

export interface TokenInCostOptions {
  sizes: number[];
  /** Turns per tool loop (a warm-up loop on its own session, then the measured loops). */
  turns: number;
  /**
   * Measured loops per size, each on a new session (default 3). A loop's first turns cost the most
   * (a new root, the first full-render check) and a turn now and then collects garbage for tens of
   * ms, so one 24-turn loop's mean moved by a quarter between runs of one build; three loops' mean
   * moves less.
   */
  loops: number;
  hops: Hop[];
  /** Write each proxy's CPU profile (.cpuprofile) here. */
  profileDir: string | null;
  out: string;
  log: (m: string) => void;
}

export interface TokenInCostResult {
  rows: TokenInCostRow[];
  /** Per hop: the largest size's CPU per turn over the smallest's. */
  ratios: Partial<Record<Hop, number>>;
  /** The same over the turns after each session's first (reported; the target judges `ratios`). */
  ratios_after_first: Partial<Record<Hop, number>>;
  pass: boolean;
  host: { cpus: number; load_1m_start: number; load_1m_end: number };
}

export async function runTokenInCost(o: TokenInCostOptions): Promise<TokenInCostResult> {
  const loadStart = loadavg()[0]!;
  const engineProc = await startNode(
    'token engine',
    ['--import', 'tsx', join(ROOT, 'bench', 'token-engine-process.ts')],
    (l) => l.startsWith('{'),
    { timeoutMs: 180_000 },
  );
  const engine = JSON.parse(engineProc.line) as { url: string; model: string; gguf: string };
  const rows: TokenInCostRow[] = [];
  try {
    for (const hop of o.hops) {
      const dataDir = mkdtempSync(join(tmpdir(), 'hl-bench-token-in-'));
      const h = await startHop(hop, engine, dataDir, o.profileDir);
      try {
        for (const size of o.sizes) {
          const system = systemPrompt(size);
          const session = async () =>
            h.proxy
              ? (
                  JSON.parse((await post(`${h.url}/sessions`, { metadata: { bench: 'token-in-cost', hop, size } })).text) as {
                    session_id: string;
                  }
                ).session_id
              : undefined;
          // Warm-up: a whole loop at this size on its own session (V8 compiles, caches fill), not measured.
          await toolLoop(h.url, engine.model, system, o.turns, hop, await session());
          let cpu = 0;
          let promptSum = 0;
          const turnCpu: (number | undefined)[][] = [];
          for (let loop = 0; loop < o.loops; loop++) {
            const key = await session();
            await new Promise((r) => setTimeout(r, 100));
            const before = cpuMs(h.process.pid) ?? 0;
            const run = await toolLoop(h.url, engine.model, system, o.turns, hop, key, () => schedCpuMs(h.process.pid));
            promptSum += run.promptTokens;
            turnCpu.push(run.turnCpuMs);
            cpu += (cpuMs(h.process.pid) ?? before) - before;
          }
          const promptMean = promptSum / o.loops;
          const split = splitFirstTurn(turnCpu);
          const row: TokenInCostRow = {
            hop,
            context_tokens_target: size,
            turns: o.turns,
            loops: o.loops,
            prompt_tokens_mean: Math.round(promptMean),
            cpu_ms_per_turn: Math.round((cpu / (o.turns * o.loops)) * 1000) / 1000,
            first_turn_cpu_ms: split?.first ?? null,
            cpu_ms_per_turn_after_first: split?.after ?? null,
            rss_mb: rssMb(h.process.pid) ?? null,
          };
          rows.push(row);
          o.log(`token-in-cost ${JSON.stringify(row)}`);
        }
      } finally {
        await stopChild(h.process.child);
        rmSync(dataDir, { recursive: true, force: true });
      }
    }
  } finally {
    await stopChild(engineProc.child);
  }
  const ratios: Partial<Record<Hop, number>> = {};
  const ratiosAfterFirst: Partial<Record<Hop, number>> = {};
  const smallest = Math.min(...o.sizes);
  const largest = Math.max(...o.sizes);
  for (const hop of o.hops) {
    const lo = rows.find((r) => r.hop === hop && r.context_tokens_target === smallest);
    const hi = rows.find((r) => r.hop === hop && r.context_tokens_target === largest);
    if (lo && hi && lo.cpu_ms_per_turn > 0) ratios[hop] = Math.round((hi.cpu_ms_per_turn / lo.cpu_ms_per_turn) * 100) / 100;
    const [a, b] = [lo?.cpu_ms_per_turn_after_first, hi?.cpu_ms_per_turn_after_first];
    if (a && b) ratiosAfterFirst[hop] = Math.round((b / a) * 100) / 100;
  }
  const pass = ratios['token-in'] === undefined || ratios['token-in'] <= TOKEN_IN_COST_TARGET.maxRatio128kTo8k;
  const result = {
    rows,
    ratios,
    ratios_after_first: ratiosAfterFirst,
    pass,
    host: { cpus: cpus().length, load_1m_start: Math.round(loadStart * 100) / 100, load_1m_end: Math.round(loadavg()[0]! * 100) / 100 },
  };
  mkdirSync(dirname(o.out), { recursive: true });
  writeFileSync(
    o.out,
    `${JSON.stringify({ bench: 'token-in-cost', started_at: new Date().toISOString(), target: TOKEN_IN_COST_TARGET, ...result }, null, 2)}\n`,
  );
  return result;
}

/** The mean of each loop's first turn, and of every later turn, over the loops; null without per-turn CPU. */
export function splitFirstTurn(loops: readonly (readonly (number | undefined)[])[]): { first: number; after: number } | null {
  const firsts: number[] = [];
  const rest: number[] = [];
  for (const turns of loops) {
    if (turns.length < 2 || turns.some((t) => t === undefined)) return null;
    firsts.push(turns[0]!);
    rest.push(...(turns.slice(1) as number[]));
  }
  if (firsts.length === 0) return null;
  const mean = (xs: number[]) => Math.round((xs.reduce((a, b) => a + b, 0) / xs.length) * 1000) / 1000;
  return { first: mean(firsts), after: mean(rest) };
}

function intList(text: string, name: string): number[] {
  const list = text.split(',').map((s) => Number(s.trim()));
  if (list.length === 0 || list.some((n) => !Number.isInteger(n) || n <= 0))
    throw new Error(`--${name} must be a comma-separated list of positive integers, got '${text}'`);
  return list;
}

export function parseTokenInCostArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): TokenInCostOptions {
  const { values } = parseArgs({
    args: argv,
    options: {
      quick: { type: 'boolean', default: false },
      sizes: { type: 'string' },
      turns: { type: 'string' },
      loops: { type: 'string' },
      hops: { type: 'string' },
      profile: { type: 'string' },
      out: { type: 'string' },
    },
  });
  const quick = values.quick || env.BENCH_QUICK === '1';
  const hops = (values.hops ?? HOPS.join(',')).split(',').map((h) => h.trim()) as Hop[];
  for (const h of hops) if (!HOPS.includes(h)) throw new Error(`--hops: unknown '${h}' (${HOPS.join(', ')})`);
  return {
    sizes: intList(values.sizes ?? '8000,32000,128000', 'sizes'),
    turns: intList(values.turns ?? (quick ? '8' : '24'), 'turns')[0]!,
    loops: intList(values.loops ?? (quick ? '1' : '3'), 'loops')[0]!,
    hops,
    profileDir: values.profile ?? null,
    out: values.out ?? join(ROOT, 'bench-results', quick ? 'token-in-cost-quick.json' : 'token-in-cost.json'),
    log: (m) => process.stderr.write(`${m}\n`),
  };
}

export function formatTokenInCost(result: Pick<TokenInCostResult, 'rows' | 'ratios' | 'ratios_after_first'>): string {
  const sizes = [...new Set(result.rows.map((r) => r.context_tokens_target))].sort((a, b) => a - b);
  const hops = [...new Set(result.rows.map((r) => r.hop))];
  const lines = [['CPU ms per turn', ...sizes.map((s) => `${Math.round(s / 1000)}k context`), 'largest/smallest'].join('  ')];
  for (const hop of hops) {
    const cells = sizes.map(
      (s) => result.rows.find((r) => r.hop === hop && r.context_tokens_target === s)?.cpu_ms_per_turn.toFixed(2) ?? '-',
    );
    lines.push([hop.padEnd(15), ...cells.map((c) => c.padStart(11)), `${result.ratios[hop]?.toFixed(2) ?? '-'}x`.padStart(16)].join('  '));
  }
  lines.push("turns after a session's first (its first turn, ms)");
  for (const hop of hops) {
    const cells = sizes.map((s) => {
      const r = result.rows.find((x) => x.hop === hop && x.context_tokens_target === s);
      return r?.cpu_ms_per_turn_after_first == null
        ? '-'
        : `${r.cpu_ms_per_turn_after_first.toFixed(2)} (${r.first_turn_cpu_ms!.toFixed(0)})`;
    });
    lines.push(
      [hop.padEnd(15), ...cells.map((c) => c.padStart(11)), `${result.ratios_after_first[hop]?.toFixed(2) ?? '-'}x`.padStart(16)].join(
        '  ',
      ),
    );
  }
  const prompts = sizes.map((s) => result.rows.find((r) => r.context_tokens_target === s)?.prompt_tokens_mean ?? 0);
  lines.push(`(mean prompt tokens of the measured turns: ${prompts.join(', ')})`);
  for (const hop of hops) {
    const rss = sizes.map((s) => result.rows.find((r) => r.hop === hop && r.context_tokens_target === s)?.rss_mb ?? '-');
    lines.push(`(${hop}: resident MB after each size: ${rss.join(', ')})`);
  }
  return lines.join('\n');
}

if (process.argv[1]?.endsWith('token-in-cost.ts')) {
  (async () => {
    const options = parseTokenInCostArgs(process.argv.slice(2));
    const result = await runTokenInCost(options);
    process.stdout.write(
      `\ntoken-in cost (${result.host.cpus} cores, load ${result.host.load_1m_start} at start)\n${formatTokenInCost(result)}\n` +
        `${result.pass ? 'PASS' : 'FAIL'}: token-in CPU per turn at the largest context <= ${TOKEN_IN_COST_TARGET.maxRatio128kTo8k}x the smallest\nJSON: ${options.out}\n`,
    );
    process.exitCode = result.pass ? 0 : 1;
  })().catch((err: unknown) => {
    process.stderr.write(`token-in-cost: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 2;
  });
}
