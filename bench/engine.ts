// bench/engine.ts: the embedded CPU engine on the tiny Qwen3 model.
//   node --import tsx bench/engine.ts [--quick] [--seed N]
// Measures: model build time (fresh data dir), load time, prompt evaluation tokens/s, sampled
// generation tokens/s, teacher-forced (scripted policy) tokens/s, resident memory. Writes
// bench-results/engine.json. Exits 1 when a target is missed (targets assume an idle 2-core machine).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { EngineChatRequest } from '../src/engine/chat-request.js';
import { startEmbeddedEngine } from '../src/engine/embedded-engine.js';
import { LlamaEngine } from '../src/engine/llama-engine.js';
import { ScriptedPolicy } from '../src/engine/policy.js';

const TARGETS = { maxBuildMs: 60_000, maxLoadMs: 20_000, minPromptTokS: 300, minGenTokS: 3, minForcedTokS: 3, maxRssMb: 1536 };

const { values } = parseArgs({ options: { quick: { type: 'boolean' }, seed: { type: 'string' } } });
const quick = values.quick || process.env.BENCH_QUICK === '1';
const seed = Number(values.seed ?? 0);
const CAPTURE = {
  logprobs: true,
  top_logprobs: 0,
  return_token_ids: true,
  return_tokens_as_token_ids: true,
  top_p: 1,
  top_k: -1,
  min_p: 0,
};

let peakRss = 0;
const sampleRss = () => {
  peakRss = Math.max(peakRss, process.memoryUsage().rss);
};
const rssTimer = setInterval(sampleRss, 50);

/** A long, varied user message (~n tokens of English). */
function longText(words: number, salt: number): string {
  const vocab = [
    'the',
    'engine',
    'reads',
    'every',
    'token',
    'of',
    'a',
    'prompt',
    'and',
    'scores',
    'it',
    'with',
    'care',
    'while',
    'agents',
    'call',
    'tools',
  ];
  return Array.from({ length: words }, (_, i) => vocab[(i * 7 + salt) % vocab.length]).join(' ');
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'hl-bench-engine-'));
  try {
    const lab = await startEmbeddedEngine({ dataDir, seed });
    sampleRss();
    const rssAfterLoad = process.memoryUsage().rss;
    const { buildMs, loadMs } = lab.timings;

    // Prompt evaluation: fresh prompts (the salt changes the first tokens, so no KV reuse), 1 output token.
    const promptRuns = quick ? 2 : 4;
    let promptTokens = 0;
    let promptMs = 0;
    let promptCpu = 0;
    for (let i = 0; i < promptRuns; i++) {
      const req = {
        messages: [{ role: 'user', content: `${i} ${longText(quick ? 800 : 2000, i)}` }],
        max_tokens: 1,
        ...CAPTURE,
      } as EngineChatRequest;
      const t = performance.now();
      const c = process.cpuUsage();
      const res = await lab.engine.complete(req);
      promptCpu += cpuMs(c);
      promptMs += performance.now() - t;
      promptTokens += res.usage!.prompt_tokens;
    }

    // Sampled generation: short prompt, temperature 1, until <|im_end|>.
    const genRuns = quick ? 6 : 20;
    let genTokens = 0;
    let genMs = 0;
    let genCpu = 0;
    for (let i = 0; i < genRuns; i++) {
      const req = {
        messages: [{ role: 'user', content: 'Say something.' }],
        seed: i,
        temperature: 1,
        max_tokens: 64,
        ...CAPTURE,
      } as EngineChatRequest;
      const t = performance.now();
      const c = process.cpuUsage();
      const res = await lab.engine.complete(req);
      genCpu += cpuMs(c);
      genMs += performance.now() - t;
      genTokens += res.usage!.completion_tokens;
    }

    // Teacher forcing: a scripted tool call scored through the model (what harness loops run on).
    const forcedEngine = new LlamaEngine({
      runtime: lab.runtime,
      modelName: lab.engine.modelName,
      policy: ScriptedPolicy.parse(
        {
          turns: [
            {
              say: 'I will count the lines first.',
              call: { tool: 'bash', input: 'wc -l notes.txt && head -n 20 notes.txt | sort | uniq -c' },
            },
          ],
        },
        'bench',
      ),
    });
    const tool = {
      type: 'function' as const,
      function: { name: 'bash', parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] } },
    };
    const forcedRuns = quick ? 3 : 8;
    let forcedTokens = 0;
    let forcedMs = 0;
    let forcedCpu = 0;
    for (let i = 0; i < forcedRuns; i++) {
      const req = {
        messages: [{ role: 'user', content: `Task ${i}: how many lines are in notes.txt?` }],
        tools: [tool],
        ...CAPTURE,
      } as EngineChatRequest;
      const t = performance.now();
      const c = process.cpuUsage();
      const res = await forcedEngine.complete(req);
      forcedCpu += cpuMs(c);
      forcedMs += performance.now() - t;
      forcedTokens += res.usage!.completion_tokens;
    }
    sampleRss();
    await lab.close();

    const report = {
      quick,
      seed,
      model: lab.engine.modelName,
      build_ms: Math.round(buildMs),
      load_ms: Math.round(loadMs),
      // cpu_ms_per_token counts this process's CPU time (all threads): comparable across loaded and idle machines.
      prompt: {
        tokens: promptTokens,
        ms: Math.round(promptMs),
        tokens_per_s: round(promptTokens / (promptMs / 1000)),
        cpu_ms_per_token: round(promptCpu / promptTokens),
      },
      generation: {
        tokens: genTokens,
        requests: genRuns,
        ms: Math.round(genMs),
        tokens_per_s: round(genTokens / (genMs / 1000)),
        cpu_ms_per_token: round(genCpu / genTokens),
      },
      teacher_forced: {
        tokens: forcedTokens,
        requests: forcedRuns,
        ms: Math.round(forcedMs),
        tokens_per_s: round(forcedTokens / (forcedMs / 1000)),
        cpu_ms_per_token: round(forcedCpu / forcedTokens),
      },
      load_average_1m: round(loadavg()[0]!),
      rss_mb: { after_load: mb(rssAfterLoad), peak: mb(peakRss) },
      targets: TARGETS,
    };
    const failures: string[] = [];
    if (report.build_ms > TARGETS.maxBuildMs) failures.push(`model build ${report.build_ms} ms > ${TARGETS.maxBuildMs}`);
    if (report.load_ms > TARGETS.maxLoadMs) failures.push(`load ${report.load_ms} ms > ${TARGETS.maxLoadMs}`);
    if (report.prompt.tokens_per_s < TARGETS.minPromptTokS)
      failures.push(`prompt ${report.prompt.tokens_per_s} tok/s < ${TARGETS.minPromptTokS}`);
    if (report.generation.tokens_per_s < TARGETS.minGenTokS)
      failures.push(`generation ${report.generation.tokens_per_s} tok/s < ${TARGETS.minGenTokS}`);
    if (report.teacher_forced.tokens_per_s < TARGETS.minForcedTokS)
      failures.push(`teacher forcing ${report.teacher_forced.tokens_per_s} tok/s < ${TARGETS.minForcedTokS}`);
    if (report.rss_mb.peak > TARGETS.maxRssMb) failures.push(`peak RSS ${report.rss_mb.peak} MB > ${TARGETS.maxRssMb}`);

    mkdirSync('bench-results', { recursive: true });
    writeFileSync(
      join('bench-results', 'engine.json'),
      `${JSON.stringify({ ...report, pass: failures.length === 0, failures }, null, 2)}\n`,
    );
    process.stdout.write(
      [
        `engine bench (${report.model}${quick ? ', quick' : ''})`,
        `  model build      ${report.build_ms} ms`,
        `  load             ${report.load_ms} ms`,
        `  prompt           ${report.prompt.tokens_per_s} tok/s (${report.prompt.tokens} tokens; ${report.prompt.cpu_ms_per_token} CPU ms/token)`,
        `  generation       ${report.generation.tokens_per_s} tok/s (${report.generation.tokens} tokens, ${genRuns} requests; ${report.generation.cpu_ms_per_token} CPU ms/token)`,
        `  teacher forcing  ${report.teacher_forced.tokens_per_s} tok/s (${report.teacher_forced.tokens} tokens, ${forcedRuns} requests; ${report.teacher_forced.cpu_ms_per_token} CPU ms/token)`,
        `  load average     ${report.load_average_1m} (targets assume an idle machine)`,
        `  RSS              ${report.rss_mb.after_load} MB after load, ${report.rss_mb.peak} MB peak`,
        failures.length ? `  MISSED: ${failures.join('; ')}` : '  all targets met',
        '',
      ].join('\n'),
    );
    process.exitCode = failures.length ? 1 : 0;
  } finally {
    clearInterval(rssTimer);
    rmSync(dataDir, { recursive: true, force: true });
  }
}

const round = (n: number) => Math.round(n * 10) / 10;
const cpuMs = (since: NodeJS.CpuUsage) => {
  const d = process.cpuUsage(since);
  return (d.user + d.system) / 1000;
};
const mb = (bytes: number) => Math.round(bytes / (1024 * 1024));

main().catch((err: unknown) => {
  process.stderr.write(`engine bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 2;
});
