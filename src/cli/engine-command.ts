// `harness-lab engine`: the embedded CPU engine (node-llama-cpp) as a foreground process.
import { existsSync } from 'node:fs';
import { defineCommand, UsageError } from './args.js';

const USAGE = `usage: harness-lab engine [--host 127.0.0.1] [--port 0] [--model FILE.gguf] [--policy FILE|NAME]
                          [--seed N] [--logprobs-mode processed|raw] [--context-size N] [--threads N]
                          [--allowed-host NAME]...

  --model FILE.gguf      a GGUF model (default: the tiny random-weight Qwen3 model, built on first
                         use and cached in HARNESS_LAB_DATA_DIR or ~/.harness-lab)
  --policy FILE|NAME     scripted policy deciding each turn's text (a JSON file, or a shipped name:
                         see examples/policies/); the model scores exactly those tokens
  --seed N               tiny-model seed, and sampler seed for requests without one (default 0)
  --logprobs-mode MODE   processed (default: after temperature/top-k/top-p, what sampling used)
                         or raw (the model's own distribution)
  --context-size N       context window in tokens (default min(model's, 32768))
  --threads N            CPU threads (default 1 for the tiny model, else all math cores)
  --host HOST            bind address (default 127.0.0.1)
  --port N               port (default 0: any free port)
  --allowed-host NAME    a name clients reach the engine by beyond loopback and the bound address
                         (repeatable); any other Host header, and any web page's Origin, is refused`;

export const engineCommand = defineCommand({
  name: 'engine',
  summary: 'run the embedded CPU inference engine (vLLM-compatible API)',
  usage: USAGE,
  flags: {
    host: { type: 'string', default: '127.0.0.1' },
    port: { type: 'integer', default: 0 },
    'allowed-host': { type: 'string', multiple: true },
    model: { type: 'string' },
    policy: { type: 'string' },
    seed: { type: 'integer', default: 0 },
    'logprobs-mode': { type: 'string', default: 'processed' },
    'context-size': { type: 'integer', default: 0 },
    threads: { type: 'integer', default: 0 },
  },
  run: async ({ flags }) => {
    const mode = flags['logprobs-mode'];
    if (mode !== 'processed' && mode !== 'raw') throw new UsageError(`--logprobs-mode must be processed or raw, got '${mode}'`);
    if (flags.model !== undefined && !existsSync(flags.model)) throw new UsageError(`--model: no such file '${flags.model}'`);
    const contextSize = flags['context-size'];
    const threads = flags.threads;
    const { startEmbeddedEngine } = await import('../engine/embedded-engine.js');
    let engine;
    try {
      engine = await startEmbeddedEngine({
        host: flags.host,
        port: flags.port,
        allowedHosts: flags['allowed-host'],
        seed: flags.seed,
        logprobsMode: mode,
        ...(flags.model ? { modelPath: flags.model } : {}),
        ...(flags.policy ? { policy: flags.policy } : {}),
        ...(contextSize ? { contextSize } : {}),
        ...(threads ? { threads } : {}),
      });
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      if (/policy/i.test(message)) throw new UsageError(message);
      throw err;
    }
    process.stdout.write(`engine listening on ${engine.url}\n`);
    const policy = engine.engine.policySource;
    process.stderr.write(
      `[info] model ${engine.engine.modelName} (${engine.modelPath}), logprobs ${mode}${policy ? `, policy ${policy}` : ''}; ` +
        `build ${Math.round(engine.timings.buildMs)} ms, load ${Math.round(engine.timings.loadMs)} ms\n`,
    );
    await new Promise<void>((resolve) => {
      process.once('SIGINT', resolve);
      process.once('SIGTERM', resolve);
    });
    await engine.close();
    return 0;
  },
});
