// The batch runner against a backend double (the real Docker path is test/integration/batch-docker):
// the global concurrency cap, one session per attempt with the batch's metadata and pinned sampling,
// classes from classify, durable state, resume after a dead lab (re-queue, cleanup, no re-run of
// finished rollouts), cancel, a busy batch, and status/collect reading the directory alone.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type {
  AttemptFacts,
  AttemptSessionRequest,
  BackendModule,
  BatchBackend,
  BatchCapture,
  RolloutAttempt,
} from '../../src/batch/backend.js';
import { BatchBusyError, acquireLock, labPaths, requestCancel } from '../../src/batch/lock.js';
import { planBatch, rolloutSeed, writeBatch } from '../../src/batch/plan.js';
import { runBatch } from '../../src/batch/runner.js';
import { batchPaths, readRolloutState, readRolloutStates, writeRolloutState } from '../../src/batch/state.js';
import { batchStatus, formatStatus, meanStd } from '../../src/batch/status.js';
import { CaptureStore } from '../../src/capture/store.js';
import { solvedAttempt } from './rollout-fixtures.js';

const EXAMPLES = join(__dirname, '..', '..', 'examples', 'tasks');

function newBatch(groupSize = 4, parallel = 3): string {
  const root = mkdtempSync(join(tmpdir(), 'hl-runner-'));
  cpSync(join(EXAMPLES, 'hello-file'), join(root, 'tasks', 'hello-file'), { recursive: true });
  cpSync(join(EXAMPLES, 'fix-script'), join(root, 'tasks', 'fix-script'), { recursive: true });
  const plan = planBatch({
    tasks: [join(root, 'tasks')],
    harnesses: ['react', 'codex'],
    groupSize,
    parallel,
    temperature: 0.8,
    policyVersion: 'v7',
    outDir: join(root, 'batch'),
    checkInstalled: false,
    timeoutSec: 30,
  });
  writeBatch(plan);
  return plan.dir;
}

type Outcome = Partial<AttemptFacts> | 'wait-for-abort';

/** Runs "attempts" in memory: each takes a few ms, says what the script says, and counts how many overlap. */
class DoubleBackend implements BatchBackend {
  readonly kind = 'docker' as const;
  active = 0;
  maxActive = 0;
  ran: RolloutAttempt[] = [];
  cleaned: string[] = [];
  onStart?: (a: RolloutAttempt) => void;
  constructor(private readonly script: (id: string, attempt: number) => Outcome = () => ({})) {}

  async run(a: RolloutAttempt): Promise<AttemptFacts> {
    this.ran.push(a);
    this.active++;
    this.maxActive = Math.max(this.maxActive, this.active);
    a.setBackendRef?.(`ctr-${a.rollout.rollout_id}-${a.attempt}`);
    this.onStart?.(a);
    try {
      const outcome = this.script(a.rollout.rollout_id, a.attempt);
      if (outcome === 'wait-for-abort') {
        if (!a.signal.aborted) await new Promise<void>((resolve) => a.signal.addEventListener('abort', () => resolve(), { once: true }));
        return { ...base(), cancelled: true };
      }
      await new Promise((r) => setTimeout(r, 5 + (a.rollout.member % 3) * 4));
      return { ...base(), ...outcome };
    } finally {
      this.active--;
    }
  }
  async cleanupBatch(batchId: string): Promise<string[]> {
    this.cleaned.push(batchId);
    return ['leftover1'];
  }
  async close(): Promise<void> {}
}

const base = solvedAttempt;

class DoubleCapture implements BatchCapture {
  sessions = new Map<string, AttemptSessionRequest>();
  async createSession(req: AttemptSessionRequest): Promise<void> {
    assert.ok(!this.sessions.has(req.sessionId), `session ${req.sessionId} created twice`);
    this.sessions.set(req.sessionId, req);
  }
  async sessionFacts(id: string) {
    return id.includes('.noCalls') ? { nCalls: 0, trainable: false, findings: [] } : { nCalls: 2, trainable: true, findings: [] };
  }
  async close(): Promise<void> {}
}

function moduleOf(backend: DoubleBackend, capture = new DoubleCapture()): BackendModule & { capture: DoubleCapture } {
  return { capture, open: async () => ({ backend, capture }), cleanup: async () => [] };
}

test('the cap holds over every group; each attempt a session with the batch metadata; classes from the facts', async () => {
  const dir = newBatch(4, 3);
  const backend = new DoubleBackend((id) =>
    id === 'hello-file.react.1'
      ? { infraError: 'the sandbox container stopped from outside the lab (exit 137)' }
      : id === 'fix-script.codex.2'
        ? { reward: { value: 0, scores: {} } }
        : id === 'fix-script.react.3'
          ? { agent: { exitCode: null, timedOut: true, ms: 30_000 } }
          : {},
  );
  const mod = moduleOf(backend);
  const lines: string[] = [];
  const summary = await runBatch({ dir, module: mod, log: (l) => lines.push(l) });
  assert.equal(summary.total, 16);
  assert.equal(summary.done + summary.discarded, 16);
  assert.equal(summary.stopped, null);
  assert.equal(backend.maxActive, 3, 'never more than --parallel at once, and the cap is used');
  assert.equal(backend.ran.length, 16, 'every rollout ran exactly once');
  assert.ok(
    lines.some((l) => /^start fix-script\.react\.0: running 1\/3, queued 15/.test(l)),
    'the queue is visible',
  );

  const states = readRolloutStates(dir);
  const byId = new Map(states.map((s) => [s.rollout_id, s]));
  assert.equal(byId.get('hello-file.react.1')!.class, 'infra_error');
  assert.equal(byId.get('hello-file.react.1')!.reward, null);
  assert.equal(byId.get('fix-script.codex.2')!.class, 'policy_failure');
  assert.equal(byId.get('fix-script.codex.2')!.reward, 0);
  assert.equal(byId.get('fix-script.react.3')!.class, 'timeout');
  assert.equal(byId.get('fix-script.react.3')!.state, 'discarded');
  assert.equal(states.filter((s) => s.class === 'completed').length, 13);
  for (const s of states) {
    assert.equal(s.attempts.length, 1);
    assert.equal(s.attempts[0]!.outcome, 'finished');
    assert.equal(s.backend_ref, `ctr-${s.rollout_id}-0`);
    assert.equal(s.policy_version, 'v7');
    const session = mod.capture.sessions.get(s.session_id!)!;
    // No engine URL: the lab's embedded engine, so each rollout pins its own seed (plan.ts rolloutSeed).
    assert.deepEqual(session.sampling, { temperature: 0.8, top_p: 1, top_k: -1, min_p: 0, seed: rolloutSeed(s.rollout_id) });
    assert.equal(session.metadata.batch_id, summary.batchId);
    assert.equal(session.metadata.group_id, s.group_id);
    assert.equal(session.metadata.rollout_id, s.rollout_id);
    assert.equal(session.metadata.task, s.task);
    assert.equal(session.metadata.harness, s.harness);
    assert.equal(session.metadata.policy_version, 'v7');
    assert.ok(existsSync(join(dir, 'attempts', s.rollout_id, '0', 'result.json')));
  }
  assert.equal(existsSync(labPaths(dir).lock), false, 'the lock goes with a clean exit');

  const st = batchStatus(dir);
  assert.equal(st.lab, 'finished');
  const g = st.groups.find((x) => x.group_id === 'hello-file.react')!;
  assert.deepEqual([g.done, g.discarded, g.rewards], [3, 1, [1, 1, 1]]);
  assert.equal(g.no_contrast, true);
  const fc = st.groups.find((x) => x.group_id === 'fix-script.codex')!;
  assert.deepEqual(fc.rewards, [1, 1, 0, 1]);
  assert.equal(fc.no_contrast, false);
  assert.equal(fc.mean, 0.75);
  assert.equal(fc.std, 0.5);
  const text = formatStatus(st);
  assert.match(text, /hello-file\.react +3 +1 +0 +1 1 1 .*1\.000 +0\.000 +NO CONTRAST/);
  assert.match(text, /fix-script\.codex +4 +0 +0 +1 1 0 1 .*0\.750 +0\.500 *$/m);
});

test('status flags groups with fewer than 2 trainable members; mean/std use trainable members only', async () => {
  const dir = newBatch(2, 2);
  await runBatch({
    dir,
    module: moduleOf(
      new DoubleBackend((id) =>
        id.startsWith('hello-file.codex') ? { infraError: 'OOMKilled' } : id === 'fix-script.react.0' ? { reward: null } : {},
      ),
    ),
  });
  const st = batchStatus(dir);
  const byId = new Map(st.groups.map((g) => [g.group_id, g]));
  assert.equal(byId.get('hello-file.codex')!.too_few_trainable, true);
  assert.deepEqual(byId.get('hello-file.codex')!.rewards, []);
  assert.equal(byId.get('fix-script.react')!.too_few_trainable, true);
  assert.equal(byId.get('hello-file.react')!.too_few_trainable, false);
  assert.match(formatStatus(st), /hello-file\.codex .*FEWER THAN 2 TRAINABLE/);
  assert.deepEqual(meanStd([]), { mean: null, std: null });
  assert.deepEqual(meanStd([2]), { mean: 2, std: null });
});

test("status and watch show a running rollout's calls so far, read from its session file in the batch capture", async () => {
  const dir = newBatch(2, 2);
  await runBatch({ dir, module: moduleOf(new DoubleBackend()) });
  const victim = readRolloutStates(dir)[0]!;
  Object.assign(victim, {
    state: 'running',
    class: null,
    reward: null,
    trainable: false,
    session_id: 'slive0000000000000000001',
    ended_at: null,
    duration_ms: null,
  });
  writeRolloutState(dir, victim);
  const other = readRolloutStates(dir)[1]!;
  Object.assign(other, {
    state: 'running',
    class: null,
    reward: null,
    trainable: false,
    session_id: 'snofile00000000000000001',
    ended_at: null,
    duration_ms: null,
  });
  writeRolloutState(dir, other);
  const store = new CaptureStore(batchPaths(dir).capture);
  await store.append(victim.session_id!, {
    type: 'session',
    session_id: victim.session_id!,
    created_at: new Date().toISOString(),
    model: 'm',
    engine_url: 'http://e',
    max_model_calls: 0,
    metadata: {},
  });
  const call = (index: number) => ({
    type: 'call',
    call_id: `c${index}`,
    session_id: victim.session_id!,
    index,
    error: null,
    prompt_token_ids: [1, 2, 3],
    completion_token_ids: [4],
    request: { headers: {}, body: { messages: [] } },
    engine_request: { messages: [] },
  });
  for (const i of [0, 1]) await store.append(victim.session_id!, call(i) as never);
  await store.close();

  const st = batchStatus(dir);
  const rollouts = st.groups.flatMap((g) => g.rollouts);
  assert.equal(rollouts.find((r) => r.id === victim.rollout_id)!.calls, 2);
  assert.equal(rollouts.find((r) => r.id === other.rollout_id)!.calls, null, 'no file yet: no count');
  assert.ok(
    rollouts.filter((r) => r.state !== 'running').every((r) => r.calls === null),
    'finished rollouts carry no live count',
  );
  assert.equal(st.counts.running_calls, 2);
  assert.match(formatStatus(st), /2 running \(2 calls so far\)/);
  assert.match(formatStatus(st, { rollouts: true }), new RegExp(`${victim.rollout_id.replace(/\./g, '\\.')}  running calls=2 reward=null`));
});

test('resume after a dead lab: running rollouts re-queued with their attempt kept as interrupted, sandboxes cleaned, finished ones never re-run', async () => {
  const dir = newBatch(2, 2);
  // A first lab finishes everything; the test then rewinds the files to what kill -9 during the fourth rollout leaves.
  await runBatch({ dir, module: moduleOf(new DoubleBackend()) });
  // Rewind: keep three finished, put one back into a running attempt, add a lock held by a dead pid.
  const states = readRolloutStates(dir);
  const finished = new Map(states.slice(0, 3).map((s) => [s.rollout_id, s.session_id]));
  for (const s of states.slice(3)) {
    Object.assign(s, {
      state: 'queued',
      class: null,
      reward: null,
      rewards: {},
      trainable: false,
      session_id: null,
      attempts: [],
      ended_at: null,
      duration_ms: null,
      error: null,
      backend_ref: null,
      n_calls: 0,
    });
    writeRolloutState(dir, s);
  }
  const victim = states[3]!;
  Object.assign(victim, {
    state: 'running',
    session_id: 'old-session',
    attempts: [
      {
        attempt: 0,
        session_id: 'old-session',
        started_at: new Date().toISOString(),
        ended_at: null,
        // Written by a lab from before attempts/ was named: its attempts live under runs/.
        out_dir: 'runs/x/0',
        outcome: 'running',
        trainable: false,
      },
    ],
  });
  writeRolloutState(dir, victim);
  const dead = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
  writeFileSync(
    labPaths(dir).lock,
    JSON.stringify({ pid: Number(dead.stdout), host: hostname(), started_at: new Date().toISOString(), command: 'batch submit' }),
  );
  assert.equal(batchStatus(dir).lab, 'interrupted');

  const second = new DoubleBackend();
  const lines: string[] = [];
  const summary = await runBatch({ dir, module: moduleOf(second), log: (l) => lines.push(l) });
  assert.deepEqual(summary.requeued, [victim.rollout_id]);
  assert.deepEqual(summary.removed, ['leftover1']);
  assert.equal(second.cleaned.length, 1, 'the batch sandboxes were cleaned before any attempt');
  assert.ok(lines.some((l) => /taking over from lab pid \d+, which is gone/.test(l)));
  assert.deepEqual(
    second.ran.map((a) => a.rollout.rollout_id).sort(),
    states
      .slice(3)
      .map((s) => s.rollout_id)
      .sort(),
    'finished rollouts are not re-run',
  );
  const after = readRolloutState(dir, victim.rollout_id);
  assert.equal(after.state, 'done');
  assert.deepEqual(
    after.attempts.map((a) => [a.attempt, a.outcome, a.trainable]),
    [
      [0, 'interrupted', false],
      [1, 'finished', true],
    ],
  );
  assert.match(after.session_id!, /\.a1$/);
  assert.deepEqual(
    after.attempts.map((a) => a.out_dir),
    ['runs/x/0', join('attempts', victim.rollout_id, '1')],
    'an old batch resumes: its old attempt keeps its runs/ folder, a new one goes under attempts/',
  );
  for (const [id, session] of finished) assert.equal(readRolloutState(dir, id).session_id, session);
  assert.equal(batchStatus(dir).lab, 'finished');
});

test('cancel stops the running attempts and queues them again; resume then finishes the batch', async () => {
  const dir = newBatch(2, 2);
  const backend = new DoubleBackend(() => 'wait-for-abort');
  backend.onStart = () => {
    if (backend.active === 2) requestCancel(dir);
  };
  const summary = await runBatch({ dir, module: moduleOf(backend), cancelPollMs: 10 });
  assert.equal(summary.stopped, 'cancelled');
  assert.equal(backend.ran.length, 2, 'nothing new starts after the cancel');
  const states = readRolloutStates(dir);
  assert.equal(states.filter((s) => s.state === 'queued').length, 8);
  assert.deepEqual(
    states.filter((s) => s.attempts.length).map((s) => s.attempts[0]!.outcome),
    ['cancelled', 'cancelled'],
  );
  assert.equal(batchStatus(dir).lab, 'cancelled');
  const resumed = await runBatch({ dir, module: moduleOf(new DoubleBackend()) });
  assert.equal(resumed.done, 8);
  assert.equal(readRolloutStates(dir).filter((s) => s.attempts.length === 2).length, 2);
});

test('a batch held by a live lab is refused, naming the pid', async () => {
  const dir = newBatch(2, 2);
  const lock = acquireLock(dir, 'test');
  try {
    await assert.rejects(
      runBatch({ dir, module: moduleOf(new DoubleBackend()) }),
      (e: unknown) => e instanceof BatchBusyError && e.message.includes(`pid ${process.pid}`),
    );
    assert.equal(batchStatus(dir).lab, 'running');
  } finally {
    lock.release();
  }
  assert.equal(JSON.parse(readFileSync(join(dir, 'batch.json'), 'utf8')).group_size, 2);
});

test('a failing capture stops the batch cleanly: others stop, nothing is left running, the error is raised', async () => {
  const dir = newBatch(2, 3);
  const capture = new DoubleCapture();
  let created = 0;
  const create = capture.createSession.bind(capture);
  capture.createSession = async (req) => {
    if (++created === 3) throw new Error('the capture proxy answered POST /sessions with 503');
    return create(req);
  };
  const backend = new DoubleBackend(() => 'wait-for-abort');
  await assert.rejects(runBatch({ dir, module: moduleOf(backend, capture) }), /503/);
  const states = readRolloutStates(dir);
  assert.equal(states.filter((s) => s.state === 'running').length, 0);
  assert.deepEqual(
    states.filter((s) => s.attempts.length).map((s) => s.attempts[0]!.outcome),
    ['interrupted', 'interrupted'],
  );
  assert.equal(existsSync(labPaths(dir).lock), false);
});

test("an attempt the lab's own infrastructure spoiled (rerun) is an infra error and the rollout runs again, at most three times", async () => {
  const dir = newBatch(2, 2);
  const backend = new DoubleBackend((id, attempt) =>
    id === 'hello-file.react.0' && attempt === 0
      ? { infraError: 'the capture proxy restarted (proxy pod(s) p#0 then none)', rerun: true }
      : id === 'fix-script.codex.1'
        ? { infraError: 'the capture proxy restarted', rerun: true }
        : {},
  );
  const summary = await runBatch({ dir, module: moduleOf(backend), log: () => {} });
  assert.equal(summary.total, 8);
  const byId = new Map(readRolloutStates(dir).map((s) => [s.rollout_id, s]));
  const once = byId.get('hello-file.react.0')!;
  assert.deepEqual(
    once.attempts.map((a) => [a.attempt, a.outcome, a.trainable]),
    [
      [0, 'finished', false],
      [1, 'finished', true],
    ],
  );
  assert.equal(once.class, 'completed', 'the second attempt decided it');
  const result0 = JSON.parse(readFileSync(join(dir, 'attempts', 'hello-file.react.0', '0', 'result.json'), 'utf8')) as {
    verdict: { class: string; error: string };
  };
  assert.equal(result0.verdict.class, 'infra_error');
  assert.match(result0.verdict.error, /the capture proxy restarted/);
  const always = byId.get('fix-script.codex.1')!;
  assert.equal(always.attempts.length, 3, 'bounded');
  assert.equal(always.state, 'discarded');
  assert.equal(always.class, 'infra_error');
  assert.equal(backend.ran.length, 8 + 1 + 2);
});
