// `harness-lab export`: a session's TrainingTrace JSONL, read from a data dir (no proxy needed).
import { existsSync, writeFileSync } from 'node:fs';
import { NotTrainableError, trainingTraces, traceToJsonl } from '../capture/rollout.js';
import { SessionRegistry } from '../capture/session-registry.js';
import { defineCommand, UsageError } from './args.js';

const USAGE = `usage: harness-lab export --data-dir DIR --session ID --out FILE.jsonl

Writes one TrainingTrace per root-to-leaf path of the session's rollout graph (fields: README).`;

export const exportCommand = defineCommand({
  name: 'export',
  summary: "write a session's TrainingTrace JSONL from a data dir",
  usage: USAGE,
  flags: { 'data-dir': { type: 'string', required: true }, session: { type: 'string', required: true }, out: { type: 'string', short: 'o', required: true } },
  run: async ({ flags }) => {
    const sessions = SessionRegistry.openReadOnly(flags['data-dir']);
    const file = sessions.fileOf(flags.session)!;
    if (!existsSync(file)) throw new UsageError(`no session '${flags.session}' in ${flags['data-dir']} (looked for ${file})`);
    const doc = sessions.rollout(flags.session);
    if (!doc) throw new UsageError(`${file}: no session header line; the file is not a Harness Lab capture`);
    let traces;
    try {
      traces = trainingTraces(doc);
    } catch (err) {
      if (err instanceof NotTrainableError) {
        process.stderr.write(`harness-lab export: ${err.message}\n`);
        return 1;
      }
      throw err;
    }
    writeFileSync(flags.out, traceToJsonl(traces));
    const trainable = traces.filter((t) => t.trainable).length;
    process.stdout.write(`wrote ${traces.length} trace(s) (${trainable} trainable) from ${doc.calls.length} call(s) to ${flags.out}\n`);
    return 0;
  },
});
