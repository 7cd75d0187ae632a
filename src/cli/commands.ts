// The command table of `harness-lab`: name -> its module, loaded on use, so `harness-lab proxy`
// never pays for the engine or Docker code. The contract each module exports (defineCommand) is
// src/cli/args.ts; main.ts only dispatches.
import type { CliCommand } from './args.js';

export const COMMANDS: Readonly<Record<string, () => Promise<CliCommand>>> = {
  // one line per command, keep sorted
  'atif-check': async () => (await import('./atif-check-command.js')).atifCheckCommand,
  audit: async () => (await import('./audit-command.js')).auditCommand,
  batch: async () => (await import('./batch-command.js')).batchCommand,
  demo: async () => (await import('./demo-command.js')).demoCommand,
  engine: async () => (await import('./engine-command.js')).engineCommand,
  export: async () => (await import('./export-command.js')).exportCommand,
  harness: async () => (await import('./harness-command.js')).harnessCommand,
  images: async () => (await import('./images-command.js')).imagesCommand,
  proxy: async () => (await import('./proxy-command.js')).proxyCommand,
  replay: async () => (await import('./replay-command.js')).replayCommand,
  'replay-load': async () => (await import('./replay-load-command.js')).replayLoadCommand,
  report: async () => (await import('./report-command.js')).reportCommand,
  rescore: async () => (await import('./rescore-command.js')).rescoreCommand,
  rollout: async () => (await import('./rollout-command.js')).rolloutCommand,
  serve: async () => (await import('./serve-command.js')).serveCommand,
  train: async () => (await import('./train-command.js')).trainCommand,
  validate: async () => (await import('./validate-command.js')).validateCommand,
  verify: async () => (await import('./verify-command.js')).verifyCommand,
};

/**
 * Old command names users may still type, each -> its new name: it runs the new command after saying
 * the new name on stderr. Not listed in the usage. ("Run" means a training run; `run` did one rollout.)
 */
export const DEPRECATED_ALIASES: Readonly<Record<string, string>> = {
  run: 'rollout',
};

/** The top-level usage: every command beside its one-line summary (this loads every command module). */
export async function topLevelUsage(): Promise<string> {
  const commands = await Promise.all(
    Object.keys(COMMANDS)
      .sort()
      .map((name) => COMMANDS[name]!()),
  );
  const width = Math.max(...commands.map((c) => c.name.length));
  const lines = commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`);
  return (
    `usage: harness-lab <command> [options]\n\ncommands:\n${lines.join('\n')}\n\nRun ` +
    `'harness-lab <command> --help' for a command's options.\n`
  );
}
