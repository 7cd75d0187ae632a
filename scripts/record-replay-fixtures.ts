// Records the replay fixtures of test/fixtures/replay/: each registry harness runs once in Docker on a
// shipped task against the task's scripted policy (the embedded policy engine, no model), and its
// captured rollout is stripped to what a replay needs (src/replay/source.ts fixtureFromSource).
//
//   node --import tsx scripts/record-replay-fixtures.ts [--task examples/tasks/hello-file] [HARNESS ...]
//   node --import tsx scripts/record-replay-fixtures.ts --from-rollouts DIR [HARNESS ...]   (convert rollouts already made;
//   --from-runs is its old name)
//
// Slow (a Docker rollout per harness, about 10 min for all on 2 cores): re-record after a harness
// upgrade, when the replay test says what the harness now sends differs, and commit the new fixtures.
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { harnessNames } from '../src/harness/registry.js';
import { ROLLOUT_DOCUMENT_FILE, rolloutLine, runRollout } from '../src/sandbox/rollout-runner.js';
import { openLab } from '../src/sandbox/lab.js';
import { fixtureFromSource, loadReplaySource } from '../src/replay/source.js';

const ROOT = resolve(__dirname, '..');
const FIXTURE_DIR = join(ROOT, 'test', 'fixtures', 'replay');

const { values, positionals } = parseArgs({
  options: {
    task: { type: 'string', default: 'examples/tasks/hello-file' },
    'from-rollouts': { type: 'string' },
    'from-runs': { type: 'string' },
    out: { type: 'string', default: '/tmp/harness-lab-replay-fixtures' },
  },
  allowPositionals: true,
});
const harnesses = positionals.length ? positionals : harnessNames();
const taskDir = resolve(ROOT, values.task);
const taskRel = relative(ROOT, taskDir);
mkdirSync(FIXTURE_DIR, { recursive: true });

async function main(): Promise<number> {
  let failed = 0;
  for (const harness of harnesses) {
    let rolloutDir: string;
    const fromRollouts = values['from-rollouts'] ?? values['from-runs'];
    if (fromRollouts) {
      // DIR/<harness>/<n>: the last rollout of each harness (the layout of `harness-lab rollout --out`'s task folder).
      const base = join(resolve(fromRollouts), harness);
      const made = readdirSync(base)
        .filter((n) => /^\d+$/.test(n))
        .map(Number);
      rolloutDir = join(base, String(Math.max(...made)));
    } else {
      const lab = await openLab({ taskDir, harness, sandbox: 'docker', outDir: resolve(values.out) });
      try {
        const result = await runRollout({ ...lab.rolloutOptions });
        console.log(rolloutLine(result));
        if (result.status !== 'ok') {
          failed++;
          continue;
        }
        rolloutDir = result.out_dir;
      } finally {
        await lab.close();
      }
    }
    const source = loadReplaySource(join(rolloutDir, ROLLOUT_DOCUMENT_FILE));
    const file = join(FIXTURE_DIR, `${harness}.replay.json.gz`);
    const bytes = fixtureFromSource(source, taskRel);
    writeFileSync(file, bytes);
    console.log(`${harness}: ${source.calls.length} call(s), reward ${source.reward} -> ${relative(ROOT, file)} (${bytes.length} bytes)`);
  }
  return failed ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
