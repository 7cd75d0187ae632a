// `harness-lab atif-check ROLLOUT TRAJECTORY`: the viewer's ATIF cross-check on the command line.
// Exit 0 on a match, 1 on a mismatch, 2 on bad usage or unreadable input.
import { AtifParseError } from '../harness/atif.js';
import { RolloutFileError } from '../capture/rollout-file.js';
import { checkTrajectory, loadRollout } from '../report/rollout-loader.js';
import { defineCommand, UsageError } from './args.js';

const USAGE = `usage: harness-lab atif-check ROLLOUT TRAJECTORY [--json]

Compares the captured calls of ROLLOUT (a *.rollout.json document or a captured session file) with the
agent steps of the harness's ATIF trajectory.json: completion tokens per call, auxiliary calls, step-1
prompt tokens, retries and subagents. Exit code 0: match; 1: MISMATCH; 2: bad input.`;

export const atifCheckCommand = defineCommand({
  name: 'atif-check',
  summary: "cross-check a rollout against the harness's ATIF trajectory",
  usage: USAGE,
  flags: { json: { type: 'boolean' } },
  positionals: ['ROLLOUT', 'TRAJECTORY'],
  run: async ({ flags, positionals }) => {
    let result;
    try {
      result = await checkTrajectory(loadRollout(positionals[0]!), positionals[1]!);
    } catch (err) {
      if (err instanceof RolloutFileError || err instanceof AtifParseError) throw new UsageError(err.message);
      throw err;
    }
    if (flags.json) process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
    else {
      const w = (n: number | null) => (n === null ? '—' : String(n));
      const lines = [
        'call  sampled  step  step_tokens  status',
        ...result.rows.map(
          (r) =>
            `${(r.call_index === null ? '—' : `#${r.call_index}`).padEnd(5)} ${w(r.n_sampled).padStart(7)}  ${w(r.step_id).padStart(4)} ` +
            ` ${w(r.step_completion_tokens).padStart(11)}  ${r.status}${r.discarded ? ' (retry)' : ''}`,
        ),
        '',
        ...result.findings,
        '',
        `verdict: ${result.verdict}  ${result.summary}`,
      ];
      process.stdout.write(`${lines.join('\n')}\n`);
    }
    return result.verdict === 'MISMATCH' ? 1 : 0;
  },
});
