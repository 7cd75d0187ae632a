// `harness-lab proxy`: the capture proxy as a foreground process.
import { CaptureProxy, ProxyConfigError } from '../capture/proxy.js';
import { FULL_RENDER_CHECKS, type FullRenderCheck } from '../capture/render/bridge.js';
import { RENDER_MODES, type RenderMode } from '../capture/render/mode.js';
import { defineCommand, UsageError } from './args.js';

const USAGE = `usage: harness-lab proxy --engine-url URL --model NAME [--host 127.0.0.1] [--port 0]
                         [--admin-key K] [--engine-api-key K] [--data-dir DIR] [--max-model-calls N]
                         [--max-output-tokens N] [--render auto|proxy|engine] [--render-model PATH]
                         [--full-render-check sampled|always|off] [--allowed-host NAME]...

  --engine-url URL       OpenAI-compatible engine (vLLM, SGLang, harness-lab engine); /v1 optional
  --model NAME           model name served by the engine (overwrites whatever harnesses send)
  --host HOST            bind address (default 127.0.0.1; beyond loopback needs an admin key)
  --port N               port (default 0: any free port)
  --allowed-host NAME    a name clients reach the proxy by (a Service name); requests with any other
                         Host than loopback, the bound address or these are refused (repeatable)
  --admin-key K          key for /sessions routes (or HARNESS_LAB_ADMIN_KEY)
  --engine-api-key K     credential the engine wants, sent as Authorization: Bearer (or
                         HARNESS_LAB_ENGINE_API_KEY); never recorded or logged
  --data-dir DIR         durable capture store (default: in memory only)
  --max-model-calls N    default per-session model-call budget (0 = unlimited)
  --max-output-tokens N  cap on output tokens per call (default 8192)
  --render MODE          who renders the chat template: proxy (token in, token out: one training
                         sample per rollout; needs the model's tokenizer and an engine that takes
                         token ids), engine (chat completions), auto (default: proxy where possible).
                         See docs/token-in.md
  --render-model PATH    model folder (tokenizer.json, tokenizer_config.json) or GGUF to render with
                         (default: the engine's /v1/models root, or the model name in the HF cache)
  --full-render-check W  when a bridged prompt is compared with a full render of its messages (the
                         drift in render.full_render): sampled (default: a session's first bridge,
                         then every 16th once the prompt grew by a quarter), always (every turn;
                         its cost follows the context), off`;

export const proxyCommand = defineCommand({
  name: 'proxy',
  summary: 'run the capture proxy in front of an inference engine',
  usage: USAGE,
  flags: {
    'engine-url': { type: 'string', required: true },
    model: { type: 'string', required: true },
    host: { type: 'string', default: '127.0.0.1' },
    port: { type: 'integer', default: 0 },
    'allowed-host': { type: 'string', multiple: true },
    'admin-key': { type: 'string' },
    'engine-api-key': { type: 'string' },
    'data-dir': { type: 'string' },
    'max-model-calls': { type: 'integer', default: 0 },
    'max-output-tokens': { type: 'integer', default: 8192 },
    render: { type: 'string', default: 'auto' },
    'render-model': { type: 'string' },
    'full-render-check': { type: 'string', default: 'sampled' },
  },
  run: async ({ flags }) => {
    const render = flags.render as RenderMode;
    if (!RENDER_MODES.includes(render)) throw new UsageError(`--render must be one of ${RENDER_MODES.join(', ')}, not '${flags.render}'`);
    const fullRenderCheck = flags['full-render-check'] as FullRenderCheck;
    if (!FULL_RENDER_CHECKS.includes(fullRenderCheck))
      throw new UsageError(`--full-render-check must be one of ${FULL_RENDER_CHECKS.join(', ')}, not '${fullRenderCheck}'`);
    let proxy: CaptureProxy;
    try {
      proxy = await CaptureProxy.start({
        engineUrl: flags['engine-url'],
        model: flags.model,
        host: flags.host,
        port: flags.port,
        allowedHosts: flags['allowed-host'],
        adminKey: flags['admin-key'] ?? process.env.HARNESS_LAB_ADMIN_KEY ?? undefined,
        engineApiKey: flags['engine-api-key'] ?? (process.env.HARNESS_LAB_ENGINE_API_KEY || undefined),
        dataDir: flags['data-dir'],
        maxModelCalls: flags['max-model-calls'],
        maxOutputTokens: flags['max-output-tokens'],
        render,
        ...(flags['render-model'] ? { renderModel: flags['render-model'] } : {}),
        fullRenderCheck,
        logger: {
          info: (m) => process.stderr.write(`[info] ${m}\n`),
          warn: (m) => process.stderr.write(`[warn] ${m}\n`),
          error: (m) => process.stderr.write(`[error] ${m}\n`),
        },
      });
    } catch (err) {
      if (err instanceof ProxyConfigError) throw new UsageError(err.message);
      throw err;
    }
    process.stdout.write(`proxy listening on ${proxy.url}\n`);
    process.stderr.write(
      `[info] forwarding to ${proxy.engineUrl} as model ${flags.model}; create a session with POST ${proxy.url}/sessions\n`,
    );
    await new Promise<void>((resolve) => {
      const stop = () => resolve();
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
    });
    await proxy.close();
    return 0;
  },
});
