// `harness-lab audit BATCH`: the GRPO audit (src/export/audit.ts), as text or JSON, with exit 1 when a
// --fail-on threshold is exceeded so it can gate a training step.
import { BatchFileError } from '../batch/state.js';
import { auditBatch, DEFAULT_MAX_STALENESS, failures, FAIL_ON_KEYS, formatAudit, parseFailOn } from '../export/audit.js';
import { ExportInputError } from '../export/source.js';
import { defineCommand, UsageError } from './args.js';

const USAGE = `usage: harness-lab audit BATCH [--json] [--max-staleness K] [--fail-on KEY=SHARE,...]

Per group: rewards, mean, std, members kept and discarded; groups with no contrast; the share of the batch
that would teach nothing; rollouts per harness; calls sampled more than K policy versions behind the newest
(default K=${DEFAULT_MAX_STALENESS}); tool calls per rollout.

  --json              print the report as JSON
  --max-staleness K   a call is stale when it is more than K versions behind the newest version in the batch
  --fail-on LIST      exit 1 when a share exceeds its threshold; keys: ${FAIL_ON_KEYS.join(', ')}
                      e.g. --fail-on no-contrast-share=0.5,stale-share=0`;

export const auditCommand = defineCommand({
  name: 'audit',
  summary: 'GRPO audit of a batch: contrast, signal, staleness; --fail-on gates training',
  usage: USAGE,
  flags: {
    json: { type: 'boolean' },
    'max-staleness': { type: 'integer', default: DEFAULT_MAX_STALENESS },
    'fail-on': { type: 'string', default: '' },
  },
  positionals: ['BATCH'],
  run: async ({ flags, positionals }) => {
    let failOn;
    try {
      failOn = parseFailOn(flags['fail-on']);
    } catch (err) {
      throw new UsageError((err as Error).message);
    }
    let report;
    try {
      report = auditBatch(positionals[0]!, { maxStaleness: flags['max-staleness'] });
    } catch (err) {
      if (err instanceof BatchFileError || err instanceof ExportInputError) {
        process.stderr.write(`harness-lab audit: ${err.message}\n`);
        return 1;
      }
      throw err;
    }
    const failed = failures(report, failOn);
    if (flags.json) process.stdout.write(`${JSON.stringify({ ...report, fail_on: failOn, failed }, null, 2)}\n`);
    else
      process.stdout.write(
        formatAudit(report) +
          (failed.length ? `FAIL: ${failed.join('; ')}\n` : Object.keys(failOn).length ? 'PASS: every --fail-on threshold holds\n' : ''),
      );
    if (failed.length) {
      if (flags.json) process.stderr.write(`harness-lab audit: FAIL: ${failed.join('; ')}\n`);
      return 1;
    }
    return 0;
  },
});
