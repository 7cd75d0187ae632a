// `harness-lab serve` against a client that sends exactly OpenEnv's Harbor frames, with the Docker
// backend and the scripted policy engine behind a front that records what the engine saw:
// the task API; a GRPO group of 4 rollouts of one task in parallel (3 over /ws, 1 over the /mcp
// session-create variant), one of them killed from outside, all answered as values; every turn
// passes the TrainingTrace turn schema; the engine saw the trainer's pinned sampling although the
// harness asked for another; one session over the cap gets CAPACITY_REACHED; the protocol's error
// frames; and a server killed mid-rollout gives the client a dropped socket (not a result), keeps
// what was captured, and the restarted server marks the rollout interrupted, reaps a sandbox the
// dead server's late create left after start-up, and serves again.
/* eslint-disable @typescript-eslint/no-explicit-any -- wire JSON from the server under test, checked field by field as a Python client reads it */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type Docker from 'dockerode';
import { TrainingTurnSchema } from '../../src/capture/trace.js';
import { LABEL } from '../../src/sandbox/docker-client.js';
import { TaskRoutedPolicy, startPolicyEngine, type PolicyEngine } from '../../src/sandbox/policy-engine.js';
import { loadTask } from '../../src/tasks/task.js';
import { dockerReady, waitFor } from './sandbox-fixtures.js';
import {
  postJson,
  asTrainingTurn,
  recordingFront,
  servedContainers,
  rolloutResult,
  slowTask,
  startServe,
  stepFrame,
  tempDir,
  wsSession,
  type ServeProcess,
  runRolloutArgs,
  capturedCalls,
  servedStates,
} from './serve-fixtures.js';

const PINNED = { temperature: 0.7, top_p: 1, top_k: -1, min_p: 0, frequency_penalty: 0, presence_penalty: 0, repetition_penalty: 1 };
const ASKED = { temperature: 0.2, top_p: 0.5 };

/** docs/trainer-contracts.md §1.2: what a trainer's worker treats as fatal if violated. */
function assertValidTurns(result: any): void {
  const kept = result.turns.filter((t: any) => t.role === 'agent' && !t.discarded && t.completion_token_ids.length > 0);
  assert.ok(kept.length >= 1, 'a completed rollout has trainable turns');
  assert.equal(new Set(kept.map((t: any) => t.node_id)).size, kept.length, 'node ids unique');
  for (const t of kept) {
    assert.equal(t.trainable, true);
    assert.ok(t.prompt_token_ids.length > 0, 'prompt non-empty');
    for (const id of [...t.prompt_token_ids, ...t.completion_token_ids]) assert.ok(Number.isInteger(id) && id >= 0, `token id ${id}`);
    assert.equal(t.per_token_logps.length, t.completion_token_ids.length);
    for (const lp of t.per_token_logps) assert.ok(Number.isFinite(lp) && lp <= 0, `logprob ${lp}`);
    assert.equal(t.loss_mask.length, t.prompt_token_ids.length + t.completion_token_ids.length);
    assert.ok(t.loss_mask.every((m: number) => m === 0 || m === 1));
    assert.ok(
      t.loss_mask.slice(0, t.prompt_token_ids.length).every((m: number) => m === 0),
      'prompt part of the mask is 0',
    );
    const parsed = TrainingTurnSchema.safeParse(asTrainingTurn(t));
    assert.ok(parsed.success, parsed.success ? '' : JSON.stringify(parsed.error.issues));
  }
  assert.ok(!result.findings.some((f: string) => f.startsWith('[FATAL')), result.findings.join('; '));
}

describe('harness-lab serve speaks OpenEnv Harbor to a TRL-shaped client', { concurrency: false }, () => {
  let docker: Docker;
  let engine: PolicyEngine;
  let front: Awaited<ReturnType<typeof recordingFront>>;
  let tasksRoot: string;
  let stateDir: string;
  let serve: ServeProcess;
  let servedInstruction = '';

  before(async () => {
    docker = await dockerReady();
    tasksRoot = tempDir('hl-serve-tasks-');
    slowTask(tasksRoot, 'a-quick', 1, ASKED);
    slowTask(tasksRoot, 'b-slow', 6, ASKED);
    const tasks = ['a-quick', 'b-slow'].map((f) => loadTask(join(tasksRoot, f)));
    engine = await startPolicyEngine(
      new TaskRoutedPolicy(tasks.map((t) => ({ instruction: t.instruction, policyFile: t.policyFile! }))),
      'fake',
    );
    front = await recordingFront(engine.url);
    stateDir = tempDir('hl-serve-state-');
    serve = await startServe(['--dataset', `train=${tasksRoot}`, '--max-concurrent', '4', '--parallel', '4', '--state-dir', stateDir]);
  });

  after(async () => {
    serve?.child.kill('SIGTERM');
    await serve?.exited;
    front?.server.close();
    await engine?.close();
  });

  const args = (taskIndex: number, extra: Record<string, unknown> = {}) =>
    runRolloutArgs({ task_index: taskIndex, llm_url: front.url, model: engine.model, sampling: PINNED, ...extra });

  test('the task API: splits, num_tasks, task_range, task; the instruction is the prompt exactly', async () => {
    const splits = await (await fetch(`${serve.url}/harbor_env/splits`)).json();
    assert.deepEqual(splits, [{ name: 'train', num_tasks: 2 }]);
    assert.deepEqual((await postJson(`${serve.url}/harbor_env/num_tasks`, { split: 'train' })).body, { num_tasks: 2 });
    const range = await postJson(`${serve.url}/harbor_env/task_range`, { split: 'train', start: 0, stop: 2 });
    assert.equal(range.body.tasks.length, 2);
    const one = await postJson(`${serve.url}/harbor_env/task`, { split: 'train', index: 1 });
    assert.deepEqual(Object.keys(one.body.task).sort(), ['dataset', 'index', 'instruction', 'task_id', 'task_name']);
    assert.deepEqual(one.body.task, range.body.tasks[1]);
    assert.equal(one.body.task.task_id, 'serve-test/b-slow');
    const prompt = readFileSync(join(tasksRoot, 'b-slow', 'instruction.md'), 'utf8').trim();
    assert.equal(one.body.task.instruction, prompt);
    servedInstruction = one.body.task.instruction;
    // The client's map: sha1(instruction.strip()) -> index.
    const sha = (s: string) => createHash('sha1').update(s.trim()).digest('hex');
    assert.equal(new Map(range.body.tasks.map((t: any) => [sha(t.instruction), t.index])).get(sha(prompt)), 1);
    assert.equal((await postJson(`${serve.url}/harbor_env/task`, { split: 'nope', index: 0 })).status, 404);
    assert.equal((await postJson(`${serve.url}/harbor_env/task`, { split: 'train', index: 9 })).status, 404);
    assert.equal((await postJson(`${serve.url}/harbor_env/num_tasks`, {})).status, 422);
  });

  test('error frames: INVALID_JSON, UNKNOWN_TYPE, VALIDATION_ERROR, SESSION_ERROR; a bad rollout request is a value', async () => {
    const r = await wsSession(serve.url, [
      'not json',
      { type: 'dance' },
      { type: 'step', data: { type: 'call_tool', tool_name: 'run_rollout', arguments: { split: 'train' } } },
      stepFrame(args(7)),
    ]);
    assert.deepEqual(
      r.frames.slice(0, 3).map((f) => [f.type, f.data.code]),
      [
        ['error', 'INVALID_JSON'],
        ['error', 'UNKNOWN_TYPE'],
        ['error', 'VALIDATION_ERROR'],
      ],
    );
    const bad = rolloutResult(r.frames[3]);
    assert.equal(bad.ok, false);
    assert.equal(bad.reward, null);
    assert.equal(bad.exception_type, 'IndexError');
    const unknown = await wsSession(serve.url, [], { sessionId: 'no-such-session' });
    assert.equal(unknown.frames[0].data.code, 'SESSION_ERROR');
    const rpc = await postJson(`${serve.url}/mcp`, {
      jsonrpc: '2.0',
      id: 5,
      method: 'openenv/session/close',
      params: { session_id: 'gone' },
    });
    assert.equal(rpc.body.error.data.code, 'SESSION_ERROR');
    assert.equal((await postJson(`${serve.url}/mcp`, { jsonrpc: '2.0', id: 6, method: 'nope' })).body.error.code, -32601);
  });

  test(
    'a group of 4 in parallel (3 over /ws, 1 over /mcp session-create), one killed from outside, all answered as values; capacity reached at 5',
    { timeout: 300_000 },
    async () => {
      const before = front.bodies.length;
      const viaWs = [0, 1, 2].map(() => wsSession(serve.url, [stepFrame(args(1))]));
      const created = await postJson(`${serve.url}/mcp`, { jsonrpc: '2.0', id: 1, method: 'openenv/session/create', params: {} });
      const sessionId = created.body.result.session_id as string;
      assert.match(sessionId, /\S+/);
      const viaMcp = wsSession(serve.url, [stepFrame(args(1))], { sessionId });

      // Every slot is taken: a fifth session is refused at connect, over both transports.
      await waitFor(
        '4 sessions open',
        async () => ((await (await fetch(`${serve.url}/health`)).json()).active_sessions === 4 ? true : undefined),
        30_000,
      );
      const over = await wsSession(serve.url, [stepFrame(args(0))]);
      assert.equal(over.frames[0].type, 'error');
      assert.equal(over.frames[0].data.code, 'CAPACITY_REACHED');
      assert.equal(over.frames[0].data.active_sessions, 4);
      assert.equal(over.frames[0].data.max_sessions, 4);
      const overRpc = await postJson(`${serve.url}/mcp`, { jsonrpc: '2.0', id: 2, method: 'openenv/session/create', params: {} });
      assert.equal(overRpc.body.error.data.code, 'CAPACITY_REACHED');
      assert.equal(overRpc.body.error.data.max_sessions, 4);

      // One member's sandbox dies from outside while its harness waits on its tool.
      const victim = await waitFor(
        'a group member inside its tool',
        async () => {
          const running = servedStates(stateDir).find(
            (s) => s.state.state === 'running' && s.state.session_id && capturedCalls(s.dir, s.state.session_id).length >= 1,
          );
          if (!running) return undefined;
          const c = (await servedContainers(docker, stateDir)).find(
            (x) => x.Labels[LABEL.rollout] === running.state.rollout_id && x.State === 'running',
          );
          return c ? { id: c.Id, rollout: running.state.rollout_id } : undefined;
        },
        120_000,
      );
      await docker.getContainer(victim.id).kill();

      const outcomes = await Promise.all([...viaWs, viaMcp]);
      const results = outcomes.map((o) => {
        assert.equal(o.closeCode, 1000, 'the session closed normally after its result');
        return rolloutResult(o.frames[0]);
      });
      const closed = await postJson(`${serve.url}/mcp`, {
        jsonrpc: '2.0',
        id: 3,
        method: 'openenv/session/close',
        params: { session_id: sessionId },
      });
      assert.equal(closed.body.result.closed, true);

      const failed = results.filter((r) => !r.ok);
      const good = results.filter((r) => r.ok);
      assert.equal(failed.length, 1, JSON.stringify(results.map((r) => [r.ok, r.error])));
      assert.equal(failed[0].trial_name, victim.rollout);
      assert.equal(failed[0].reward, null);
      assert.equal(failed[0].exception_type, 'InfraError');
      assert.match(failed[0].error, /\S/);
      assert.equal(good.length, 3);
      for (const r of good) {
        assert.equal(r.reward, 1);
        assert.equal(r.reward_key, 'reward');
        assert.equal(r.rollout_type, 'train');
        assert.equal(r.capture_level, 'tokens');
        assert.equal(r.task_id, 'serve-test/b-slow');
        assert.equal(r.dataset, 'train');
        for (const key of [
          'harness',
          'sandbox',
          'session_id',
          'rewards',
          'step_results',
          'param_fixes',
          'conversations',
          'n_turns',
          'n_roots',
          'budget_stop_count',
          'n_trainable_tokens',
          'multi_turn',
          'atif',
          'trace_source',
          'wall_s',
          'phase_timings',
          'agent_log_tail',
          'error',
          'exception_type',
        ])
          assert.ok(key in r, `HarborRolloutResult.${key}`);
        assert.ok(r.n_trainable_tokens > 0);
        assertValidTurns(r);
        // The prompt the harness sent is the instruction the task API served, exactly.
        assert.equal(r.turns[0].request_messages.find((m: any) => m.role === 'user').content, servedInstruction);
        for (const t of r.turns) {
          for (const key of [
            'turn',
            'role',
            'finish_reason',
            'prompt_token_ids',
            'completion_token_ids',
            'per_token_logps',
            'loss_mask',
            'node_id',
            'n_tools',
            'discarded',
            'trainable',
            'sampling_params',
            'requested_sampling_params',
            'text',
            'tool_calls',
            'request_messages',
            'request_tools',
          ])
            assert.ok(key in t, `HarborTurn.${key}`);
          // Both recorded: what the harness asked for, and what was submitted (the trainer's).
          assert.equal(t.requested_sampling_params.temperature, ASKED.temperature);
          assert.equal(t.requested_sampling_params.top_p, ASKED.top_p);
          assert.equal(t.sampling_params.temperature, PINNED.temperature);
          assert.equal(t.sampling_params.top_p, PINNED.top_p);
        }
      }
      // What the engine itself received: the pinned sampling on every call, never the harness's.
      // (The proxy's own engine probe, at first contact, is not a harness call: it carries no task.)
      const seen = front.bodies.slice(before).filter((b) => JSON.stringify(b.messages).includes('b-slow.txt'));
      assert.ok(seen.length >= 7, `the engine saw ${seen.length} calls`);
      for (const b of seen) for (const [k, v] of Object.entries(PINNED)) assert.equal(b[k], v, `engine saw ${k}=${b[k]}`);
      assert.deepEqual(await servedContainers(docker, stateDir), [], 'no sandbox is left');
    },
  );

  test(
    'a server killed mid-rollout: the client sees a dropped socket, the capture is kept, the restarted server marks it interrupted and serves again (over HTTP openenv/session/step)',
    { timeout: 300_000 },
    async () => {
      let socket: import('ws').WebSocket | undefined;
      const pending = wsSession(serve.url, [stepFrame(args(1))], { onSocket: (ws) => (socket = ws) });
      const mid = await waitFor(
        'the rollout inside its tool',
        async () => {
          const s = servedStates(stateDir).find(
            (x) => x.state.state === 'running' && x.state.session_id && capturedCalls(x.dir, x.state.session_id).length >= 1,
          );
          return s && (await servedContainers(docker, stateDir)).some((c) => c.Labels[LABEL.rollout] === s.state.rollout_id)
            ? s
            : undefined;
        },
        120_000,
      );
      // The client's keepalive: a ping mid-rollout is answered, so a slow rollout is not taken for a dead server.
      const pong = await new Promise<string>((resolve) => {
        socket!.once('pong', (data) => resolve(data.toString()));
        socket!.ping('still-there');
      });
      assert.equal(pong, 'still-there');
      const callsBefore = capturedCalls(mid.dir, mid.state.session_id!);
      serve.child.kill('SIGKILL');
      await serve.exited;
      const dropped = await pending;
      assert.equal(dropped.frames.length, 0, 'no result, no error frame: nothing a trainer could take for a wrong answer');
      assert.equal(dropped.closeCode, 1006, 'the connection dropped without a close frame');
      assert.ok((await servedContainers(docker, stateDir)).length >= 1, 'kill -9 leaves the sandbox behind');

      const deadPid = serve.child.pid!;
      serve = await startServe(['--dataset', `train=${tasksRoot}`, '--max-concurrent', '4', '--parallel', '4', '--state-dir', stateDir]);
      assert.match(
        serve.stderr(),
        new RegExp(`marked 1 rollout\\(s\\) a previous server was running as interrupted: ${mid.state.rollout_id.replace(/\./g, '\\.')}`),
      );
      // What the dead server left goes at start-up, and what its daemon finished creating later goes to the reaper.
      await waitFor(
        'the restarted server removed what the dead one left',
        async () => ((await servedContainers(docker, stateDir)).length === 0 ? true : undefined),
        60_000,
      );
      // A create the daemon was still finishing for the killed server lands after that start-up
      // cleanup, whenever it likes. The same thing, made to happen now: a container with the dead
      // server's labels appears after start-up; the running server reaps it, and only it.
      const batch = `serve-${readdirSync(join(stateDir, 'engines'))[0]}`;
      const late = await docker.createContainer({
        Image: 'harness-lab/base:bookworm',
        Cmd: ['sleep', '600'],
        Labels: {
          [LABEL.kind]: 'sandbox',
          [LABEL.batch]: batch,
          [LABEL.rollout]: mid.state.rollout_id,
          [LABEL.owner]: `${hostname()}/${deadPid}`,
        },
        HostConfig: { NetworkMode: 'none' },
      });
      await waitFor(
        'the late container reaped',
        async () => ((await servedContainers(docker, stateDir)).length === 0 ? true : undefined),
        60_000,
      );
      // The server logs the reap after the removal; its stderr reaches this process a moment later.
      const reaped = new RegExp(`reaped 1 sandbox\\(es\\) of ${batch} whose server is gone: ${late.id.slice(0, 12)}`);
      await waitFor('the reap in the server log', async () => (reaped.test(serve.stderr()) ? true : undefined), 10_000).catch(
        () => undefined,
      );
      assert.match(serve.stderr(), reaped);
      const after = servedStates(stateDir).find((s) => s.state.rollout_id === mid.state.rollout_id)!.state;
      assert.equal(after.state, 'discarded');
      assert.equal(after.class, 'infra_error');
      assert.equal(after.reward, null);
      assert.equal(after.attempts[0]!.outcome, 'interrupted');
      assert.deepEqual(
        capturedCalls(mid.dir, mid.state.session_id!).slice(0, callsBefore.length),
        callsBefore,
        'every call captured before the kill is still on disk',
      );

      // The trainer retries, here over the HTTP session variant: create, openenv/session/step, close.
      const created = await postJson(`${serve.url}/mcp`, { jsonrpc: '2.0', id: 1, method: 'openenv/session/create', params: {} });
      const sessionId = created.body.result.session_id as string;
      const stepped = await postJson(`${serve.url}/mcp`, {
        jsonrpc: '2.0',
        id: 2,
        method: 'openenv/session/step',
        params: { session_id: sessionId, action: stepFrame(args(0)).data },
      });
      assert.equal(stepped.body.id, 2);
      const r = rolloutResult({ type: 'observation', data: stepped.body.result });
      assert.equal(r.ok, true, r.error);
      assert.equal(r.reward, 1);
      assertValidTurns(r);
      const closed = await postJson(`${serve.url}/mcp`, {
        jsonrpc: '2.0',
        id: 3,
        method: 'openenv/session/close',
        params: { session_id: sessionId },
      });
      assert.equal(closed.body.result.closed, true);
      assert.equal((await (await fetch(`${serve.url}/health`)).json()).active_sessions, 0);
    },
  );
});
