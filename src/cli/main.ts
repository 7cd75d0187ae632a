// The `harness-lab` entry point: runs the command named by argv[2] (loading this file runs the CLI).
// The command table is commands.ts, the contract every command follows args.ts.
// Durable appends run on libuv's thread pool, 4 threads unless set: a burst of 1,000 O_DSYNC
// appends to session files took 249 ms on 4 threads and 80 ms on 16 (p99 214 vs 61 ms). This runs
// before the pool's first task in the bundle; a value the user set wins.
process.env.UV_THREADPOOL_SIZE ??= '16';

import { COMMANDS, DEPRECATED_ALIASES, topLevelUsage } from './commands.js';

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '-h' || name === '--help') {
    // Bare `harness-lab` is a usage error (exit 2, stderr); asking for help is not.
    (name ? process.stdout : process.stderr).write(await topLevelUsage());
    return name ? 0 : 2;
  }
  const renamed = DEPRECATED_ALIASES[name];
  if (renamed) process.stderr.write(`harness-lab: \`${name}\` is now \`harness-lab ${renamed}\`; the old name still works for now\n`);
  const load = COMMANDS[renamed ?? name];
  if (!load) {
    process.stderr.write(`harness-lab: unknown command '${name}'\n\n${await topLevelUsage()}`);
    return 2;
  }
  return (await load()).run(rest);
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`harness-lab: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  },
);
