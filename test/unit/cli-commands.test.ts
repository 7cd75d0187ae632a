// The CLI's command contract (src/cli/args.ts defineCommand) and every command in the table:
// --help on stdout with exit 0, usage errors on stderr with exit 2, summaries in `harness-lab --help`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { defineCommand, UsageError, type CliCommand } from '../../src/cli/args.js';
import { COMMANDS, DEPRECATED_ALIASES } from '../../src/cli/commands.js';

const ROOT = join(__dirname, '..', '..');
const CLI_DIR = join(ROOT, 'src', 'cli');

/** Runs a command in this process with stdout and stderr captured. */
async function runCaptured(command: CliCommand, argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const writeOut = process.stdout.write;
  const writeErr = process.stderr.write;
  process.stdout.write = ((chunk: string | Uint8Array) => ((out += String(chunk)), true)) as typeof process.stdout.write;
  process.stderr.write = ((chunk: string | Uint8Array) => ((err += String(chunk)), true)) as typeof process.stderr.write;
  try {
    return { code: await command.run(argv), out, err };
  } finally {
    process.stdout.write = writeOut;
    process.stderr.write = writeErr;
  }
}

const FROB_USAGE = 'usage: harness-lab frob --data-dir DIR [-n N] [--json] NAME [FILE...]';
let seen: unknown;
const frob = defineCommand({
  name: 'frob',
  summary: 'frobnicate a data dir',
  usage: FROB_USAGE,
  flags: {
    'data-dir': { type: 'string', required: true },
    n: { type: 'integer', short: 'n', default: 1 },
    timeout: { type: 'integer' },
    tag: { type: 'string', multiple: true },
    mode: { type: 'string', default: 'fast' },
    json: { type: 'boolean' },
  },
  positionals: ['NAME', 'FILE...'],
  run: async ({ flags, positionals }) => {
    // The declared types: required and defaulted flags are present, the rest may be undefined.
    const dataDir: string = flags['data-dir'];
    const n: number = flags.n;
    const timeout: number | undefined = flags.timeout;
    const tags: string[] = flags.tag;
    const mode: string = flags.mode;
    const json: boolean = flags.json;
    seen = { dataDir, n, timeout, tags, mode, json, positionals };
    if (n > 9) throw new UsageError(`-n must be at most 9, got ${n}`);
    if (n === 7) throw new Error('seven is not a usage error');
    return n === 3 ? 1 : 0;
  },
});

test('defineCommand: parsed flags with their defaults and positionals reach run; its result is the exit code', async () => {
  seen = undefined;
  const r = await runCaptured(frob, ['--data-dir', '/d', 'name', 'a', 'b', '--tag', 'x', '--tag', 'y', '--json']);
  assert.deepEqual(r, { code: 0, out: '', err: '' });
  assert.deepEqual(seen, {
    dataDir: '/d',
    n: 1,
    timeout: undefined,
    tags: ['x', 'y'],
    mode: 'fast',
    json: true,
    positionals: ['name', 'a', 'b'],
  });
  assert.equal((await runCaptured(frob, ['--data-dir', '/d', '-n', '3', 'name'])).code, 1);
  assert.deepEqual(seen, { dataDir: '/d', n: 3, timeout: undefined, tags: [], mode: 'fast', json: false, positionals: ['name'] });
});

test('defineCommand: --help and -h print the usage on stdout and exit 0 without running the command', async () => {
  for (const argv of [['--help'], ['-h'], ['--data-dir', '/d', '--help']]) {
    seen = undefined;
    const r = await runCaptured(frob, argv);
    assert.deepEqual(r, { code: 0, out: `${FROB_USAGE}\n`, err: '' }, argv.join(' '));
    assert.equal(seen, undefined);
  }
});

test('defineCommand: usage errors exit 2 with the command named on stderr, nothing on stdout', async () => {
  const cases: [string[], RegExp, boolean][] = [
    [['--data-dir', '/d', '--bogus', 'name'], /^harness-lab frob: Unknown option '--bogus'/, true],
    [['name'], /^harness-lab frob: --data-dir is required\n/, true],
    [['--data-dir', '/d'], /^harness-lab frob: expected NAME FILE\.\.\., got 0 argument\(s\)\n/, true],
    [['--data-dir', '/d', '-n', 'two', 'name'], /^harness-lab frob: -n must be a non-negative integer, got 'two'\n$/, false],
    [['--data-dir', '/d', '-n', '-1', 'name'], /^harness-lab frob: Option '-n' argument is ambiguous/, true],
    [['--data-dir', '/d', '--timeout', '1.5', 'name'], /^harness-lab frob: --timeout must be a non-negative integer, got '1\.5'\n$/, false],
    [['--data-dir', '/d', '--json=yes', 'name'], /^harness-lab frob: Option '--json' does not take an argument/, true],
    [['--data-dir', '/d', '-n', '12', 'name'], /^harness-lab frob: -n must be at most 9, got 12\n$/, false],
  ];
  for (const [argv, message, showsUsage] of cases) {
    const r = await runCaptured(frob, argv);
    assert.equal(r.code, 2, argv.join(' '));
    assert.equal(r.out, '', argv.join(' '));
    assert.match(r.err, message, argv.join(' '));
    assert.equal(r.err.includes(FROB_USAGE), showsUsage, `${argv.join(' ')}: usage shown: ${r.err}`);
  }
});

test('defineCommand: a command taking no positionals refuses them; other errors are not usage errors', async () => {
  const bare = defineCommand({ name: 'bare', summary: 's', usage: 'usage: harness-lab bare', flags: {}, run: async () => 0 });
  const r = await runCaptured(bare, ['stray']);
  assert.equal(r.code, 2);
  assert.match(r.err, /^harness-lab bare: expected no arguments, got 1 argument\(s\): stray\n/);
  await assert.rejects(runCaptured(frob, ['--data-dir', '/d', '-n', '7', 'name']), /seven is not a usage error/);
  assert.throws(() => defineCommand({ name: 'x', summary: 'two\nlines', usage: 'u', flags: {}, run: async () => 0 }), /one line/);
  assert.throws(
    () => defineCommand({ name: 'x', summary: 's', usage: 'u', flags: { help: { type: 'boolean' } }, run: async () => 0 }),
    /--help/,
  );
});

test('every command: its table key is its name, one-line summary, --help on stdout (exit 0), a usage error on stderr (exit 2)', async () => {
  const names = Object.keys(COMMANDS);
  assert.ok(names.length >= 9, names.join(' '));
  for (const name of names) {
    const command = await COMMANDS[name]!();
    assert.equal(command.name, name);
    assert.match(command.summary, /^\S[^\n]{9,79}$/, `${name}: summary`);
    const help = await runCaptured(command, ['--help']);
    assert.equal(help.code, 0, `${name} --help: ${help.err}`);
    assert.equal(help.err, '', name);
    assert.ok(help.out.startsWith(`usage: harness-lab ${name}`), `${name} --help: ${help.out}`);
    const bad = await runCaptured(command, ['--no-such-flag']);
    assert.equal(bad.code, 2, `${name} --no-such-flag`);
    assert.equal(bad.out, '', name);
    assert.match(bad.err, new RegExp(`^harness-lab ${name}: Unknown option '--no-such-flag'`), name);
    assert.ok(bad.err.includes(`usage: harness-lab ${name}`), `${name}: usage after the error`);
  }
});

test('no command file imports main.ts (it runs the CLI when loaded)', () => {
  const files = readdirSync(CLI_DIR).filter((f) => f.endsWith('-command.ts'));
  assert.ok(files.length >= 9);
  for (const file of files) assert.doesNotMatch(readFileSync(join(CLI_DIR, file), 'utf8'), /from '\.\/main(\.js)?'/, file);
});

test('harness-lab --help lists every command beside its summary; bare or unknown commands are usage errors', async () => {
  const cli = (argv: string[]) =>
    spawnSync(process.execPath, ['--import', 'tsx', join(CLI_DIR, 'main.ts'), ...argv], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
  const help = cli(['--help']);
  assert.equal(help.status, 0, help.stderr);
  for (const name of Object.keys(COMMANDS)) {
    const { summary } = await COMMANDS[name]!();
    assert.match(help.stdout, new RegExp(`^  ${name} +${summary.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`, 'm'), name);
  }
  const bare = cli([]);
  assert.equal(bare.status, 2);
  assert.equal(bare.stdout, '');
  assert.match(bare.stderr, /^usage: harness-lab <command>/);
  const unknown = cli(['frobnicate']);
  assert.equal(unknown.status, 2);
  assert.match(
    unknown.stderr,
    /^harness-lab: unknown command 'frobnicate'\n\nusage: harness-lab <command>[\s\S]*\n {2}proxy +run the capture proxy/,
  );
  // An old name runs the new command and says the new name on stderr; the usage lists only new names.
  for (const [old, renamed] of Object.entries(DEPRECATED_ALIASES)) {
    assert.ok(COMMANDS[renamed], `${old} -> ${renamed}: no such command`);
    assert.equal(COMMANDS[old], undefined, `${old} is an alias, not a command`);
    assert.doesNotMatch(help.stdout, new RegExp(`^  ${old} `, 'm'), old);
    const viaOld = cli([old, '--help']);
    assert.equal(viaOld.status, 0, viaOld.stderr);
    assert.ok(viaOld.stdout.startsWith(`usage: harness-lab ${renamed} `), viaOld.stdout);
    assert.equal(viaOld.stderr, `harness-lab: \`${old}\` is now \`harness-lab ${renamed}\`; the old name still works for now\n`);
  }
  assert.equal(DEPRECATED_ALIASES.run, 'rollout');
  const sub = cli(['export', '--data-dir', '/nonexistent']);
  assert.equal(sub.status, 2);
  assert.match(sub.stderr, /^harness-lab export: --session is required\n\nusage: harness-lab export /);
});
