// Runs the bundled `harness-lab` CLI (dist/cli.js) as a child of the extension host's own node
// (Electron's, as plain node, on desktop), so heavy work (exports, teardowns) never blocks the host.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';

export interface CliRun {
  code: number | null;
  /** The last 20,000 characters it printed (stdout and stderr). */
  output: string;
}

export function runBundledCli(
  cliJs: string,
  args: string[],
  opts: { cwd: string; onLine?: (line: string) => void; signal?: AbortSignal; execPath?: string },
): Promise<CliRun> {
  if (!existsSync(cliJs))
    return Promise.reject(new Error(`the bundled CLI ${cliJs} is missing (run \`npm run build\`, or reinstall the extension)`));
  const child = spawn(opts.execPath ?? process.execPath, [cliJs, ...args], {
    cwd: opts.cwd,
    env: { ...process.env, ELECTRON_RUN_AS_NODE: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
    ...(opts.signal ? { signal: opts.signal } : {}),
  });
  let out = '';
  let partial = '';
  const take = (b: Buffer) => {
    const text = b.toString();
    out = (out + text).slice(-20_000);
    const lines = (partial + text).split('\n');
    partial = lines.pop() ?? '';
    for (const l of lines) opts.onLine?.(l);
  };
  child.stdout.on('data', take);
  child.stderr.on('data', take);
  return new Promise((resolve) => {
    child.on('error', (err) => {
      out += `\n${err.message}`;
      resolve({ code: null, output: out });
    });
    child.on('close', (code) => {
      if (partial) opts.onLine?.(partial);
      resolve({ code, output: out });
    });
  });
}
