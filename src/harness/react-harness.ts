// The reference harness: a small ReAct agent (Chat Completions + one bash tool), the known-good
// baseline for the capture contract. It runs inside the sandbox as a plain Node script (bundled to
// dist/react-harness.js, no dependencies) or locally, and writes its own ATIF trajectory.
//   HARNESS_LAB_BASE_URL=<proxy>/v1 HARNESS_LAB_API_KEY=<session> node react-harness.js "<instruction>"
// Optional: HARNESS_LAB_MODEL, HARNESS_LAB_ATIF (trajectory path), HARNESS_LAB_MAX_TURNS (default 20).
import { randomBytes } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';

export const REACT_HARNESS_VERSION = '1.0.0';

const SYSTEM =
  'You are an agent working in a Linux sandbox. Use the bash tool to inspect and change files; when the task is done, answer with a short summary and no tool call.';
const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'bash',
      description: 'Run a bash command in the working directory and return its combined stdout and stderr.',
      parameters: { type: 'object', properties: { command: { type: 'string', description: 'The command to run' } }, required: ['command'] },
    },
  },
];

interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}
interface Message {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string | null;
  tool_calls?: ToolCall[];
  tool_call_id?: string;
}
interface Completion {
  choices: { message: { content: string | null; reasoning_content?: string | null; tool_calls?: ToolCall[] }; finish_reason: string }[];
  usage?: { prompt_tokens?: number; completion_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } | null };
  model?: string;
}

function runBash(command: string): string {
  const r = spawnSync('bash', ['-c', command], { encoding: 'utf8', timeout: 120_000, maxBuffer: 4 * 1024 * 1024 });
  const out = `${r.stdout ?? ''}${r.stderr ?? ''}`;
  const status = r.error ? `error: ${r.error.message}` : `exit code ${r.status ?? 'none'}`;
  return `${out.length > 16_000 ? `${out.slice(0, 16_000)}\n[output truncated]` : out}\n[${status}]`;
}

async function main(): Promise<number> {
  const instruction = process.argv.slice(2).join(' ').trim();
  const base = (process.env.HARNESS_LAB_BASE_URL ?? '').replace(/\/+$/, '');
  const key = process.env.HARNESS_LAB_API_KEY ?? '';
  const model = process.env.HARNESS_LAB_MODEL || 'policy';
  const maxTurns = Number(process.env.HARNESS_LAB_MAX_TURNS || 20);
  // Sampling this harness asks for on every call, as real harnesses do (Claude Code sends temperature 1):
  // a trainer's pinned sampling must override it, and the tests need a harness that asks.
  const askedSampling = JSON.parse(process.env.HARNESS_LAB_REACT_SAMPLING || '{}') as Record<string, number>;
  const atifPath = process.env.HARNESS_LAB_ATIF || `${process.env.HARNESS_LAB_LOGS || '/logs'}/agent/trajectory.json`;
  if (!instruction || !base || !key) {
    process.stderr.write('usage: HARNESS_LAB_BASE_URL=<url>/v1 HARNESS_LAB_API_KEY=<key> react-harness "<instruction>"\n');
    return 2;
  }
  const messages: Message[] = [
    { role: 'system', content: SYSTEM },
    { role: 'user', content: instruction },
  ];
  const runId = `react-${randomBytes(8).toString('hex')}`;
  const now = () => new Date().toISOString();
  const steps: Record<string, unknown>[] = [{ step_id: 1, timestamp: now(), source: 'user', message: instruction }];
  const totals = { prompt: 0, completion: 0, cached: 0 };
  const save = () => {
    mkdirSync(dirname(atifPath), { recursive: true });
    const trajectory = {
      schema_version: 'ATIF-v1.7',
      // The harness's own id, never its API key: trajectories are shared, keys are credentials.
      session_id: runId,
      agent: { name: 'react', version: REACT_HARNESS_VERSION, model_name: model, tool_definitions: TOOLS },
      steps,
      final_metrics: {
        total_prompt_tokens: totals.prompt,
        total_completion_tokens: totals.completion,
        total_cached_tokens: totals.cached,
        total_steps: steps.length,
      },
    };
    writeFileSync(atifPath, `${JSON.stringify(trajectory, null, 2)}\n`);
  };

  for (let turn = 0; turn < maxTurns; turn++) {
    const res = await fetch(`${base}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages, tools: TOOLS, ...askedSampling }),
    });
    const text = await res.text();
    if (res.status !== 200) {
      save();
      process.stderr.write(`model call failed: HTTP ${res.status}: ${text.slice(0, 500)}\n`);
      return 1;
    }
    const completion = JSON.parse(text) as Completion;
    const msg = completion.choices[0]?.message;
    if (!msg) throw new Error('the model answered without a choice');
    const usage = completion.usage ?? {};
    const metrics = {
      prompt_tokens: usage.prompt_tokens ?? 0,
      completion_tokens: usage.completion_tokens ?? 0,
      cached_tokens: usage.prompt_tokens_details?.cached_tokens ?? 0,
    };
    totals.prompt += metrics.prompt_tokens;
    totals.completion += metrics.completion_tokens;
    totals.cached += metrics.cached_tokens;
    messages.push({ role: 'assistant', content: msg.content ?? null, ...(msg.tool_calls?.length ? { tool_calls: msg.tool_calls } : {}) });
    const step: Record<string, unknown> = {
      step_id: steps.length + 1,
      timestamp: now(),
      source: 'agent',
      model_name: completion.model ?? model,
      message: msg.content ?? '',
      metrics,
      llm_call_count: 1,
    };
    if (msg.reasoning_content) step.reasoning_content = msg.reasoning_content;
    steps.push(step);
    process.stdout.write(`[turn ${turn + 1}] ${msg.content ?? ''}\n`);
    if (!msg.tool_calls?.length) {
      save();
      return 0;
    }
    step.tool_calls = msg.tool_calls.map((c) => ({
      tool_call_id: c.id,
      function_name: c.function.name,
      arguments: safeJson(c.function.arguments),
    }));
    const results: { source_call_id: string; content: string }[] = [];
    for (const call of msg.tool_calls) {
      const args = safeJson(call.function.arguments);
      const output =
        call.function.name !== 'bash'
          ? `unknown tool ${call.function.name}; the only tool is bash`
          : typeof args.command !== 'string'
            ? 'the bash tool needs a "command" string'
            : runBash(args.command);
      process.stdout.write(`$ ${String(args.command ?? '')}\n${output}\n`);
      messages.push({ role: 'tool', tool_call_id: call.id, content: output });
      results.push({ source_call_id: call.id, content: output });
    }
    step.observation = { results };
    save();
  }
  save();
  process.stderr.write(`stopped after ${maxTurns} turns without a final answer\n`);
  return 3;
}

function safeJson(text: string): Record<string, unknown> {
  try {
    const v = JSON.parse(text) as unknown;
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

// Run only as a script (the bundle, or `tsx react-harness.ts`), never on import.
if (process.argv[1] && /react-harness[\w-]*\.(js|ts|cjs|mjs)$/.test(process.argv[1])) {
  main().then(
    (code) => process.exit(code),
    (err: unknown) => {
      process.stderr.write(`react-harness: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exit(1);
    },
  );
}
