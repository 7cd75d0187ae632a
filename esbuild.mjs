// One build for every bundle: the CLI, the extension host and (later) the webviews.
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { build as esbuild } from 'esbuild';

// Each output file is written to a temporary name and renamed into place, so a test or an extension
// host that loads dist/ while another process rebuilds it reads the old file or the new one, never a
// half-written one (the e2e suites rebuild dist/ while other suites run dist/cli.js).
async function build(options) {
  const result = await esbuild({ ...options, write: false });
  for (const file of result.outputFiles) {
    mkdirSync(dirname(file.path), { recursive: true });
    const tmp = `${file.path}.${process.pid}.tmp`;
    writeFileSync(tmp, file.contents);
    renameSync(tmp, file.path);
  }
  return result;
}
const watch = process.argv.includes('--watch');
const production = process.argv.includes('--production');
const common = { bundle: true, platform: 'node', format: 'cjs', target: 'node20', sourcemap: !production, sourcesContent: false, minify: production, logLevel: 'warning', external: ['vscode', 'cpu-features', '*.node', 'node-llama-cpp', '@node-llama-cpp/*'] };
await Promise.all([
  build({ ...common, entryPoints: ['src/cli/main.ts'], outfile: 'dist/cli.js', banner: { js: '#!/usr/bin/env node' } }),
  build({ ...common, entryPoints: ['src/extension/extension.ts'], outfile: 'dist/extension.js' }),
  // Rollout viewer webview (also inlined into `harness-lab report` files): a browser bundle and its CSS.
  build({ bundle: true, platform: 'browser', format: 'iife', target: 'chrome114', sourcemap: false, minify: production, logLevel: 'warning', entryPoints: ['webview/viewer/main.ts'], outfile: 'dist/webview/viewer.js' }),
  build({ bundle: true, minify: production, logLevel: 'warning', entryPoints: ['webview/viewer/viewer.css'], outfile: 'dist/webview/viewer.css' }),
  build({ bundle: true, minify: production, logLevel: 'warning', entryPoints: ['webview/viewer/report-theme.css'], outfile: 'dist/webview/report-theme.css' }),
  build({ ...common, entryPoints: ['src/harness/react-harness.ts'], outfile: 'dist/react-harness.js' }),
]);
if (watch) console.log('esbuild: watch mode is not wired yet; run `npm run build` again');
