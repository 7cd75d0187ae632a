// The `harness-lab` command contract. The command table (commands.ts) and the entry point (main.ts)
// import it; command files import it and never main.ts, which runs the CLI when loaded (lint
// enforces this).
//
// How a command is defined (one file per command, src/cli/<name>-command.ts):
//
//   import { defineCommand, UsageError } from './args.js';
//
//   export const frobCommand = defineCommand({
//     name: 'frob',
//     summary: 'frobnicate a data dir',            // the line beside the name in `harness-lab --help`
//     usage: `usage: harness-lab frob --data-dir DIR [-n N] [--json] [FILE ...]
//
//     --data-dir DIR  ...`,                        // printed for --help (stdout, exit 0) and after usage errors
//     flags: {
//       'data-dir': { type: 'string', required: true },   // flags['data-dir']: string
//       n: { type: 'integer', short: 'n', default: 1 },   // a non-negative integer: number
//       timeout: { type: 'integer' },                     // number | undefined
//       tag: { type: 'string', multiple: true },          // string[] (empty when absent)
//       json: { type: 'boolean' },                        // boolean
//     },
//     positionals: ['FILE...'],                    // 'NAME' required, 'NAME?' optional, 'NAME...' any number; default: none
//     run: async ({ flags, positionals }) => {
//       if (flags.n > 9) throw new UsageError(`-n must be at most 9, got ${flags.n}`); // exit 2, message on stderr
//       return 0;                                  // the exit code
//     },
//   });
//
// and one line in the COMMANDS table of commands.ts (the key is the command's name, a test checks it):
//   frob: async () => (await import('./frob-command.js')).frobCommand,
//
// Converting a command written against the old contract (`CliCommand` from './main.js', `withUsage`,
// `parseFlags`, `if (values.help) ...`): move the parseFlags options into `flags` (string flags read
// through intFlag become `type: 'integer'`; flags checked with `if (!values.x) throw UsageError(...is
// required)` get `required: true`), the USAGE constant into `usage`, the body after the help branch
// into `run` with `values` renamed `flags`, the `positionals.length` check into `positionals`, and
// delete the `withUsage`/`parseFlags` preamble and the help branch. Its COMMANDS line moves from
// main.ts to commands.ts.
import { parseArgs } from 'node:util';

/** Bad usage: exit code 2, the message on stderr (and the command's usage when `showUsage`). */
export class UsageError extends Error {
  readonly showUsage: boolean;
  constructor(message: string, opts: { showUsage?: boolean } = {}) {
    super(message);
    this.name = 'UsageError';
    this.showUsage = opts.showUsage ?? false;
  }
}

export type FlagSpec =
  | { type: 'boolean'; short?: string }
  | { type: 'string'; short?: string; required?: boolean; default?: string; multiple?: boolean }
  | { type: 'integer'; short?: string; required?: boolean; default?: number };

type Present = { required: true } | { default: string | number };
type FlagValue<S extends FlagSpec> = S extends { type: 'boolean' }
  ? boolean
  : S extends { type: 'integer' }
    ? S extends Present
      ? number
      : number | undefined
    : S extends { multiple: true }
      ? string[]
      : S extends Present
        ? string
        : string | undefined;
export type FlagValues<F extends Record<string, FlagSpec>> = { -readonly [K in keyof F]: FlagValue<F[K]> };

export interface CommandSpec<F extends Record<string, FlagSpec>> {
  name: string;
  summary: string;
  usage: string;
  flags: F;
  /** Positional arguments by name: `NAME` required, `NAME?` optional, `NAME...` zero or more (last). Default: none. */
  positionals?: readonly string[];
  run(args: { flags: FlagValues<F>; positionals: string[] }): Promise<number>;
}

/** What main.ts dispatches to: a defined command. */
export interface CliCommand {
  readonly name: string;
  readonly summary: string;
  readonly usage: string;
  run(argv: string[]): Promise<number>;
}

export function defineCommand<const F extends Record<string, FlagSpec>>(spec: CommandSpec<F>): CliCommand {
  if (/\n/.test(spec.summary)) throw new Error(`command ${spec.name}: the summary must be one line`);
  if ('help' in spec.flags) throw new Error(`command ${spec.name}: -h/--help is defineCommand's own flag`);
  const run = async (argv: string[]): Promise<number> => {
    let parsed;
    try {
      parsed = parseCommandLine(spec, argv);
    } catch (err) {
      return reportUsageError(spec, err);
    }
    if (parsed === 'help') {
      process.stdout.write(`${spec.usage.trimEnd()}\n`);
      return 0;
    }
    try {
      return await spec.run(parsed);
    } catch (err) {
      return reportUsageError(spec, err);
    }
  };
  return { name: spec.name, summary: spec.summary, usage: spec.usage, run };
}

/**
 * A command made of subcommands (`harness-lab batch submit ...`): `-h` prints the group's usage, a
 * missing or unknown subcommand is a usage error (exit 2) naming the ones there are, the rest goes to
 * the subcommand, itself a defined command with its own flags and errors.
 */
export function defineCommandGroup(spec: {
  name: string;
  summary: string;
  usage: string;
  subcommands: Record<string, CliCommand>;
}): CliCommand {
  const run = async ([sub, ...rest]: string[]): Promise<number> => {
    if (sub === '-h' || sub === '--help') {
      process.stdout.write(`${spec.usage.trimEnd()}\n`);
      return 0;
    }
    const command = sub === undefined ? undefined : spec.subcommands[sub];
    if (!command) {
      const why =
        sub === undefined
          ? 'a subcommand is required'
          : sub.startsWith('-')
            ? `Unknown option '${sub}'`
            : `unknown ${spec.name} subcommand '${sub}'; one of ${Object.keys(spec.subcommands).join(', ')}`;
      process.stderr.write(`harness-lab ${spec.name}: ${why}\n\n${spec.usage.trimEnd()}\n`);
      return 2;
    }
    return command.run(rest);
  };
  return { name: spec.name, summary: spec.summary, usage: spec.usage, run };
}

function reportUsageError(spec: CommandSpec<Record<string, FlagSpec>>, err: unknown): number {
  if (!(err instanceof UsageError)) throw err;
  process.stderr.write(`harness-lab ${spec.name}: ${err.message}\n${err.showUsage ? `\n${spec.usage.trimEnd()}\n` : ''}`);
  return 2;
}

function parseCommandLine<F extends Record<string, FlagSpec>>(
  spec: CommandSpec<F>,
  argv: string[],
): 'help' | { flags: FlagValues<F>; positionals: string[] } {
  const options: Record<string, { type: 'string' | 'boolean'; short?: string; multiple?: boolean }> = {
    help: { type: 'boolean', short: 'h' },
  };
  for (const [name, flag] of Object.entries(spec.flags)) {
    options[name] = {
      type: flag.type === 'boolean' ? 'boolean' : 'string',
      ...(flag.short ? { short: flag.short } : {}),
      ...(flag.type === 'string' && flag.multiple ? { multiple: true } : {}),
    };
  }
  let values: Record<string, string | boolean | (string | boolean)[] | undefined>;
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({ args: argv, options, allowPositionals: true, strict: true }));
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message : String(err), { showUsage: true });
  }
  if (values.help) return 'help';
  const flags: Record<string, unknown> = {};
  for (const [name, flag] of Object.entries(spec.flags)) {
    const raw = values[name];
    if (flag.type === 'boolean') {
      flags[name] = raw === true;
      continue;
    }
    if (raw === undefined && flag.required) throw new UsageError(`${flagName(name)} is required`, { showUsage: true });
    if (flag.type === 'integer') flags[name] = raw === undefined ? flag.default : parseInteger(raw as string, name);
    else flags[name] = raw ?? (flag.multiple ? [] : flag.default);
  }
  checkPositionals(spec.positionals ?? [], positionals);
  return { flags: flags as FlagValues<F>, positionals };
}

function parseInteger(value: string, name: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isInteger(n) || n < 0)
    throw new UsageError(`${flagName(name)} must be a non-negative integer, got '${value}'`);
  return n;
}

/** How the user spells the flag: `-n` for one-letter names, `--data-dir` otherwise. */
function flagName(name: string): string {
  return name.length === 1 ? `-${name}` : `--${name}`;
}

function checkPositionals(names: readonly string[], given: string[]): void {
  const required = names.filter((n) => !n.endsWith('?') && !n.endsWith('...')).length;
  const unbounded = names.some((n) => n.endsWith('...'));
  if (given.length >= required && (unbounded || given.length <= names.length)) return;
  const expected = names.length === 0 ? 'no arguments' : names.join(' ');
  throw new UsageError(`expected ${expected}, got ${given.length} argument(s)${given.length ? `: ${given.join(' ')}` : ''}`, {
    showUsage: true,
  });
}

/** A non-negative integer flag read by hand (for values that are not a declared `integer` flag). */
export function intFlag(value: string | undefined, name: string, fallback: number): number {
  return value === undefined ? fallback : parseInteger(value, name);
}
