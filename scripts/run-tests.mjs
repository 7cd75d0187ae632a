// Runs every test file with node's built-in runner (TypeScript through tsx).
// `node scripts/run-tests.mjs [unit|integration|e2e ...]` limits the run to those folders.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';

const folders = process.argv.slice(2).length ? process.argv.slice(2) : ['unit', 'integration', 'e2e'];
const files = [];
const walk = (dir) => {
  let entries = [];
  try { entries = readdirSync(dir); } catch { return; }
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
const concurrency = process.env.TEST_CONCURRENCY ?? '2';
// A hung test fails after 15 minutes instead of stalling the run (tests with their own timeout keep it).
const timeout = process.env.TEST_TIMEOUT_MS ?? '900000';
const result = spawnSync(process.execPath, ['--import', 'tsx', '--test', `--test-concurrency=${concurrency}`, `--test-timeout=${timeout}`, ...files], { stdio: 'inherit' });
process.exit(result.status ?? 1);
