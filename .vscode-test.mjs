// Desktop VS Code runs of the extension-host suite, for developers who have (or can download)
// VS Code: `npx vscode-test`. It needs a desktop build, which an offline host cannot fetch; the CI
// path is the code-server e2e test (test/e2e/extension.e2e.test.ts).
import { spawnSync } from 'node:child_process';
import { build } from 'esbuild';
import { defineConfig } from '@vscode/test-cli';

await build({
  entryPoints: ['test/e2e/host/desktop-suite.ts'],
  outfile: 'out/e2e/desktop/desktop-suite.test.js',
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node20',
  logLevel: 'warning',
  external: ['vscode', 'cpu-features', '*.node', 'node-llama-cpp', '@node-llama-cpp/*'],
});
// The extension exactly as `npm run build` bundles it.
const built = spawnSync(process.execPath, ['esbuild.mjs'], { stdio: 'inherit' });
if (built.status !== 0) throw new Error('node esbuild.mjs failed');

export default defineConfig({
  label: 'desktop',
  files: 'out/e2e/desktop/**/*.test.js',
  version: '1.100.3', // the VS Code inside code-server 4.100.3, and engines.vscode's minimum
  mocha: { ui: 'tdd', timeout: 60_000 },
  launchArgs: ['--disable-extensions', '--disable-workspace-trust'],
});
