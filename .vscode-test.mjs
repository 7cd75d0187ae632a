// Desktop VS Code runs of the extension-host suite, for developers who have (or can download)
// VS Code: `npx vscode-test`. It needs a desktop build, which an offline host cannot fetch; the CI
// path is the code-server e2e test (test/e2e/extension.e2e.test.ts).
import { build } from 'esbuild';
import { defineConfig } from '@vscode/test-cli';

await build({
  entryPoints: ['test/e2e/host/desktop-suite.ts'],
  outfile: 'out/e2e/desktop/desktop-suite.test.js',
  bundle: true, platform: 'node', format: 'cjs', target: 'node20', external: ['vscode'], logLevel: 'warning',
});
await build({
  entryPoints: ['src/extension/extension.ts'],
  outfile: 'dist/extension.js',
  bundle: true, platform: 'node', format: 'cjs', target: 'node20', sourcemap: true, external: ['vscode'], logLevel: 'warning',
});

export default defineConfig({
  label: 'desktop',
  files: 'out/e2e/desktop/**/*.test.js',
  version: '1.100.3', // the VS Code inside code-server 4.100.3, and engines.vscode's minimum
  mocha: { ui: 'tdd', timeout: 60_000 },
  launchArgs: ['--disable-extensions', '--disable-workspace-trust'],
});
