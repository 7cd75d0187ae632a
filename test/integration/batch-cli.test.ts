// `harness-lab batch` input errors, each before anything is written: usage, group size, unknown
// harness, a broken task naming file and field, a k8s backend missing from this build, a directory
// that is no batch.
import assert from 'node:assert/strict';
import { cpSync, existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { EXAMPLES, cli } from './sandbox-fixtures.js';

test('batch submit refuses bad input before creating the batch directory', { timeout: 120_000 }, async () => {
  const root = mkdtempSync(join(tmpdir(), 'hl-batch-cli-'));
  const out = join(root, 'batch');
  const base = ['batch', 'submit', '--tasks', join(EXAMPLES, 'hello-file'), '--harness', 'react', '--out', out];

  let r = await cli(['batch']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /^harness-lab batch: a subcommand is required\n\nusage: harness-lab batch submit --tasks DIR\|GLOB/);
  r = await cli(['batch', 'status', '--help']);
  assert.equal(r.code, 0);
  assert.match(r.stdout, /^usage: harness-lab batch status BATCH \[--json\]/);
  r = await cli(['batch', 'submit', '--harness', 'react', '--group-size', '2']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /^harness-lab batch submit: --tasks is required/);
  r = await cli(['batch', 'frobnicate']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /unknown batch subcommand 'frobnicate'/);
  r = await cli([...base, '--group-size', '1']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--group-size must be an integer of at least 2/);
  r = await cli([
    'batch',
    'submit',
    '--tasks',
    join(EXAMPLES, 'hello-file'),
    '--harness',
    'react,cursor-cli',
    '--group-size',
    '2',
    '--out',
    out,
  ]);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /unknown harness 'cursor-cli'; known harnesses: react, codex/);
  cpSync(join(EXAMPLES, 'fix-script'), join(root, 'tasks', 'broken'), { recursive: true });
  writeFileSync(join(root, 'tasks', 'broken', 'task.toml'), '[verifier]\ntimeout_sec = "soon"\n');
  r = await cli(['batch', 'submit', '--tasks', join(root, 'tasks', '*'), '--harness', 'react', '--group-size', '2', '--out', out]);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /broken\/task\.toml: verifier\.timeout_sec: /);
  if (!existsSync(join(__dirname, '..', '..', 'src', 'batch', 'backends', 'k8s', 'index.ts'))) {
    // Until the Kubernetes backend is merged, asking for it is a clear error, not a stack trace.
    r = await cli([...base, '--group-size', '2', '--backend', 'k8s']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /the Kubernetes backend \(src\/batch\/backends\/k8s\/\) is not part of this build; use --backend docker/);
  }
  r = await cli([...base, '--group-size', '2', '--max-starting=-1']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--max-starting must be a non-negative integer, got '-1'/);
  r = await cli([...base, '--group-size', '2', '--breaker-after=-3']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--breaker-after must be a non-negative integer, got '-3'/);
  r = await cli([...base, '--group-size', '2', '--start-timeout', '0']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--start-timeout must be a positive number of seconds, got 0/);
  r = await cli(['batch', 'status', root, '--stall-after=-1']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--stall-after must be a non-negative integer, got '-1'/);
  r = await cli([...base, '--group-size', '2', '--dry-run']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--dry-run .* needs --backend k8s/);
  assert.equal(existsSync(out), false, 'nothing was written');

  r = await cli(['batch', 'status', root]);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /batch\.json: not found \(is this a batch directory\?\)/);
});
