// A capture proxy in its own process for the token-in bench, started with the render options the
// bench compares (the CLI's flags may not say them all): prints `proxy listening on URL` once
// listening; exits when stdin closes or on SIGTERM/SIGINT.
//   node --import tsx bench/capture-proxy-process.ts --engine-url URL --model NAME --data-dir DIR
//     --render proxy|engine [--render-model GGUF] [--full-render-check always|sampled|off]
import { parseArgs } from 'node:util';
import { CaptureProxy } from '../src/capture/proxy.js';

const { values } = parseArgs({
  options: {
    'engine-url': { type: 'string' },
    model: { type: 'string' },
    'data-dir': { type: 'string' },
    render: { type: 'string', default: 'engine' },
    'render-model': { type: 'string' },
    'full-render-check': { type: 'string', default: 'sampled' },
  },
});
const render = values.render;
if (!values['engine-url'] || !values.model || !values['data-dir'] || (render !== 'proxy' && render !== 'engine')) {
  process.stderr.write(
    'usage: capture-proxy-process.ts --engine-url URL --model NAME --data-dir DIR --render proxy|engine [--render-model GGUF] [--full-render-check always|sampled|off]\n',
  );
  process.exit(2);
}

async function main(): Promise<void> {
  const proxy = await CaptureProxy.start({
    engineUrl: values['engine-url']!,
    model: values.model!,
    dataDir: values['data-dir']!,
    captureLevel: 'tokens',
    render: render as 'proxy' | 'engine',
    ...(values['render-model'] ? { renderModel: values['render-model'] } : {}),
    fullRenderCheck: values['full-render-check'] as 'always' | 'sampled' | 'off',
  });
  // Resolved before the first measured call: loading the tokenizer is start-up, not a turn's cost.
  if (render === 'proxy') await proxy.tokenInEngine();
  process.stdout.write(`proxy listening on ${proxy.url}\n`);
  const stop = () => void proxy.close().finally(() => process.exit(0));
  process.stdin.on('end', stop);
  process.stdin.resume();
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((err: unknown) => {
  process.stderr.write(`capture-proxy-process: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
