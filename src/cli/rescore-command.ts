// `harness-lab rescore ROLLOUT --engine-url URL`: sampler-vs-trainer drift of one rollout
// (src/export/rescore.ts), printed and written as ROLLOUT.rescore.json for the viewer.
import { writeFileSync } from 'node:fs';
import { rescorePathFor } from '../report/rescore-attach.js';
import { DEFAULT_DRIFT_THRESHOLD, formatRescore, RescoreError, rescoreRollout } from '../export/rescore.js';
import { ExportInputError, readRollout } from '../export/source.js';
import { defineCommand, UsageError } from './args.js';

const USAGE = `usage: harness-lab rescore ROLLOUT --engine-url URL [-o OUT] [--model NAME] [--threshold R] [--json]

Teacher-forces every sampled token of ROLLOUT (a captured session file <data-dir>/sessions/<id>.jsonl or a
*.rollout.json) through the engine at URL (vLLM's /v1/completions with prompt_logprobs, or the embedded
engine) under each call's own sampling parameters, and reports per token the ratio
exp(rescored logprob - behaviour logprob recorded at capture), with the mean and the share of tokens whose
ratio is more than R away from 1.

  --engine-url URL  the engine holding the weights to compare against
  -o, --out OUT     where the per-token report goes (default: ROLLOUT with .rescore.json); the viewer
                    colours tokens by it when it sits next to the rollout
  --model NAME      model name for the engine (default: the engine's own)
  --threshold R     |ratio - 1| above R counts as drifted (default ${DEFAULT_DRIFT_THRESHOLD}, PPO's clip range)
  --json            print the whole report as JSON instead of the summary`;

export const rescoreCommand = defineCommand({
  name: 'rescore',
  summary: 'sampler-vs-trainer drift: rescore sampled tokens with current weights',
  usage: USAGE,
  flags: {
    'engine-url': { type: 'string', required: true },
    out: { type: 'string', short: 'o' },
    model: { type: 'string' },
    threshold: { type: 'string' },
    json: { type: 'boolean' },
  },
  positionals: ['ROLLOUT'],
  run: async ({ flags, positionals }) => {
    const threshold = flags.threshold === undefined ? DEFAULT_DRIFT_THRESHOLD : Number(flags.threshold);
    if (!Number.isFinite(threshold) || threshold <= 0)
      throw new UsageError(`--threshold needs a positive number, e.g. 0.2 (got '${flags.threshold}')`);
    const file = positionals[0]!;
    try {
      const report = await rescoreRollout(readRollout(file), { engineUrl: flags['engine-url'], model: flags.model ?? null, threshold });
      const out = flags.out ?? rescorePathFor(file);
      writeFileSync(out, `${JSON.stringify(report)}\n`);
      process.stdout.write(flags.json ? `${JSON.stringify(report, null, 2)}\n` : `${formatRescore(report)}wrote ${out}\n`);
      return 0;
    } catch (err) {
      if (err instanceof RescoreError || err instanceof ExportInputError || (err instanceof Error && err.name === 'RolloutFileError')) {
        process.stderr.write(`harness-lab rescore: ${err.message}\n`);
        return 1;
      }
      throw err;
    }
  },
});
