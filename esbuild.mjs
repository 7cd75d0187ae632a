// One build for every bundle: the CLI, the extension host, the viewer webview and the react harness.
// `node esbuild.mjs --watch` (`npm run watch`) rebuilds each bundle when its sources change.
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { build as esbuild, context } from 'esbuild';

// Each output file is written to a temporary name and renamed into place, so a test or an extension
// host that loads dist/ while another process rebuilds it reads the old file or the new one, never a
// half-written one (the e2e suites rebuild dist/ while other suites run dist/cli.js).
function writeOutputs(result) {
  for (const file of result.outputFiles ?? []) {
    mkdirSync(dirname(file.path), { recursive: true });
    const tmp = `${file.path}.${process.pid}.tmp`;
    writeFileSync(tmp, file.contents);
    renameSync(tmp, file.path);
  }
}
async function build(options) {
  const result = await esbuild({ ...options, write: false });
  writeOutputs(result);
  return result;
}
/** Watch mode: the same bundles through esbuild's incremental context, written the same way after each rebuild. */
async function watchBuild(options) {
  const written = {
    name: 'write-atomically',
    setup(b) {
      b.onEnd((result) => {
        if (result.errors.length) return;
        writeOutputs(result);
        console.log(`esbuild: built ${options.outfile}`);
      });
    },
  };
  const ctx = await context({ ...options, write: false, plugins: [written] });
  await ctx.watch();
  return ctx;
}
const watch = process.argv.includes('--watch');
const production = process.argv.includes('--production');
const common = {
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node20',
  sourcemap: !production,
  sourcesContent: false,
  minify: production,
  logLevel: 'warning',
  external: ['vscode', 'cpu-features', '*.node', 'node-llama-cpp', '@node-llama-cpp/*'],
};
const bundles = [
  { ...common, entryPoints: ['src/cli/main.ts'], outfile: 'dist/cli.js', banner: { js: '#!/usr/bin/env node' } },
  { ...common, entryPoints: ['src/extension/extension.ts'], outfile: 'dist/extension.js' },
  // The proxy's tokenizer thread (src/capture/render/render-workers.ts loads it from next to the bundle).
  { ...common, entryPoints: ['src/capture/render/tokenizer-worker.ts'], outfile: 'dist/tokenizer-worker.js' },
  // Rollout viewer webview (also inlined into `harness-lab report` files): a browser bundle and its CSS.
  {
    bundle: true,
    platform: 'browser',
    format: 'iife',
    target: 'chrome114',
    sourcemap: false,
    minify: production,
    logLevel: 'warning',
    entryPoints: ['webview/viewer/main.ts'],
    outfile: 'dist/webview/viewer.js',
  },
  { bundle: true, minify: production, logLevel: 'warning', entryPoints: ['webview/viewer/viewer.css'], outfile: 'dist/webview/viewer.css' },
  {
    bundle: true,
    minify: production,
    logLevel: 'warning',
    entryPoints: ['webview/viewer/report-theme.css'],
    outfile: 'dist/webview/report-theme.css',
  },
  { ...common, entryPoints: ['src/harness/react-harness.ts'], outfile: 'dist/react-harness.js' },
];
if (watch) {
  await Promise.all(bundles.map(watchBuild));
  console.log('esbuild: watching; every bundle is rebuilt when its sources change (Ctrl+C stops)');
} else {
  await Promise.all(bundles.map(build));
}
