// `harness-lab report ROLLOUT -o report.html`: the rollout viewer as one self-contained HTML file.
import { writeFileSync } from 'node:fs';
import { fetchTokenTexts } from '../capture/token-text.js';
import { idsWithoutText } from '../protocol/viewer-data.js';
import { BatchFileError } from '../batch/state.js';
import { buildGroupReportHtml } from '../report/group-html.js';
import { buildGroupView, GroupViewError } from '../report/group-view.js';
import { modelNamesOf, offlineTokenTexts } from '../report/offline-token-texts.js';
import { buildReportHtml, loadViewerAssets } from '../report/report-html.js';
import { withoutSessionKey } from '../report/redact-session.js';
import { checkTrajectory, findTrajectory, loadRollout } from '../report/rollout-loader.js';
import { defineCommand, UsageError } from './args.js';

const USAGE = `usage: harness-lab report ROLLOUT -o report.html [--trajectory trajectory.json] [--engine URL] [--model NAME]
       harness-lab report --batch DIR --group G -o group.html
       harness-lab report ROLLOUT --forks [--forks-dir DIR ...] -o forks.html

ROLLOUT is a rollout document (*.rollout.json), a captured session file (<data-dir>/sessions/<id>.jsonl)
or TrainingTrace lines (*.jsonl from 'harness-lab export'). The report inlines the viewer and the data:
it opens in any browser, offline.

  --trajectory FILE  the harness's ATIF trajectory.json for the cross-check (default: one found next to ROLLOUT)
  --no-trajectory    do not look for a trajectory
  --engine URL       fetch prompt-token texts from this engine's /detokenize (default, and for what the
                     engine cannot name: the model's tokenizer on this machine, i.e. the embedded engine's
                     GGUF or a tokenizer.json in the Hugging Face cache; else token ids, saying so)
  --model NAME       model name for /detokenize (vLLM)
  --batch DIR        a batch directory: with --group, the group view instead of one rollout
  --group G          the group to show: its members side by side, reward histograms of the batch and per
                     harness, where two members first diverge, behaviour metrics
  --forks            ROLLOUT and its forks (\`harness-lab replay --from N\`) side by side in the group
                     view, with where each fork parts from the original
  --forks-dir DIR    where to look for the forks (default: the task folder of ROLLOUT's run)`;

export const reportCommand = defineCommand({
  name: 'report',
  summary: 'write a self-contained HTML rollout viewer for sharing',
  usage: USAGE,
  flags: {
    out: { type: 'string', short: 'o', required: true },
    trajectory: { type: 'string' },
    'no-trajectory': { type: 'boolean' },
    engine: { type: 'string' },
    model: { type: 'string' },
    batch: { type: 'string' },
    group: { type: 'string' },
    forks: { type: 'boolean' },
    'forks-dir': { type: 'string', multiple: true },
  },
  positionals: ['ROLLOUT?'],
  run: async ({ flags, positionals }) => {
    if (flags.batch !== undefined || flags.group !== undefined) {
      if (flags.batch === undefined || flags.group === undefined)
        throw new UsageError('--batch and --group go together', { showUsage: true });
      if (positionals.length) throw new UsageError('give either ROLLOUT or --batch DIR --group G', { showUsage: true });
      let group;
      try {
        group = buildGroupView(flags.batch, flags.group);
      } catch (err) {
        if (err instanceof BatchFileError || err instanceof GroupViewError) {
          process.stderr.write(`harness-lab report: ${err.message}\n`);
          return 1;
        }
        throw err;
      }
      const html = buildGroupReportHtml(group, loadViewerAssets());
      writeFileSync(flags.out, html);
      const first = group.focus_pair === null ? null : group.divergences[group.focus_pair]!;
      process.stdout.write(
        `wrote ${flags.out} (${(html.length / 1024).toFixed(0)} KiB): group ${group.group_id}, ${group.members.length} members, rewards [${group.rewards.join(', ')}]` +
          `${group.teaches_nothing ? `; teaches nothing: ${group.teaches_nothing}` : ''}${first?.call != null ? `; ${first.a} and ${first.b} diverge at call ${first.call + 1}` : ''}\n`,
      );
      return 0;
    }
    if (!positionals.length) throw new UsageError('ROLLOUT is required (or --batch DIR --group G)', { showUsage: true });
    if (flags.forks) {
      const { forkMembers } = await import('../replay/forks.js');
      const { buildForkGroupView } = await import('../report/group-view.js');
      const { original, forks } = forkMembers(positionals[0]!, flags['forks-dir']);
      if (!forks.length) {
        process.stderr.write(
          `harness-lab report: no fork of ${original.rolloutFile} found (run \`harness-lab replay ROLLOUT --from N --engine-url URL\`, or pass --forks-dir)\n`,
        );
        return 1;
      }
      const view = buildForkGroupView(original, forks);
      writeFileSync(flags.out, buildGroupReportHtml(view, loadViewerAssets()));
      const parts = view.divergences.slice(0, forks.length).map((d) => `${d.b} parts at call ${d.call === null ? '-' : d.call}`);
      process.stdout.write(`wrote ${flags.out}: the original and ${forks.length} fork(s) side by side; ${parts.join('; ')}\n`);
      return 0;
    }
    const rollout = loadRollout(positionals[0]!);
    const trajectory = flags['no-trajectory'] ? null : (flags.trajectory ?? (rollout.doc ? findTrajectory(rollout.path) : null));
    if (trajectory) {
      rollout.data.atif = await checkTrajectory(rollout, trajectory);
      process.stdout.write(`ATIF cross-check against ${trajectory}: ${rollout.data.atif.summary}\n`);
    }
    if (flags.engine) {
      const ids = idsWithoutText(rollout.data);
      const r = await fetchTokenTexts(flags.engine, ids, flags.model ? { model: flags.model } : {});
      rollout.data.token_texts = { ...rollout.data.token_texts, ...r.texts };
      if (r.problem) process.stderr.write(`harness-lab report: ${r.problem}\n`);
    }
    const rest = idsWithoutText(rollout.data);
    if (rest.length) {
      const r = await offlineTokenTexts([...(flags.model ? [flags.model] : []), ...modelNamesOf(rollout.data, rollout.doc)], rest);
      rollout.data.token_texts = { ...rollout.data.token_texts, ...r.texts };
      if (r.source) process.stdout.write(`prompt-token texts from ${r.source.path} (${Object.keys(r.texts).length} ids)\n`);
      if (r.problem) process.stderr.write(`harness-lab report: ${r.problem}\n`);
    }
    const html = buildReportHtml(
      rollout.data.session_id ? withoutSessionKey(rollout.data, rollout.data.session_id) : rollout.data,
      loadViewerAssets(),
    );
    writeFileSync(flags.out, html);
    const tokens = rollout.data.turns.reduce((a, t) => a + t.prompt_ids.length + t.sampled_ids.length, 0);
    process.stdout.write(
      `wrote ${flags.out} (${(html.length / 1024).toFixed(0)} KiB): ${rollout.data.turns.length} call(s), ${tokens} token positions\n`,
    );
    return 0;
  },
});
