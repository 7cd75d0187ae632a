// Builds the platform-specific .vsix (`vsce package --target linux-x64`). The bundles hold every
// pure-JavaScript dependency; what cannot be bundled ships beside them: node-llama-cpp (ESM, loads
// its addon and the llama.cpp source bundle by path) with its runtime dependencies and the prebuilt
// linux-x64 binary package, the reference harness (dist/react-harness.js) and the example tasks and
// policies. The package is assembled in a staging folder whose node_modules holds exactly that
// closure, so vsce's `npm list --production` sees nothing else, and .vscodeignore stays an allow-list.
//   node scripts/package-vsix.mjs [--target linux-x64] [--out harness-lab-linux-x64.vsix] [--no-build]
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const opt = (name, fallback) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : fallback;
};
const target = opt('target', 'linux-x64');
const out = resolve(opt('out', join(ROOT, `harness-lab-${target}.vsix`)));
/** The native packages each target carries (node-llama-cpp's optional platform dependencies). */
const NATIVE = { 'linux-x64': ['@node-llama-cpp/linux-x64'], 'linux-arm64': ['@node-llama-cpp/linux-arm64'] };
if (!NATIVE[target]) throw new Error(`unsupported --target ${target}; one of ${Object.keys(NATIVE).join(', ')}`);
const RUNTIME_PACKAGES = ['node-llama-cpp', ...NATIVE[target]];

function run(cmd, argv, cwd) {
  const r = spawnSync(cmd, argv, { cwd, stdio: 'inherit' });
  if (r.status !== 0) throw new Error(`${cmd} ${argv.join(' ')} failed (exit ${r.status})`);
}

/** Where Node would resolve `name` from a package at `fromDir` (nested node_modules first). */
function locate(name, fromDir) {
  for (let dir = fromDir; ; dir = dirname(dir)) {
    const candidate = join(dir, 'node_modules', name);
    if (existsSync(join(candidate, 'package.json'))) return candidate;
    if (dir === ROOT || dirname(dir) === dir) return undefined;
  }
}

/** The production dependency closure of `names`, as paths relative to ROOT (layout kept as is). */
function closure(names) {
  const seen = new Set();
  const walk = (name, fromDir, optional) => {
    const dir = locate(name, fromDir);
    if (!dir) {
      if (optional) return;
      throw new Error(`${name} (needed by ${fromDir}) is not installed; run npm ci`);
    }
    const real = dir;
    if (seen.has(real)) return;
    seen.add(real);
    const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
    for (const dep of Object.keys(pkg.dependencies ?? {})) walk(dep, dir, false);
    // Optional dependencies are the other platforms' binaries: only the target's are carried.
    for (const dep of Object.keys(pkg.optionalDependencies ?? {})) if (RUNTIME_PACKAGES.includes(dep)) walk(dep, dir, true);
  };
  for (const name of names) walk(name, ROOT, false);
  return [...seen].map((p) => p.slice(ROOT.length + 1));
}

if (!args.includes('--no-build')) run(process.execPath, ['esbuild.mjs', '--production'], ROOT);
for (const f of ['dist/extension.js', 'dist/cli.js', 'dist/tokenizer-worker.js', 'dist/react-harness.js', 'dist/webview/viewer.js']) {
  if (!existsSync(join(ROOT, f))) throw new Error(`${f} is missing; run npm run build`);
}

// A stage folder of this process's own: e2e tests package side by side (two at once would empty and
// fill one shared folder under each other, and vsce's `npm list` would see half of each).
const stage = join(ROOT, 'out', `vsix-${target}-${process.pid}`);
rmSync(stage, { recursive: true, force: true });
mkdirSync(stage, { recursive: true });
process.on('exit', () => rmSync(stage, { recursive: true, force: true }));
// docs/: the reference pages messages and menus name (docs/exports.md, docs/training-runs.md, ...) ship too.
for (const f of ['dist', 'media', 'examples', 'docs', 'README.md', 'LICENSE', '.vscodeignore']) {
  if (existsSync(join(ROOT, f))) cpSync(join(ROOT, f), join(stage, f), { recursive: true, filter: (src) => !src.endsWith('.map') });
}
const modules = closure(RUNTIME_PACKAGES);
for (const rel of modules)
  cpSync(join(ROOT, rel), join(stage, rel), {
    recursive: true,
    dereference: true,
    filter: (src) => !src.startsWith(join(ROOT, rel, 'node_modules')),
  });
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
// The manifest as published: only what ships unbundled is a dependency (vsce lists it with npm).
pkg.dependencies = Object.fromEntries(
  RUNTIME_PACKAGES.map((n) => [
    n,
    pkg.dependencies?.[n] ?? JSON.parse(readFileSync(join(stage, 'node_modules', n, 'package.json'), 'utf8')).version,
  ]),
);
delete pkg.devDependencies;
delete pkg.scripts;
writeFileSync(join(stage, 'package.json'), `${JSON.stringify(pkg, null, 2)}\n`);

const vsce = join(ROOT, 'node_modules', '@vscode', 'vsce', 'vsce');
run(
  process.execPath,
  [vsce, 'package', '--target', target, '--no-rewrite-relative-links', '--allow-missing-repository', '--skip-license', '-o', out],
  stage,
);
console.log(`packaged ${out} (${modules.length} runtime packages: ${RUNTIME_PACKAGES.join(', ')} and their dependencies)`);
