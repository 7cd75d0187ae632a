// `harness-lab replay-load FILE --engine-url URL --speed N`: captured traffic (`export --format replay`)
// issued again against an engine at N times the recorded pace, as a load test (src/replay/load.ts).
import { writeFileSync } from 'node:fs';
import { formatLoadReport, LoadFileError, readLoadFile, reissue } from '../replay/load.js';
import { defineCommand, UsageError } from './args.js';

const USAGE = `usage: harness-lab replay-load FILE --engine-url URL [--speed N] [--model M] [--any-length] [-o REPORT.json]

Issues the engine requests of FILE (written by \`harness-lab export --format replay\`) against the engine
at URL, each at its recorded offset divided by N, as concurrently as they were captured, and reports
latency percentiles, sampled tokens per second and how late requests started. Exit 1 when a request failed.

  --speed N        N times the recorded pace (default 1; 10 = ten times faster; may be fractional)
  --model M        send this model name (default: the recorded one)
  --any-length     let the engine stop where it likes (default: the recorded number of sampled tokens,
                   with ignore_eos, so the engine does the same work as when it was captured)
  -o, --out FILE   the per-request results as JSON
  --engine-api-key K   credential for URL (or HARNESS_LAB_ENGINE_API_KEY)`;

export const replayLoadCommand = defineCommand({
  name: 'replay-load',
  summary: 'load-test an engine with captured requests at N times their recorded pace',
  usage: USAGE,
  flags: {
    'engine-url': { type: 'string', required: true },
    'engine-api-key': { type: 'string' },
    speed: { type: 'string', default: '1' },
    model: { type: 'string' },
    'any-length': { type: 'boolean' },
    out: { type: 'string', short: 'o' },
  },
  positionals: ['FILE'],
  run: async ({ flags, positionals }) => {
    const speed = Number(flags.speed);
    if (!Number.isFinite(speed) || speed <= 0) throw new UsageError(`--speed needs a number above 0, got '${flags.speed}'`);
    try {
      const { span_ms, requests } = readLoadFile(positionals[0]!);
      const report = await reissue(requests, span_ms, {
        engineUrl: flags['engine-url'],
        speed,
        model: flags.model,
        apiKey: flags['engine-api-key'] ?? (process.env.HARNESS_LAB_ENGINE_API_KEY || undefined),
        sameWork: !flags['any-length'],
      });
      if (flags.out) writeFileSync(flags.out, `${JSON.stringify(report, null, 2)}\n`);
      process.stdout.write(`${formatLoadReport(report)}\n`);
      return report.failed ? 1 : 0;
    } catch (err) {
      if (err instanceof LoadFileError) {
        process.stderr.write(`harness-lab replay-load: ${err.message}\n`);
        return 1;
      }
      throw err;
    }
  },
});
