// `harness-lab verify ROLLOUT`: the capture against the engine that produced it, token for token
// (src/replay/verify.ts), printed like `rescore` and written as ROLLOUT.verify.json.
import { existsSync, writeFileSync } from 'node:fs';
import { DEFAULT_VERIFY_TOLERANCE, formatVerify, VerifyError, verifyRollout } from '../replay/verify.js';
import { loadReplaySource, ReplaySourceError } from '../replay/source.js';
import { defineCommand, UsageError } from './args.js';

const USAGE = `usage: harness-lab verify ROLLOUT [--engine-url URL] [--model NAME] [--model-file FILE.gguf] [--seed N]
                          [--tolerance NATS] [-o OUT] [--json]

Checks a captured rollout (a rollout folder or a *.rollout.json) against the engine, token for token. Each
recorded call's prompt ids go back to the engine as they are (token in: the engine must accept them),
its sampled ids are scored by teacher forcing (/v1/completions with prompt_logprobs) and every token's
logprob must be within NATS of the recorded one; calls sampled at temperature 0 must generate their
recorded ids again. Exit 0 when every call passes, 1 otherwise (the call and the token position named).

  --engine-url URL  the engine (vLLM or the embedded one); without it the embedded engine is started
                    with the model the rollout was captured on (the tiny model, or --model-file)
  --model NAME      model name to send to the engine (default: the engine's own)
  --model-file F    GGUF file of the captured model, for the embedded engine
  --seed N          tiny-model seed of the embedded engine (default 0, as \`run\` uses)
  --tolerance NATS  absolute logprob tolerance (default ${DEFAULT_VERIFY_TOLERANCE}: the embedded engine is
                    deterministic; vLLM on a GPU moves by ~1e-2 between batches, use 0.05)
  -o, --out OUT     the report (default: ROLLOUT with .verify.json)
  --json            print the whole report as JSON`;

export const verifyCommand = defineCommand({
  name: 'verify',
  summary: 'check a captured rollout against its engine, token for token',
  usage: USAGE,
  flags: {
    'engine-url': { type: 'string' },
    'engine-api-key': { type: 'string' },
    model: { type: 'string' },
    'model-file': { type: 'string' },
    seed: { type: 'integer', default: 0 },
    tolerance: { type: 'string' },
    out: { type: 'string', short: 'o' },
    json: { type: 'boolean' },
  },
  positionals: ['ROLLOUT'],
  run: async ({ flags, positionals }) => {
    const tolerance = flags.tolerance === undefined ? DEFAULT_VERIFY_TOLERANCE : Number(flags.tolerance);
    if (!Number.isFinite(tolerance) || tolerance < 0)
      throw new UsageError(`--tolerance needs a number of nats, e.g. 0.001 (got '${flags.tolerance}')`);
    if (flags['model-file'] !== undefined && !existsSync(flags['model-file']))
      throw new UsageError(`--model-file: no such file '${flags['model-file']}'`);
    let close: (() => Promise<void>) | undefined;
    try {
      const source = loadReplaySource(positionals[0]!);
      let engineUrl = flags['engine-url'];
      if (!engineUrl) {
        const { startEmbeddedEngine } = await import('../engine/embedded-engine.js');
        const { TINY_MODEL_NAME } = await import('../engine/tiny-model.js');
        if (!flags['model-file'] && source.model !== TINY_MODEL_NAME) {
          throw new VerifyError(
            `the rollout was captured on ${source.model ?? 'an unknown model'}, not the embedded tiny model; pass --engine-url URL of that engine, or --model-file FILE.gguf`,
          );
        }
        process.stderr.write(`starting the embedded engine (${flags['model-file'] ?? `${TINY_MODEL_NAME}, seed ${flags.seed}`})\n`);
        const engine = await startEmbeddedEngine({
          seed: flags.seed,
          ...(flags['model-file'] ? { modelPath: flags['model-file'], modelName: source.model ?? undefined } : {}),
        });
        close = () => engine.close();
        engineUrl = engine.url;
      }
      const report = await verifyRollout(source, {
        engineUrl,
        model: flags.model ?? null,
        tolerance,
        apiKey: flags['engine-api-key'] ?? (process.env.HARNESS_LAB_ENGINE_API_KEY || undefined),
      });
      const out = flags.out ?? `${source.path.replace(/\.rollout\.json$|\.json$/, '')}.verify.json`;
      writeFileSync(out, `${JSON.stringify(report, null, 2)}\n`);
      process.stdout.write(flags.json ? `${JSON.stringify(report, null, 2)}\n` : `${formatVerify(report)}wrote ${out}\n`);
      return report.ok ? 0 : 1;
    } catch (err) {
      if (err instanceof VerifyError || err instanceof ReplaySourceError) {
        process.stderr.write(`harness-lab verify: ${err.message}\n`);
        return 1;
      }
      throw err;
    } finally {
      await close?.();
    }
  },
});
