// Issue 14's proof end to end on real parts: a `harness-lab serve` process with the Docker backend,
// and a `harness-lab engine` process (the embedded node-llama-cpp engine on the tiny Qwen3, with the
// hello-file task's scripted policy; no fake engine anywhere) behind a front that records what the
// engine saw. A client sends exactly OpenEnv's frames (/ws, step call_tool run_rollout, close) for a
// GRPO group of 4 rollouts of hello-file with the reference react harness, in parallel; one member's
// sandbox is killed from outside. All four come back as values; the three good ones carry turns that
// pass docs/trainer-contracts.md §1.2's TrainingTrace validity rules with the engine's own Qwen3 token ids and
// finite logprobs <= 0; the engine received the trainer's pinned sampling on every call, never the
// harness's.
/* eslint-disable @typescript-eslint/no-explicit-any -- wire JSON from the server under test, checked field by field as a Python client reads it */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type Docker from 'dockerode';
import { TrainingTurnSchema } from '../../src/capture/trace.js';
import { LABEL } from '../../src/sandbox/docker-client.js';
import { TEST_DATA_DIR } from './engine-fixture.js';
import { dockerReady, waitFor } from './sandbox-fixtures.js';
import {
  REPO,
  asTrainingTurn,
  recordingFront,
  servedContainers,
  rolloutResult,
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
const GROUP = 4;
/** Qwen3's vocabulary (the tiny model's is the real one) and its chat-format tokens. */
const VOCAB = 151936;
const IM_START = 151644;
const IM_END = 151645;

interface EngineProcess {
  url: string;
  child: ChildProcess;
  exited: Promise<unknown>;
}

/** `harness-lab engine --policy FILE` as its own process, so its CPU work never stalls the client's sockets. */
function startEngineProcess(policyFile: string): Promise<EngineProcess> {
  const env: NodeJS.ProcessEnv = { ...process.env, HARNESS_LAB_DATA_DIR: TEST_DATA_DIR };
  delete env.HARNESS_LAB_POLICY_ENGINE;
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', join(REPO, 'src', 'cli', 'main.ts'), 'engine', '--port', '0', '--policy', policyFile],
    { cwd: REPO, env, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  let err = '';
  const exited = new Promise((resolve) => child.on('close', resolve));
  child.stderr!.on('data', (b: Buffer) => (err += b.toString()));
  return new Promise((resolve, reject) => {
    child.stdout!.on('data', (b: Buffer) => {
      out += b.toString();
      const m = /engine listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve({ url: m[1]!, child, exited });
    });
    void exited.then((code) => reject(new Error(`engine exited (${String(code)}) before listening: ${err}`)));
  });
}

/** docs/trainer-contracts.md §1.2 (what a trainer's worker treats as fatal), plus what only a real Qwen3 engine gives. */
function assertValidTurns(result: any): any[] {
  const kept = result.turns.filter((t: any) => t.role === 'agent' && !t.discarded && t.completion_token_ids.length > 0);
  assert.ok(kept.length >= 2, `hello-file takes a tool call and an answer: ${kept.length} trainable turn(s)`);
  assert.equal(new Set(kept.map((t: any) => t.node_id)).size, kept.length, 'node ids unique');
  for (const t of kept) {
    assert.equal(t.trainable, true);
    assert.ok(t.prompt_token_ids.length > 0, 'prompt non-empty');
    for (const id of [...t.prompt_token_ids, ...t.completion_token_ids])
      assert.ok(Number.isInteger(id) && id >= 0 && id < VOCAB, `token id ${id}`);
    // The engine's own tokenization of the Qwen3 chat template: a prompt opens with <|im_start|>,
    // and the completion includes the end-of-turn token the model was scored on.
    assert.equal(t.prompt_token_ids[0], IM_START);
    assert.equal(t.completion_token_ids.at(-1), IM_END, 'the completion ends with <|im_end|>');
    assert.equal(t.per_token_logps.length, t.completion_token_ids.length);
    // Finite and <= 0; -9999 is how a removed token (minus infinity) is written, never a scored one.
    for (const lp of t.per_token_logps) assert.ok(Number.isFinite(lp) && lp <= 0 && lp > -9999, `logprob ${lp}`);
    // A random-weight model under teacher forcing: the logprobs are the model's, not a constant.
    assert.ok(new Set(t.per_token_logps).size > 1, 'logprobs vary token by token');
    assert.equal(t.loss_mask.length, t.prompt_token_ids.length + t.completion_token_ids.length);
    assert.ok(t.loss_mask.every((m: number) => m === 0 || m === 1));
    assert.ok(
      t.loss_mask.slice(0, t.prompt_token_ids.length).every((m: number) => m === 0),
      'prompt part of the mask is 0',
    );
    assert.ok(
      t.loss_mask.slice(t.prompt_token_ids.length).some((m: number) => m === 1),
      'completion part is trained',
    );
    const parsed = TrainingTurnSchema.safeParse(asTrainingTurn(t));
    assert.ok(parsed.success, parsed.success ? '' : JSON.stringify(parsed.error.issues));
  }
  // Multi-turn: the answer's prompt extends the tool call's prompt and completion token for token.
  const [first, second] = kept;
  const prefix = [...first.prompt_token_ids, ...first.completion_token_ids];
  assert.deepEqual(second.prompt_token_ids.slice(0, prefix.length), prefix, 'the second prompt extends the first turn');
  assert.ok(!result.findings.some((f: string) => f.startsWith('[FATAL')), result.findings.join('; '));
  return kept;
}

describe('harness-lab serve with the Docker backend and the embedded engine, driven by OpenEnv frames', { concurrency: false }, () => {
  let docker: Docker;
  let engine: EngineProcess;
  let front: Awaited<ReturnType<typeof recordingFront>>;
  let stateDir: string;
  let serve: ServeProcess;
  let instruction = '';

  before(async () => {
    docker = await dockerReady();
    // hello-file as shipped, except that its react harness asks for its own sampling on every call,
    // so the test can tell the trainer's pinned sampling from the harness's at the engine.
    const tasksRoot = tempDir('hl-serve-emb-tasks-');
    const dir = join(tasksRoot, 'hello-file');
    cpSync(join(REPO, 'examples', 'tasks', 'hello-file'), dir, { recursive: true });
    writeFileSync(
      join(dir, 'task.toml'),
      `${readFileSync(join(dir, 'task.toml'), 'utf8')}\n[environment.env]\nHARNESS_LAB_REACT_SAMPLING = '${JSON.stringify(ASKED)}'\n`,
    );
    instruction = readFileSync(join(dir, 'instruction.md'), 'utf8').trim();
    engine = await startEngineProcess(join(dir, 'policy.json'));
    front = await recordingFront(engine.url);
    stateDir = tempDir('hl-serve-emb-state-');
    const env: NodeJS.ProcessEnv = { HARNESS_LAB_DATA_DIR: TEST_DATA_DIR };
    serve = await startServe(
      ['--dataset', `train=${tasksRoot}`, '--max-concurrent', String(GROUP), '--parallel', String(GROUP), '--state-dir', stateDir],
      env,
    );
  });

  after(async () => {
    serve?.child.kill('SIGTERM');
    await serve?.exited;
    front?.server.close();
    engine?.child.kill('SIGTERM');
    await engine?.exited;
  });

  test(
    `a group of ${GROUP} hello-file rollouts in parallel over /ws, one killed from outside, all answered as values with real token ids and logprobs`,
    { timeout: 600_000 },
    async () => {
      const started = Date.now();
      const models = (await (await fetch(`${front.url}/v1/models`)).json()) as { data: { id: string }[] };
      const model = models.data[0]!.id;
      assert.equal(model, 'harness-lab/tiny-qwen3');
      const args = runRolloutArgs({ llm_url: front.url, model, agent_timeout_sec: 400, agent_step_limit: 10, sampling: PINNED });
      const pending = Array.from({ length: GROUP }, () => wsSession(serve.url, [stepFrame(args)]));

      // One member's sandbox dies from outside while its harness waits on the engine or its tool.
      const victim = await waitFor(
        'a group member with a captured call',
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
        400_000,
      );
      await docker.getContainer(victim.id).kill();

      const outcomes = await Promise.all(pending);
      const wallS = (Date.now() - started) / 1000;
      const results = outcomes.map((o) => {
        assert.equal(o.closeCode, 1000, 'the session closed normally after its result');
        return rolloutResult(o.frames[0]);
      });
      const failed = results.filter((r) => !r.ok);
      const good = results.filter((r) => r.ok);
      assert.equal(failed.length, 1, JSON.stringify(results.map((r) => [r.ok, r.error])));
      assert.equal(failed[0].trial_name, victim.rollout);
      assert.equal(failed[0].reward, null);
      assert.equal(failed[0].exception_type, 'InfraError');
      assert.match(failed[0].error, /\S/);
      assert.equal(good.length, GROUP - 1);
      for (const r of good) {
        assert.equal(r.reward, 1, r.agent_log_tail);
        assert.equal(r.capture_level, 'tokens');
        assert.equal(r.task_id, 'harness-lab/hello-file');
        assert.ok(r.n_trainable_tokens > 0);
        const kept = assertValidTurns(r);
        assert.equal(r.turns[0].request_messages.find((m: any) => m.role === 'user').content, instruction);
        assert.equal(kept[0].tool_calls.length, 1, 'the first turn is the scripted shell call');
        for (const t of r.turns) {
          assert.equal(t.requested_sampling_params.temperature, ASKED.temperature);
          assert.equal(t.requested_sampling_params.top_p, ASKED.top_p);
          assert.equal(t.sampling_params.temperature, PINNED.temperature);
          assert.equal(t.sampling_params.top_p, PINNED.top_p);
        }
      }
      // What the embedded engine itself received: the pinned sampling on every harness call.
      // (The proxy's probe of the engine at first contact carries no task and is not counted.)
      // In token-in mode (the default where the engine takes ids) a harness call is a token-id prompt;
      // the proxy's probes are a few tokens.
      const seen = front.bodies.filter((b) =>
        Array.isArray(b.prompt) ? b.prompt.length > 100 && b.prompt_logprobs == null : JSON.stringify(b.messages).includes('hello.txt'),
      );
      assert.ok(seen.length >= 2 * (GROUP - 1), `the engine saw ${seen.length} harness calls`);
      for (const b of seen) for (const [k, v] of Object.entries(PINNED)) assert.equal(b[k], v, `engine saw ${k}=${b[k]}`);
      assert.deepEqual(await servedContainers(docker, stateDir), [], 'no sandbox is left');

      // The ids and logprobs a trainer got are the engine's: asked again, straight, with a body it saw
      // (a first turn and the last answer), the engine gives the same prompt and completion ids and,
      // to float noise, the same logprobs as the served turn with that prompt.
      const keptTurns = good.flatMap((r) =>
        r.turns.filter((t: any) => t.role === 'agent' && !t.discarded && t.completion_token_ids.length > 0),
      );
      for (const body of [seen[0], seen.at(-1)]) {
        const tokenIn = Array.isArray(body.prompt);
        const res = await fetch(`${engine.url}/v1/${tokenIn ? 'completions' : 'chat/completions'}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ ...body, stream: false }),
        });
        assert.equal(res.status, 200);
        const answer = (await res.json()) as any;
        const promptIds = tokenIn ? answer.choices[0].prompt_token_ids : answer.prompt_token_ids;
        const turn = keptTurns.find((t: any) => JSON.stringify(t.prompt_token_ids) === JSON.stringify(promptIds));
        assert.ok(turn, 'a served turn has the prompt the engine tokenized');
        assert.deepEqual(answer.choices[0].token_ids, turn.completion_token_ids);
        const lps: number[] = tokenIn
          ? answer.choices[0].logprobs.token_logprobs
          : answer.choices[0].logprobs.content.map((c: any) => c.logprob as number);
        assert.equal(lps.length, turn.per_token_logps.length);
        lps.forEach((lp: number, i: number) =>
          assert.ok(Math.abs(lp - turn.per_token_logps[i]) < 1e-3, `token ${i}: engine ${lp}, served ${turn.per_token_logps[i]}`),
        );
      }
      const turns = good.reduce((n, r) => n + r.n_turns, 0);
      const tokens = good.reduce((n, r) => n + r.n_trainable_tokens, 0);
      process.stderr.write(
        `[serve-embedded] group of ${GROUP}: ${wallS.toFixed(1)} s wall, ${seen.length} engine calls, ${turns} turns, ${tokens} trainable tokens; per rollout wall_s ${results.map((r) => r.wall_s.toFixed(1)).join(', ')}\n`,
      );
    },
  );
});
