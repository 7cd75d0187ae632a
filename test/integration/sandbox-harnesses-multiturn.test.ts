// Every registry harness (and the reference one) on the sum-numbers Harbor task in its own Docker
// sandbox, the embedded engine answering with the task's scripted policy of three shell calls in a row:
// reward 1.0, a passing capture contract and ATIF match, and the rollout one root whose tool turns are
// linked, each extending the one before. HARNESS_LAB_SANDBOX_HARNESSES=a,b narrows it (development aid).
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type Docker from 'dockerode';
import { startEmbeddedEngine, type EmbeddedEngine } from '../../src/engine/embedded-engine.js';
import { formatValidationTable, validateHarness } from '../../src/sandbox/validate.js';
import { EXAMPLES, containersOf, dockerReady, outDir, realHarnesses } from './sandbox-fixtures.js';

const MULTI_TURN_TASK = join(EXAMPLES, 'sum-numbers');
const PER_HARNESS_MS = 600_000;

describe('harnesses in Docker sandboxes, three tool calls in a row (sum-numbers)', { concurrency: false }, () => {
  let docker: Docker;
  let engine: EmbeddedEngine;

  before(async () => {
    docker = await dockerReady();
    engine = await startEmbeddedEngine({ policy: join(MULTI_TURN_TASK, 'policy.json') });
  });
  after(async () => {
    await engine?.close();
  });

  for (const harness of process.env.HARNESS_LAB_SANDBOX_HARNESSES ? realHarnesses() : ['react', ...realHarnesses()]) {
    test(`${harness}: three linked tool-call turns, reward 1.0, passing contract and ATIF match`, { timeout: PER_HARNESS_MS }, async () => {
      const table = await validateHarness({
        harness,
        taskDir: MULTI_TURN_TASK,
        sandbox: 'docker',
        engineUrl: engine.url,
        outDir: outDir(),
        handleSignals: false,
      });
      const shown = formatValidationTable(table);
      assert.equal(table.rollout.reward, 1, shown);
      assert.equal(table.rollout.isolation, 'no-network', shown);
      assert.ok(table.ok, shown);
      assert.equal(table.rollout.atif.verdict, 'match', shown);
      const calls = table.rollout.rollout?.calls ?? [];
      const toolTurns = calls.filter((c) => c.finish_reason === 'tool_calls');
      assert.ok(toolTurns.length >= 3, `${toolTurns.length} tool-call turn(s)\n${shown}`);
      // The three tool turns and the answer after them are one chain: each extends the one before.
      const graph = table.rollout.rollout?.graph;
      const parentOf = new Map((graph?.nodes ?? []).map((n) => [n.node_id, n.parent_id]));
      const chained = toolTurns.slice(1).filter((c) => parentOf.get(c.call_id) !== null);
      assert.equal(chained.length, toolTurns.length - 1, `every tool turn after the first has a parent\n${shown}`);
      assert.equal((await containersOf(docker, process.pid)).length, 0, 'the sandbox is removed after the rollout');
    });
  }
});
