// `harness-lab report ROLLOUT -o report.html`: the rollout viewer as one self-contained HTML file.
import { writeFileSync } from 'node:fs';
import { fetchTokenTexts } from '../capture/token-text.js';
import { idsWithoutText } from '../protocol/viewer-data.js';
import { modelNamesOf, offlineTokenTexts } from '../report/offline-token-texts.js';
import { buildReportHtml, loadViewerAssets } from '../report/report-html.js';
import { withoutSessionKey } from '../report/redact-session.js';
import { checkTrajectory, findTrajectory, loadRollout } from '../report/rollout-loader.js';
import { defineCommand } from './args.js';

const USAGE = `usage: harness-lab report ROLLOUT -o report.html [--trajectory trajectory.json] [--engine URL] [--model NAME]

ROLLOUT is a rollout document (*.rollout.json), a captured session file (<data-dir>/sessions/<id>.jsonl)
or TrainingTrace lines (*.jsonl from 'harness-lab export'). The report inlines the viewer and the data:
it opens in any browser, offline.

  --trajectory FILE  the harness's ATIF trajectory.json for the cross-check (default: one found next to ROLLOUT)
  --no-trajectory    do not look for a trajectory
  --engine URL       fetch prompt-token texts from this engine's /detokenize (default, and for what the
                     engine cannot name: the model's tokenizer on this machine, i.e. the embedded engine's
                     GGUF or a tokenizer.json in the Hugging Face cache; else token ids, saying so)
  --model NAME       model name for /detokenize (vLLM)`;

export const reportCommand = defineCommand({
  name: 'report',
  summary: 'write a self-contained HTML rollout viewer for sharing',
  usage: USAGE,
  flags: { out: { type: 'string', short: 'o', required: true }, trajectory: { type: 'string' }, 'no-trajectory': { type: 'boolean' }, engine: { type: 'string' }, model: { type: 'string' } },
  positionals: ['ROLLOUT'],
  run: async ({ flags, positionals }) => {
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
    const html = buildReportHtml(rollout.data.session_id ? withoutSessionKey(rollout.data, rollout.data.session_id) : rollout.data, loadViewerAssets());
    writeFileSync(flags.out, html);
    const tokens = rollout.data.turns.reduce((a, t) => a + t.prompt_ids.length + t.sampled_ids.length, 0);
    process.stdout.write(`wrote ${flags.out} (${(html.length / 1024).toFixed(0)} KiB): ${rollout.data.turns.length} call(s), ${tokens} token positions\n`);
    return 0;
  },
});
