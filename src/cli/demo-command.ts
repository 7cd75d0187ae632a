// `harness-lab demo`: one captured rollout end to end, on loopback, with nothing to configure.
// A small ReAct loop (chat completions + a bash tool) talks to the capture proxy, which forwards to
// an engine; the demo then prints the captured calls, the rollout graph and the training trace.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CaptureProxy } from '../capture/proxy.js';
import { trainingTraces, traceToJsonl } from '../capture/rollout.js';
import { startEmbeddedEngine } from '../engine/embedded-engine.js';
import { ScriptedPolicy } from '../engine/policy.js';
import { defineCommand } from './args.js';

const USAGE = `usage: harness-lab demo [--data-dir DIR]

Runs a short tool-using rollout through the capture proxy and prints what was captured.
Engine: the embedded CPU engine (a tiny random-weight Qwen3 model with the real Qwen3 tokenizer and
chat template, built on first use and cached). A scripted policy decides what the agent does; the
engine scores exactly those tokens through the model, so ids and logprobs are the model's own.`;

const DEMO_COMMAND = 'echo "hello from the sandbox" > hello.txt && cat hello.txt';
const DEMO_POLICY = ScriptedPolicy.parse(
  {
    name: 'demo',
    rules: [
      { when: { last_role: 'user', tools: 'bash' }, then: { call: { tool: 'bash', input: DEMO_COMMAND } } },
      { when: { last_role: 'tool' }, then: { say: 'I wrote hello.txt; it says "hello from the sandbox".' } },
    ],
  },
  'demo policy',
);

interface ChatAnswer {
  choices: {
    message: { content: string | null; tool_calls?: { id: string; function: { name: string; arguments: string } }[] };
    finish_reason: string;
  }[];
}

export const demoCommand = defineCommand({
  name: 'demo',
  summary: 'run a short captured rollout end to end on the embedded defaults',
  usage: USAGE,
  flags: { 'data-dir': { type: 'string' } },
  run: async ({ flags }) => {
    const dataDir = flags['data-dir'] ?? mkdtempSync(join(tmpdir(), 'harness-lab-demo-'));
    const say = (line: string) => process.stdout.write(`${line}\n`);
    say('engine: starting the embedded CPU engine (tiny Qwen3; the first run builds and caches the model)...');
    const engine = await startEmbeddedEngine({ policy: DEMO_POLICY });
    const model = ((await (await fetch(`${engine.url}/v1/models`)).json()) as { data: { id: string }[] }).data[0]!.id;
    say(
      `engine: ${model} at ${engine.url} (built in ${Math.round(engine.timings.buildMs)} ms, loaded in ${Math.round(engine.timings.loadMs)} ms)`,
    );
    const proxy = await CaptureProxy.start({ engineUrl: engine.url, model, dataDir });
    const level = await proxy.ensureProbed();
    say(`proxy listening on ${proxy.url}; engine graded '${level}' (logprobs ${proxy.engineReport?.logprobs_mode ?? 'unknown'})`);
    try {
      const session = proxy.sessions.create({ metadata: { harness: 'demo-react' } });
      const workdir = mkdtempSync(join(tmpdir(), 'harness-lab-demo-work-'));
      const messages: Record<string, unknown>[] = [
        { role: 'system', content: 'You are a careful agent. Use the bash tool to act.' },
        { role: 'user', content: 'Create hello.txt containing "hello from the sandbox" and show it.' },
      ];
      const tools = [
        {
          type: 'function',
          function: {
            name: 'bash',
            description: 'Run a shell command',
            parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
          },
        },
      ];
      for (let turn = 0; turn < 4; turn++) {
        const res = await fetch(`${proxy.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${session.session_id}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'demo', messages, tools }),
        });
        if (res.status !== 200) throw new Error(`proxy answered ${res.status}: ${await res.text()}`);
        const message = ((await res.json()) as ChatAnswer).choices[0]!.message;
        messages.push({ role: 'assistant', content: message.content, tool_calls: message.tool_calls });
        if (!message.tool_calls?.length) {
          say(`agent: ${message.content}`);
          break;
        }
        for (const call of message.tool_calls) {
          const { command } = JSON.parse(call.function.arguments) as { command: string };
          const output = execFileSync('bash', ['-c', command], { cwd: workdir, encoding: 'utf8' });
          say(`agent ran: ${command}\n  -> ${output.trim()}`);
          messages.push({ role: 'tool', tool_call_id: call.id, content: output });
        }
      }
      const doc = proxy.sessions.rollout(session.session_id)!;
      say('\ncaptured calls:');
      for (const call of doc.calls) {
        say(
          `  #${call.index} ${call.call_id} ${call.dialect} prompt=${call.prompt_token_ids?.length ?? 0} completion=${call.completion_token_ids?.length ?? 0} ` +
            `tokens, logprobs=${call.logprobs ? 'aligned' : 'missing'}, finish=${call.finish_reason}, ${call.latency_ms} ms`,
        );
      }
      say(`graph: ${doc.graph.nodes.length} node(s), ${doc.graph.roots.length} root(s), ${doc.graph.leaves.length} leaf/leaves`);
      const traces = trainingTraces(doc);
      for (const trace of traces) {
        const trained = trace.loss_mask.filter((m) => m === 1).length;
        say(
          `trace ${trace.trace_id}: ${trace.input_ids.length} tokens, ${trained} trained (mask 1), turns ${JSON.stringify(trace.turn_lengths)}, trainable=${trace.trainable}`,
        );
      }
      const out = join(dataDir, `${session.session_id}.traces.jsonl`);
      writeFileSync(out, traceToJsonl(traces));
      say(`\ndata dir: ${dataDir}\nTrainingTrace JSONL: ${out}`);
      say(`export again any time: harness-lab export --data-dir ${dataDir} --session ${session.session_id} --out traces.jsonl`);
    } finally {
      await proxy.close();
      await engine.close();
    }
    return 0;
  },
});
