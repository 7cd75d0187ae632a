// The `harness-lab` command: one subcommand per file under src/cli/.
const USAGE = `usage: harness-lab <command> [options]

commands:
  proxy    run the capture proxy in front of an inference engine
  export   write a session's TrainingTrace JSONL from a data dir
  demo     run a short captured rollout end to end on the embedded defaults
`;

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case undefined:
    case '-h':
    case '--help':
      process.stdout.write(USAGE);
      return command ? 0 : 2;
    default:
      process.stderr.write(`harness-lab: unknown command '${command}'\n\n${USAGE}`);
      void rest;
      return 2;
  }
}

main(process.argv.slice(2)).then(
  (code) => { process.exitCode = code; },
  (err: unknown) => {
    process.stderr.write(`harness-lab: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  },
);
