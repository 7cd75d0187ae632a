// `npm run bench`: every benchmark entry in sequence, each in its own node process.
//   npm run bench                      all entries
//   npm run bench -- proxy-load        only the named entries
//   npm run bench -- --quick           quick mode for all (passes --quick and sets BENCH_QUICK=1)
// Entry-specific flags: run the entry directly, e.g. `node --import tsx bench/proxy-load.ts --levels 64`.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

/** Benchmark entries, run in this order. Add a line when a new bench/<name>.ts appears. */
const ENTRIES = ['proxy-load', 'hot-path', 'prompt-cost', 'token-in-cost', 'engine', 'viewer', 'export', 'batch', 'serve', 'store', 'soak'];

const args = process.argv.slice(2);
const quick = args.includes('--quick');
const unknownFlags = args.filter((a) => a.startsWith('-') && a !== '--quick');
if (unknownFlags.length) {
  process.stderr.write(
    `run-all: unknown flag(s) ${unknownFlags.join(' ')}; only --quick applies to every entry. Entries: ${ENTRIES.join(', ')}\n`,
  );
  process.exit(2);
}
const picked = args.filter((a) => !a.startsWith('-'));
const unknown = picked.filter((p) => !ENTRIES.includes(p));
if (unknown.length) {
  process.stderr.write(`run-all: no bench entry named ${unknown.join(', ')}; entries: ${ENTRIES.join(', ')}\n`);
  process.exit(2);
}

const failed: string[] = [];
for (const name of picked.length ? picked : ENTRIES) {
  const file = join(__dirname, `${name}.ts`);
  if (!existsSync(file)) {
    process.stderr.write(`run-all: skipping ${name}: bench/${name}.ts does not exist yet\n`);
    continue;
  }
  process.stderr.write(`\n=== bench ${name} ===\n`);
  const env = quick ? { ...process.env, BENCH_QUICK: '1' } : process.env;
  const result = spawnSync(process.execPath, ['--import', 'tsx', file, ...(quick ? ['--quick'] : [])], { stdio: 'inherit', env });
  if (result.status !== 0) failed.push(`${name} (exit ${result.status ?? result.signal})`);
}
if (failed.length) {
  process.stderr.write(
    `\nbench: ${failed.length} entr${failed.length === 1 ? 'y' : 'ies'} failed or missed a target: ${failed.join(', ')}\n`,
  );
  process.exit(1);
}
