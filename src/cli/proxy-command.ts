// `harness-lab proxy`: the capture proxy as a foreground process.
import { CaptureProxy, ProxyConfigError } from '../capture/proxy.js';
import type { CliCommand } from './main.js';
import { intFlag, parseFlags, UsageError, withUsage } from './args.js';

const USAGE = `usage: harness-lab proxy --engine-url URL --model NAME [--host 127.0.0.1] [--port 0]
                         [--admin-key K] [--engine-api-key K] [--data-dir DIR] [--max-model-calls N]
                         [--max-output-tokens N]

  --engine-url URL       OpenAI-compatible engine (vLLM, SGLang, harness-lab engine); /v1 optional
  --model NAME           model name served by the engine (overwrites whatever harnesses send)
  --host HOST            bind address (default 127.0.0.1; beyond loopback needs an admin key)
  --port N               port (default 0: any free port)
  --admin-key K          key for /sessions routes (or HARNESS_LAB_ADMIN_KEY)
  --engine-api-key K     credential the engine wants, sent as Authorization: Bearer (or
                         HARNESS_LAB_ENGINE_API_KEY); never recorded or logged
  --data-dir DIR         durable capture store (default: in memory only)
  --max-model-calls N    default per-session model-call budget (0 = unlimited)
  --max-output-tokens N  cap on output tokens per call (default 8192)`;

export const proxyCommand: CliCommand = {
  summary: 'run the capture proxy in front of an inference engine',
  run: (argv) =>
    withUsage(async () => {
      const { values } = parseFlags(
        argv,
        {
          'engine-url': { type: 'string' },
          model: { type: 'string' },
          host: { type: 'string' },
          port: { type: 'string' },
          'admin-key': { type: 'string' },
          'engine-api-key': { type: 'string' },
          'data-dir': { type: 'string' },
          'max-model-calls': { type: 'string' },
          'max-output-tokens': { type: 'string' },
        },
        USAGE,
      );
      if (values.help) {
        process.stdout.write(`${USAGE}\n`);
        return 0;
      }
      if (!values['engine-url']) throw new UsageError(`--engine-url is required\n\n${USAGE}`);
      if (!values.model) throw new UsageError(`--model is required\n\n${USAGE}`);
      let proxy: CaptureProxy;
      try {
        proxy = await CaptureProxy.start({
          engineUrl: values['engine-url'],
          model: values.model,
          host: values.host ?? '127.0.0.1',
          port: intFlag(values.port, 'port', 0),
          adminKey: values['admin-key'] ?? process.env.HARNESS_LAB_ADMIN_KEY ?? undefined,
          engineApiKey: values['engine-api-key'] ?? (process.env.HARNESS_LAB_ENGINE_API_KEY || undefined),
          dataDir: values['data-dir'],
          maxModelCalls: intFlag(values['max-model-calls'], 'max-model-calls', 0),
          maxOutputTokens: intFlag(values['max-output-tokens'], 'max-output-tokens', 8192),
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
      process.stderr.write(`[info] forwarding to ${proxy.engineUrl} as model ${values.model}; create a session with POST ${proxy.url}/sessions\n`);
      await new Promise<void>((resolve) => {
        const stop = () => resolve();
        process.once('SIGINT', stop);
        process.once('SIGTERM', stop);
      });
      await proxy.close();
      return 0;
    }),
};
