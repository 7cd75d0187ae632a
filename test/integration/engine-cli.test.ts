// `harness-lab engine` as a process: first stdout line, serving, clean exit on SIGTERM, usage errors.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { TEST_DATA_DIR } from './engine-fixture.js';

const CLI = ['--import', 'tsx', 'src/cli/main.ts', 'engine'];
const env = { ...process.env, HARNESS_LAB_DATA_DIR: TEST_DATA_DIR };

test('prints "engine listening on URL" first, serves, and exits 0 on SIGTERM', async () => {
  const child = spawn(process.execPath, [...CLI, '--port', '0', '--policy', 'two-tool-calls', '--seed', '0'], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  try {
    const lines = createInterface({ input: child.stdout });
    const [first] = (await once(lines, 'line')) as [string];
    const m = /^engine listening on (http:\/\/127\.0\.0\.1:\d+)$/.exec(first);
    assert.ok(m, `first line: ${first}`);
    const models = (await (await fetch(`${m[1]}/v1/models`)).json()) as { data: { id: string }[] };
    assert.equal(models.data[0]!.id, 'harness-lab/tiny-qwen3');
    assert.match(stderr, /policy .*two-tool-calls\.json/);
  } finally {
    child.kill('SIGTERM');
  }
  const [code] = (await once(child, 'exit')) as [number | null];
  assert.equal(code, 0, stderr);
});

test('usage errors exit 2 with the reason', () => {
  const cases: [string[], RegExp][] = [
    [['--logprobs-mode', 'sometimes'], /--logprobs-mode must be processed or raw/],
    [['--model', '/no/such.gguf'], /--model: no such file/],
    [['--policy', 'no-such-policy'], /neither a file nor a shipped policy/],
    [['--port', 'x'], /--port must be a non-negative integer/],
  ];
  for (const [args, message] of cases) {
    const r = spawnSync(process.execPath, [...CLI, ...args], { env, encoding: 'utf8' });
    assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message);
  }
});
