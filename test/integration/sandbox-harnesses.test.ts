// Real, unmodified harnesses in their own Docker containers against the hello-file Harbor task, the
// embedded engine answering with the task's scripted policy: each rollout must end with reward 1.0 and
// pass the whole capture contract (calls vs the harness's own log, dialect, token ids and logprobs,
// graph, ATIF cross-check, reward, no capture key in the verifier), with no network in the sandbox:
// every model call goes through the rollout's session socket and the relay. The reference harness
// goes first and through the CLI without --engine-url (which starts the embedded engine itself).
// sandbox-harnesses-multiturn.test.ts runs them all on sum-numbers (a file of its own: each file gets
// the runner's 15 minutes). HARNESS_LAB_SANDBOX_HARNESSES=a,b narrows both to the named harnesses.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type Docker from 'dockerode';
import { startEmbeddedEngine, type EmbeddedEngine } from '../../src/engine/embedded-engine.js';
import { harnessNames } from '../../src/harness/registry.js';
import { contractRows, formatValidationTable, validateHarness } from '../../src/sandbox/validate.js';
import { EXAMPLES, cli, containersOf, dockerReady, outDir, realHarnesses } from './sandbox-fixtures.js';

const TASK = join(EXAMPLES, 'hello-file');
const PER_HARNESS_MS = 600_000;

describe('harnesses in Docker sandboxes', { concurrency: false }, () => {
  let docker: Docker;
  let engine: EmbeddedEngine;

  before(async () => {
    docker = await dockerReady();
    engine = await startEmbeddedEngine({ policy: join(TASK, 'policy.json') });
  });
  after(async () => {
    await engine?.close();
  });

  test(
    'reference harness: `harness-lab rollout` without --engine-url, reward 1.0, rollout written, contract passes',
    { timeout: PER_HARNESS_MS },
    async () => {
      const out = outDir();
      let pid = 0;
      const r = await cli(['rollout', '--task', TASK, '--harness', 'react', '--out', out], { onStart: (p) => (pid = p) });
      assert.equal(r.code, 0, r.stdout + r.stderr);
      assert.match(r.stdout, /^\[react \/ docker\] task hello-file: ok reward=1\.00 turns=2 roots=1 tokens=\d+ atif=match \d+s$/m);
      const doc = JSON.parse(readFileSync(join(out, 'hello-file', 'react', '0', 'rollout.json'), 'utf8'));
      assert.equal(doc.reward, 1);
      assert.equal(
        doc.isolation,
        'no-network',
        'hello-file declares no network: the harness reached the model through its session socket only',
      );
      assert.equal(doc.trainable, true);
      assert.equal(doc.rollout.calls.length, 2);
      assert.ok(doc.rollout.traces.length >= 1, 'training traces are written');
      assert.ok(existsSync(join(out, 'hello-file', 'react', '0', 'agent', 'trajectory.json')));
      assert.ok(existsSync(join(out, 'hello-file', 'react', '0', 'verifier', 'reward.txt')));
      assert.deepEqual(await containersOf(docker, pid), [], 'no container is left behind');
      // The same rollout record, checked against the whole capture contract.
      const rows = contractRows(doc);
      assert.deepEqual(
        rows.filter((row) => !row.ok),
        [],
        rows.map((row) => `${row.check}: ${row.detail}`).join('\n'),
      );
      assert.equal(rows.length, 8);
    },
  );

  test('the registry has at least ten real harness CLIs', () => {
    assert.ok(harnessNames().filter((n) => n !== 'react').length >= 10, harnessNames().join(', '));
  });

  for (const harness of realHarnesses()) {
    test(`${harness}: reward 1.0 and a passing capture contract`, { timeout: PER_HARNESS_MS }, async () => {
      const table = await validateHarness({
        harness,
        taskDir: TASK,
        sandbox: 'docker',
        engineUrl: engine.url,
        outDir: outDir(),
        handleSignals: false,
      });
      const shown = formatValidationTable(table);
      assert.equal(table.rollout.reward, 1, shown);
      assert.equal(table.rollout.isolation, 'no-network', shown);
      assert.ok(table.ok, shown);
      assert.equal(table.rows.length, 8);
      assert.equal(table.rollout.atif.verdict, 'match', shown);
      assert.equal((await containersOf(docker, process.pid)).length, 0, 'the sandbox is removed after the rollout');
    });
  }
});
