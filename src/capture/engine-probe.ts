// Grades an engine on first contact (docs/capture-protocol.md §9.5): can it give us prompt ids, sampled ids
// and aligned logprobs (`tokens`), only logprobs, or only text? And are its logprobs the processed
// ones (after temperature), which importance ratios need, or raw?
import type { ChatEngine } from './engine-client.js';
import { engineErrorMessage } from './engine-client.js';
import type { CaptureLevel, ChatResponse } from './types.js';
import { normaliseEngineResponse } from './upstream.js';

export type LogprobsMode = 'processed' | 'raw' | 'unknown';
export type ToolSupport = 'ok' | 'no-tool-call' | 'rejected' | 'unknown';

export interface EngineProbeReport {
  engine_url: string;
  model: string;
  probed_at: string;
  /** True iff the engine is trainable (`tokens`). */
  ok: boolean;
  reachable: boolean;
  capture_level: CaptureLevel;
  rollout_type: 'train' | 'eval';
  logprobs_mode: LogprobsMode;
  tool_support: ToolSupport;
  served_models: string[];
  n_prompt_ids: number;
  n_completion_ids: number;
  findings: string[];
}

const CAPTURE_PROBE = {
  messages: [{ role: 'user', content: 'Reply with the single word: ok' }],
  max_tokens: 8,
  temperature: 0,
  logprobs: true,
  top_logprobs: 0,
  return_token_ids: true,
  return_tokens_as_token_ids: true,
};

/** Top-1 minus top-2 logprob at the first sampled position, or undefined if not reported. */
function firstGap(body: unknown): { gap: number; second: number } | undefined {
  const entry = (body as ChatResponse).choices?.[0]?.logprobs?.content?.[0];
  const top = (entry?.top_logprobs ?? []).map((t) => t.logprob).sort((a, b) => b - a);
  if (top.length < 2) return undefined;
  return { gap: top[0]! - top[1]!, second: top[1]! };
}

async function logprobsMode(engine: ChatEngine, model: string): Promise<{ mode: LogprobsMode; note?: string }> {
  const ask = (temperature: number) =>
    engine.chatCompletion({
      model,
      messages: [{ role: 'user', content: 'Reply with exactly: hello' }],
      max_tokens: 1,
      temperature,
      logprobs: true,
      top_logprobs: 5,
      return_tokens_as_token_ids: true,
    });
  const [one, two] = [await ask(1), await ask(2)];
  if (one.status !== 200 || two.status !== 200) return { mode: 'unknown', note: 'top_logprobs request refused' };
  const g1 = firstGap(one.body);
  const g2 = firstGap(two.body);
  if (!g1 || !g2) return { mode: 'unknown', note: 'no top_logprobs returned' };
  if (Math.abs(g1.second) > 100 || Math.abs(g2.second) > 100)
    return { mode: 'unknown', note: 'sentinel logprob at the probe position (forced token)' };
  if (g1.gap < 0.5) return { mode: 'unknown', note: `distribution too flat to tell (gap ${g1.gap.toFixed(3)} at T=1)` };
  const ratio = g2.gap / g1.gap;
  if (Math.abs(ratio - 0.5) < 0.15) return { mode: 'processed' };
  if (Math.abs(ratio - 1) < 0.15) return { mode: 'raw' };
  return { mode: 'unknown', note: `gap ratio ${ratio.toFixed(3)} between T=2 and T=1 is neither 0.5 nor 1` };
}

async function toolSupport(engine: ChatEngine, model: string): Promise<ToolSupport> {
  const reply = await engine.chatCompletion({
    model,
    messages: [{ role: 'user', content: 'Use the bash tool to list the files in /tmp.' }],
    tools: [
      {
        type: 'function',
        function: {
          name: 'bash',
          description: 'Run a shell command',
          parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
        },
      },
    ],
    tool_choice: 'auto',
    max_tokens: 512,
    temperature: 1,
  });
  if (reply.status !== 200) return reply.status === 400 ? 'rejected' : 'unknown';
  const choice = (reply.body as ChatResponse).choices?.[0];
  if (choice?.message?.tool_calls?.length) return 'ok';
  return choice?.finish_reason === 'length' ? 'unknown' : 'no-tool-call';
}

export async function probeEngine(engine: ChatEngine, model: string): Promise<EngineProbeReport> {
  const report: EngineProbeReport = {
    engine_url: engine.baseUrl,
    model,
    probed_at: new Date().toISOString(),
    ok: false,
    reachable: false,
    capture_level: 'text',
    rollout_type: 'eval',
    logprobs_mode: 'unknown',
    tool_support: 'unknown',
    served_models: [],
    n_prompt_ids: 0,
    n_completion_ids: 0,
    findings: [],
  };
  try {
    const models = await engine.get('/v1/models');
    report.reachable = true;
    const data = (models.body as { data?: { id?: unknown }[] })?.data;
    if (models.status === 200 && Array.isArray(data)) {
      report.served_models = data.map((m) => String(m.id));
      if (report.served_models.length && !report.served_models.includes(model))
        report.findings.push(`[FATAL] model_not_served: ${model} is not among ${report.served_models.join(', ')}`);
    }
    const probe = await engine.chatCompletion({ model, ...CAPTURE_PROBE });
    if (probe.status !== 200) {
      report.findings.push(`[FATAL] probe_rejected: engine answered ${probe.status}: ${engineErrorMessage(probe.body)}`);
      return report;
    }
    const answer = normaliseEngineResponse(probe.body);
    const { prompt_token_ids: prompt, completion_token_ids: sampled, logprobs } = answer.capture;
    report.n_prompt_ids = prompt?.length ?? 0;
    report.n_completion_ids = sampled?.length ?? 0;
    const fatal: string[] = [];
    if (!prompt) fatal.push('[FATAL] no_prompt_token_ids: the answer has no top-level prompt_token_ids');
    if (!sampled) fatal.push('[FATAL] no_completion_token_ids: choices[0].token_ids is missing');
    if (!logprobs) fatal.push('[FATAL] no_logprobs: logprobs.content is missing or unusable');
    report.findings.push(...fatal, ...answer.findings.filter((f) => !fatal.some((x) => x.split(':')[0] === f.split(':')[0])));
    const hasFatal = report.findings.some((f) => f.startsWith('[FATAL]'));
    report.capture_level = !hasFatal ? 'tokens' : logprobs ? 'logprobs' : 'text';
    if (report.capture_level === 'tokens') {
      const mode = await logprobsMode(engine, model);
      report.logprobs_mode = mode.mode;
      if (mode.note) report.findings.push(`[INFO] logprobs_mode: ${mode.note}`);
      if (mode.mode === 'raw') {
        report.findings.push(
          '[FATAL] raw_logprobs: the engine reports logprobs before temperature (vLLM default raw_logprobs); start it with --logprobs-mode processed_logprobs',
        );
        report.capture_level = 'logprobs';
      }
    }
    report.tool_support = await toolSupport(engine, model);
    if (report.tool_support === 'rejected') report.findings.push('[FATAL] no_tool_calling: the engine rejects tool definitions');
    else if (report.tool_support === 'no-tool-call')
      report.findings.push('[WARN] no_tool_call: the engine answered a tool request without calling the tool');
  } catch (err) {
    report.findings.push(`[FATAL] unreachable: ${err instanceof Error ? err.message : String(err)}`);
  }
  report.ok = report.capture_level === 'tokens';
  report.rollout_type = report.ok ? 'train' : 'eval';
  return report;
}
