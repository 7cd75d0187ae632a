// Where rollouts go and how a validation reads, without vscode; and "Start Embedded Engine"'s process:
// the bundled CLI's `harness-lab engine` started, answering /v1/models and /detokenize, then ended.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { EngineProcess, EngineSlot, bundledCli } from '../../src/extension/embedded-engine-process.js';
import { rolloutsDir, validationMarkdown } from '../../src/extension/task-rollout-model.js';
import type { ValidationTable } from '../../src/sandbox/validate.js';

const root = join(__dirname, '..', '..');

test('rollouts go under the workspace (harnessLab.rolloutsDir), an absolute setting as is, else global storage', () => {
  assert.equal(rolloutsDir('', '/ws', '/gs'), '/ws/.harness-lab/rollouts');
  assert.equal(rolloutsDir('out/rollouts', '/ws', '/gs'), '/ws/out/rollouts');
  assert.equal(rolloutsDir('/data/rollouts', '/ws', '/gs'), '/data/rollouts');
  assert.equal(rolloutsDir('.harness-lab/runs', '/ws', '/gs'), '/ws/.harness-lab/runs', 'an old harnessLab.runsDir value as is');
  assert.equal(rolloutsDir('', undefined, '/gs'), '/gs/rollouts');
});

test('a validation reads as a Markdown table; pipes and newlines in details stay inside their cell', () => {
  const table = {
    harness: 'react',
    task: 'hello-file',
    sandbox: 'docker',
    ok: false,
    rows: [
      { check: 'rollout finished', ok: true, detail: 'status ok' },
      { check: 'graph well formed', ok: false, detail: 'a | b\nsecond line' },
    ],
    rollout: { out_dir: '/ws/.harness-lab/rollouts/hello-file/react/0', session_id: 's1' },
  } as unknown as ValidationTable;
  const md = validationMarkdown(table);
  assert.match(md, /^# react: capture contract on task hello-file \(docker\)/);
  assert.match(md, /\*\*FAIL\*\*: 1 of 2 checks pass\./);
  assert.match(md, /\| graph well formed \| \*\*FAIL\*\* \| a \\\| b<br>second line \|/);
  assert.equal(md.split('\n').filter((l) => l.startsWith('| ')).length, 4, 'header, separator and two rows');
  assert.match(validationMarkdown(table, true), /\*\*Cancelled\*\*/);
});

test('Start Embedded Engine: the bundled CLI serves the engine until its owner is disposed', { timeout: 240_000 }, async () => {
  const cli = join(root, 'dist', 'cli.js');
  assert.ok(existsSync(cli), 'dist/cli.js is missing: run `npm run build`');
  assert.equal(bundledCli(root), cli);
  assert.throws(() => bundledCli('/nonexistent'), /reinstall the extension/);
  const lines: string[] = [];
  const log = { info: (m: string) => lines.push(m), warn: (m: string) => lines.push(m) };
  const slot = new EngineSlot();
  const engine = await EngineProcess.start({ cliPath: cli, policy: join(root, 'examples', 'tasks', 'hello-file', 'policy.json'), log });
  slot.replace(engine);
  assert.match(engine.url, /^http:\/\/127\.0\.0\.1:\d+$/);
  assert.equal(slot.current, engine);
  const models = (await (await fetch(`${engine.url}/v1/models`)).json()) as { data: { id: string }[] };
  assert.equal(models.data.length, 1);
  const detok = await fetch(`${engine.url}/detokenize`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ tokens: [151644] }),
  });
  assert.deepEqual(await detok.json(), { prompt: '<|im_start|>' });
  assert.ok(
    lines.some((l) => /embedded engine \(pid \d+\) listening on/.test(l)),
    lines.join('\n'),
  );
  slot.dispose();
  await engine.whenExited();
  assert.equal(slot.current, undefined);
  await assert.rejects(fetch(`${engine.url}/health`), 'the engine is gone with its owner');
});

test('a CLI that fails to start is reported with its stderr', async () => {
  const log = { info: () => undefined, warn: () => undefined };
  await assert.rejects(
    EngineProcess.start({ cliPath: join(root, 'dist', 'cli.js'), policy: '/no/such/policy.json', log }),
    /exited before listening[\s\S]*policy/,
  );
});
