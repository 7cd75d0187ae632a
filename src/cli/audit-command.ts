// `harness-lab audit BATCH`: the GRPO audit (src/train/audit.ts), as text or JSON, with exit 1 when a
// --fail-on threshold is exceeded so it can gate a training step.
import { BatchFileError } from '../batch/state.js';
import { auditBatch, DEFAULT_MAX_STALENESS, failures, FAIL_ON_KEYS, formatAudit, parseFailOn } from '../train/audit.js';
import { ExportInputError } from '../train/source.js';
import type { CliCommand } from './main.js';
import { intFlag, parseFlags, UsageError, withUsage } from './args.js';

const USAGE = `usage: harness-lab audit BATCH [--json] [--max-staleness K] [--fail-on KEY=SHARE,...]

Per group: rewards, mean, std, members kept and discarded; groups with no contrast; the share of the batch
that would teach nothing; rollouts per harness; calls sampled more than K policy versions behind the newest
(default K=${DEFAULT_MAX_STALENESS}); tool calls per rollout.

  --json              print the report as JSON
  --max-staleness K   a call is stale when it is more than K versions behind the newest version in the batch
  --fail-on LIST      exit 1 when a share exceeds its threshold; keys: ${FAIL_ON_KEYS.join(', ')}
                      e.g. --fail-on no-contrast-share=0.5,stale-share=0`;

export const auditCommand: CliCommand = {
  summary: 'GRPO audit of a batch: contrast, signal share, staleness; --fail-on gates training',
  run: (argv) =>
    withUsage(async () => {
      const { values, positionals } = parseFlags(argv, { json: { type: 'boolean' }, 'max-staleness': { type: 'string' }, 'fail-on': { type: 'string' } }, USAGE);
      if (values.help) {
        process.stdout.write(`${USAGE}\n`);
        return 0;
      }
      if (positionals.length !== 1) throw new UsageError(`expected one BATCH directory, got ${positionals.length}\n\n${USAGE}`);
      let failOn;
      try {
        failOn = parseFailOn(values['fail-on'] ?? '');
      } catch (err) {
        throw new UsageError((err as Error).message);
      }
      const maxStaleness = intFlag(values['max-staleness'], 'max-staleness', DEFAULT_MAX_STALENESS);
      let report;
      try {
        report = auditBatch(positionals[0]!, { maxStaleness });
      } catch (err) {
        if (err instanceof BatchFileError || err instanceof ExportInputError) {
          process.stderr.write(`harness-lab audit: ${err.message}\n`);
          return 1;
        }
        throw err;
      }
      const failed = failures(report, failOn);
      if (values.json) process.stdout.write(`${JSON.stringify({ ...report, fail_on: failOn, failed }, null, 2)}\n`);
      else process.stdout.write(formatAudit(report) + (failed.length ? `FAIL: ${failed.join('; ')}\n` : Object.keys(failOn).length ? 'PASS: every --fail-on threshold holds\n' : ''));
      if (failed.length) {
        if (values.json) process.stderr.write(`harness-lab audit: FAIL: ${failed.join('; ')}\n`);
        return 1;
      }
      return 0;
    }),
};
