// Reads files out of the llama.cpp source that node-llama-cpp ships as a git bundle
// (`node-llama-cpp/llama/gitRelease.bundle`), so the tiny model's tokenizer and chat template are the
// upstream ones without any download. Uses the system `git`.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Path of the llama.cpp git bundle inside the installed node-llama-cpp package. */
export function llamaCppBundlePath(): string {
  // node-llama-cpp's exports hide package.json; resolve its entry point and walk up to the package root.
  const entry = require.resolve('node-llama-cpp');
  let dir = dirname(entry);
  while (!existsSync(join(dir, 'llama', 'gitRelease.bundle'))) {
    const up = dirname(dir);
    if (up === dir) throw new Error(`node-llama-cpp's llama.cpp source bundle (llama/gitRelease.bundle) was not found above ${entry}`);
    dir = up;
  }
  return join(dir, 'llama', 'gitRelease.bundle');
}

/** Reads `paths` (repository-relative) from the bundle's HEAD commit. */
export async function readFromLlamaCppBundle(paths: string[], bundle = llamaCppBundlePath()): Promise<Map<string, Buffer>> {
  const gitDir = await mkdtemp(join(tmpdir(), 'harness-lab-llama-src-'));
  try {
    const git = (args: string[]) => run('git', ['--git-dir', gitDir, ...args], { encoding: 'buffer', maxBuffer: 256 << 20 });
    try {
      await git(['init', '--quiet', '--bare']);
    } catch (err) {
      throw new Error(`building the tiny model needs git on PATH to read ${bundle}: ${(err as Error).message}`);
    }
    await git(['fetch', '--quiet', bundle, 'HEAD']);
    const out = new Map<string, Buffer>();
    for (const path of paths) {
      try {
        out.set(path, (await git(['show', `FETCH_HEAD:${path}`])).stdout);
      } catch {
        throw new Error(`${path} is missing from the llama.cpp source bundle ${bundle}`);
      }
    }
    return out;
  } finally {
    await rm(gitDir, { recursive: true, force: true });
  }
}
