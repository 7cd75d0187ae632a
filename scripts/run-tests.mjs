// Runs every test file with node's built-in runner (TypeScript through tsx).
// `node scripts/run-tests.mjs [unit|integration|e2e ...]` limits the run to those folders.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { URL, fileURLToPath } from 'node:url';

const folders = process.argv.slice(2).length ? process.argv.slice(2) : ['unit', 'integration', 'e2e'];
const files = [];
const walk = (dir) => {
  let entries = [];
  try {
    entries = readdirSync(dir);
  } catch {
    return;
  }
  for (const name of entries.sort()) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path);
    else if (name.endsWith('.test.ts')) files.push(path);
  }
};
for (const folder of folders) walk(join('test', folder));
if (files.length === 0) {
  console.error(`no test files under ${folders.map((f) => `test/${f}`).join(', ')}`);
  process.exit(1);
}
// First what the folders' tests need on this machine (scripts/provision.ts: apt packages, dockerd,
// base images, harness CLIs, code-server + chromium, the bundle), installed or started when missing.
// Whatever is still missing makes the run fail, as do the tests that need it, each naming it.
let provisioned = 0;
if (process.env.HARNESS_LAB_PROVISION === '0') {
  console.log('[provision] not run (HARNESS_LAB_PROVISION=0): tests whose prerequisites are missing will fail naming them');
} else {
  const tops = [...new Set(folders.map((f) => f.split(/[\\/]/)[0]).filter((f) => ['unit', 'integration', 'e2e'].includes(f)))];
  const script = fileURLToPath(new URL('./provision.ts', import.meta.url));
  if (tops.length) provisioned = spawnSync(process.execPath, ['--import', 'tsx', script, ...tops], { stdio: 'inherit' }).status ?? 1;
}
const concurrency = process.env.TEST_CONCURRENCY ?? '2';
// A hung test fails after 15 minutes instead of stalling the run (tests with their own timeout keep it).
const timeout = process.env.TEST_TIMEOUT_MS ?? '900000';
const result = spawnSync(
  process.execPath,
  ['--import', 'tsx', '--test', `--test-concurrency=${concurrency}`, `--test-timeout=${timeout}`, ...files],
  { stdio: 'inherit' },
);
if (provisioned !== 0)
  console.error(
    '\n[provision] some prerequisites were missing (see the [provision] lines at the start): this run fails even where their tests passed',
  );
process.exit(result.status || provisioned || (result.status === null ? 1 : 0));
