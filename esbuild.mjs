// One build for every bundle: the CLI, the extension host and (later) the webviews.
import { build } from 'esbuild';
const watch = process.argv.includes('--watch');
const production = process.argv.includes('--production');
const common = { bundle: true, platform: 'node', format: 'cjs', target: 'node20', sourcemap: !production, sourcesContent: false, minify: production, logLevel: 'warning', external: ['vscode', 'cpu-features', '*.node', 'node-llama-cpp', '@node-llama-cpp/*'] };
await Promise.all([
  build({ ...common, entryPoints: ['src/cli/main.ts'], outfile: 'dist/cli.js', banner: { js: '#!/usr/bin/env node' } }),
  build({ ...common, entryPoints: ['src/extension/extension.ts'], outfile: 'dist/extension.js' }),
]);
if (watch) console.log('esbuild: watch mode is not wired yet; run `npm run build` again');
