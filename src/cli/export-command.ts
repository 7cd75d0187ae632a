// `harness-lab export`: a session's TrainingTrace JSONL, read from a data dir (no proxy needed).
import { existsSync, writeFileSync } from 'node:fs';
import { NotTrainableError, trainingTraces, traceToJsonl } from '../capture/rollout.js';
import { SessionRegistry } from '../capture/session-registry.js';
import type { CliCommand } from './main.js';
import { parseFlags, UsageError, withUsage } from './args.js';

const USAGE = `usage: harness-lab export --data-dir DIR --session ID --out FILE.jsonl

Writes one TrainingTrace per root-to-leaf path of the session's rollout graph (fields: README).`;

export const exportCommand: CliCommand = {
  summary: "write a session's TrainingTrace JSONL from a data dir",
  run: (argv) =>
    withUsage(async () => {
      const { values } = parseFlags(argv, { 'data-dir': { type: 'string' }, session: { type: 'string' }, out: { type: 'string', short: 'o' } }, USAGE);
      if (values.help) {
        process.stdout.write(`${USAGE}\n`);
        return 0;
      }
      for (const flag of ['data-dir', 'session', 'out'] as const) if (!values[flag]) throw new UsageError(`--${flag} is required\n\n${USAGE}`);
      const sessions = SessionRegistry.openReadOnly(values['data-dir']!);
      const file = sessions.fileOf(values.session!)!;
      if (!existsSync(file)) throw new UsageError(`no session '${values.session}' in ${values['data-dir']} (looked for ${file})`);
      const doc = sessions.rollout(values.session!);
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
      writeFileSync(values.out!, traceToJsonl(traces));
      const trainable = traces.filter((t) => t.trainable).length;
      process.stdout.write(`wrote ${traces.length} trace(s) (${trainable} trainable) from ${doc.calls.length} call(s) to ${values.out}\n`);
      return 0;
    }),
};
