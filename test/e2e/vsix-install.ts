// The install step the .vsix e2e tests share: package the platform .vsix exactly as `npm run
// package` does and install it the way a user installs a downloaded .vsix (--install-extension).
import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { codeServerBin } from './code-server.js';

const ROOT = resolve(__dirname, '..', '..');

/** Packages and installs the .vsix under `stateDir` (extensions/, user-data/, home/); returns the installed folder. */
export function packageAndInstallVsix(stateDir: string): string {
  const vsix = join(stateDir, 'harness-lab-linux-x64.vsix');
  // From the dist/ that `npm test` built first: rebuilding dist/ in place here would race with the
  // suites running dist/cli.js beside this one.
  const packed = spawnSync(process.execPath, ['scripts/package-vsix.mjs', '--target', 'linux-x64', '--out', vsix, '--no-build'], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  assert.equal(packed.status, 0, `packaging failed:\n${packed.stdout}\n${packed.stderr}`);
  const home = join(stateDir, 'home');
  mkdirSync(home, { recursive: true });
  const installed = spawnSync(
    codeServerBin(),
    ['--user-data-dir', join(stateDir, 'user-data'), '--extensions-dir', join(stateDir, 'extensions'), '--install-extension', vsix],
    {
      encoding: 'utf8',
      env: { ...process.env, HOME: home, XDG_CONFIG_HOME: join(home, '.config'), XDG_DATA_HOME: join(home, '.local', 'share') },
    },
  );
  assert.equal(installed.status, 0, `--install-extension failed:\n${installed.stdout}\n${installed.stderr}`);
  const extDir = readdirSync(join(stateDir, 'extensions')).find(
    (d) => d.startsWith('harness-lab.harness-lab-') || d.includes('harness-lab'),
  );
  assert.ok(extDir, `no extension folder in ${join(stateDir, 'extensions')}`);
  const folder = join(stateDir, 'extensions', extDir);
  for (const f of [
    'dist/extension.js',
    'dist/cli.js',
    'dist/react-harness.js',
    'node_modules/node-llama-cpp/package.json',
    'node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/llama-addon.node',
  ]) {
    assert.ok(existsSync(join(folder, f)), `the installed extension lacks ${f}`);
  }
  return folder;
}
