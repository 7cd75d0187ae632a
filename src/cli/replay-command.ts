// `harness-lab replay ROLLOUT`: the real harness again, every model call answered from the record;
// with --from N --engine-url URL a fork (the record up to call N, the live engine from there).
import { resolve } from 'node:path';
import type { PinnedSampling } from '../capture/types.js';
import { formatReplayReport, ReplayError, runReplay } from '../replay/replay-run.js';
import { loadReplaySource, ReplaySourceError } from '../replay/source.js';
import { defineCommand, UsageError } from './args.js';

const USAGE = `usage: harness-lab replay ROLLOUT [--harness H] [--sandbox docker|local] [--task DIR] [--out DIR]
                          [--from N --engine-url URL [--model M] [--seed S] [--temperature T] [--max-tokens N]]
                          [--render-model P] [--rollout ID] [--json]

Runs the real harness again in a fresh sandbox on ROLLOUT's task (a rollout folder of \`harness-lab rollout\`,
its session.rollout.json, a replay fixture *.replay.json.gz, or a load file of \`export --format replay\`
holding a rollout captured token in). The capture proxy answers every model
call from the record, with no engine (streamed answers are streamed, in the harness's dialect). Each
call is matched against the recorded ones and its rung is printed:
  exact      the same messages, tools and request fields
  tolerated  only run-to-run noise differs (ids, timestamps, dates, temp paths), listed field by
             field; tool results that differ from the recorded ones are listed too
  NO MATCH   the replay halts: the harness gets an error in its dialect, the first differing field is
             printed as a diff and the command exits 1
The replay is a new session linked to the original (metadata replay_of), written with replay.json under
--out. Exit 0 when every call matched, every recorded call was asked for and the reward is the same.

  --harness H       run another harness (or version) than the recorded one
  --sandbox KIND    docker (default) or local (no isolation)
  --task DIR        the task folder (default: from the rollout's metadata, or examples/tasks/<name>)
  --out DIR         where the replay's rollout folder goes (default ./harness-lab-rollouts)
  --from N          fork: calls 0..N-1 from the record, call N on from --engine-url (exit 0 when the
                    recorded calls matched)
  --engine-url URL  the live engine of a fork (--engine-api-key K, or HARNESS_LAB_ENGINE_API_KEY)
  --model M         served model for the fork's live calls (default: the recorded one)
  --seed S, --temperature T   sampling pinned on the fork's calls (compare settings from one context)
  --max-tokens N    cap on each live call's output tokens
  --render-model P  a token-in capture's model folder or GGUF (tokenizer + chat template; default: found
                    from the recorded model). A token-in capture replays token in: each prompt is built
                    again by the bridge and must equal the recorded prompt ids, token for token
  --rollout ID      which rollout of a load file holding several captured token in (its rollout_id)
  --timeout SECONDS wall clock for the agent (default: the task's)
  --json            print the report as JSON`;

export const replayCommand = defineCommand({
  name: 'replay',
  summary: 'run a harness again on a captured rollout, answered from the record; or fork it',
  usage: USAGE,
  flags: {
    harness: { type: 'string' },
    sandbox: { type: 'string', default: 'docker' },
    task: { type: 'string' },
    out: { type: 'string', default: 'harness-lab-rollouts' },
    from: { type: 'integer' },
    'engine-url': { type: 'string' },
    'engine-api-key': { type: 'string' },
    model: { type: 'string' },
    seed: { type: 'integer' },
    temperature: { type: 'string' },
    'max-tokens': { type: 'integer' },
    'render-model': { type: 'string' },
    rollout: { type: 'string' },
    timeout: { type: 'integer' },
    json: { type: 'boolean' },
    verbose: { type: 'boolean', short: 'v' },
  },
  positionals: ['ROLLOUT'],
  run: async ({ flags, positionals }) => {
    const sandbox = flags.sandbox;
    if (sandbox !== 'docker' && sandbox !== 'local') throw new UsageError(`--sandbox must be docker or local, got '${sandbox}'`);
    const forking = flags.from !== undefined;
    if (forking !== (flags['engine-url'] !== undefined))
      throw new UsageError('a fork needs both --from N and --engine-url URL (a plain replay takes neither)');
    if (
      !forking &&
      (flags.model !== undefined || flags.seed !== undefined || flags.temperature !== undefined || flags['max-tokens'] !== undefined)
    )
      throw new UsageError("--model, --seed, --temperature and --max-tokens set a fork's live calls; add --from N --engine-url URL");
    const sampling: PinnedSampling = {};
    if (flags.seed !== undefined) sampling.seed = flags.seed;
    if (flags.temperature !== undefined) {
      const t = Number(flags.temperature);
      if (!Number.isFinite(t) || t <= 0) throw new UsageError(`--temperature needs a number above 0, got '${flags.temperature}'`);
      sampling.temperature = t;
    }
    try {
      const source = loadReplaySource(positionals[0]!, { rollout: flags.rollout });
      const report = await runReplay({
        source,
        taskDir: flags.task,
        harness: flags.harness,
        sandbox,
        outDir: resolve(flags.out),
        timeoutSec: flags.timeout || undefined,
        handleSignals: true,
        renderModel: flags['render-model'],
        log: flags.verbose ? (l) => process.stderr.write(`  ${l}\n`) : undefined,
        fork: forking
          ? {
              fromTurn: flags.from!,
              engineUrl: flags['engine-url']!,
              engineApiKey: flags['engine-api-key'] ?? (process.env.HARNESS_LAB_ENGINE_API_KEY || undefined),
              model: flags.model,
              sampling: Object.keys(sampling).length ? sampling : undefined,
              maxTokens: flags['max-tokens'] || undefined,
            }
          : undefined,
      });
      process.stdout.write(flags.json ? `${JSON.stringify(report, null, 2)}\n` : `${formatReplayReport(report)}\n`);
      return report.ok ? 0 : 1;
    } catch (err) {
      if (err instanceof ReplaySourceError || err instanceof ReplayError) {
        process.stderr.write(`harness-lab replay: ${err.message}\n`);
        return 1;
      }
      throw err;
    }
  },
});
