// Failure containment and watching a run: the circuit breaker (consecutive infra failures pause new sandboxes, a probe
// resumes them, the streak's rollouts run again, group statistics untouched by the failures), infra
// causes by class, the start-up cap and budget (start-gate.ts), against a backend double; stalled rollouts.
import assert from 'node:assert/strict';
import { cpSync, mkdirSync, mkdtempSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import type { AttemptFacts, BackendModule, BatchBackend, BatchCapture, RolloutAttempt } from '../../src/batch/backend.js';
import { CircuitBreaker, BreakerOpenError } from '../../src/batch/breaker.js';
import { classify } from '../../src/batch/classify.js';
import { infraCause } from '../../src/batch/infra-cause.js';
import { planBatch, writeBatch } from '../../src/batch/plan.js';
import { runBatch } from '../../src/batch/runner.js';
import { readRolloutStates, writeRolloutState } from '../../src/batch/state.js';
import { batchSessionFile, batchStatus, formatStatus } from '../../src/batch/status.js';
import { solvedAttempt } from './rollout-fixtures.js';
import { StartSemaphore, StartupBudgetError, withinStartBudget } from '../../src/sandbox/start-gate.js';

const EXAMPLES = join(__dirname, '..', '..', 'examples', 'tasks');

function newBatch(opts: { groupSize: number; parallel: number; breakerAfter?: number; maxStarting?: number }): string {
  const root = mkdtempSync(join(tmpdir(), 'hl-breaker-'));
  cpSync(join(EXAMPLES, 'hello-file'), join(root, 'tasks', 'hello-file'), { recursive: true });
  const plan = planBatch({
    tasks: [join(root, 'tasks')],
    harnesses: ['react'],
    groupSize: opts.groupSize,
    parallel: opts.parallel,
    outDir: join(root, 'batch'),
    checkInstalled: false,
    timeoutSec: 30,
    breakerAfter: opts.breakerAfter,
    maxStarting: opts.maxStarting,
  });
  writeBatch(plan);
  return plan.dir;
}

const ok = solvedAttempt;
const down = (): AttemptFacts => ({
  ...ok(),
  agent: { exitCode: null, timedOut: false, ms: 0 },
  verifier: null,
  reward: null,
  infraError: 'connect ECONNREFUSED /var/run/docker.sock: Cannot connect to the Docker daemon',
  setupFailure: 'Cannot connect to the Docker daemon',
});

/** A backend whose daemon is "down" while `isDown()` says so: every attempt fails at once, as Docker stopped mid-batch does. */
class OutageBackend implements BatchBackend {
  readonly kind = 'docker' as const;
  attempts: string[] = [];
  constructor(
    private readonly isDown: () => boolean,
    private readonly rewardOf: (id: string) => number = () => 1,
  ) {}
  async run(a: RolloutAttempt): Promise<AttemptFacts> {
    this.attempts.push(a.rollout.rollout_id);
    await new Promise((r) => setTimeout(r, 2));
    if (this.isDown()) return down();
    const value = this.rewardOf(a.rollout.rollout_id);
    return { ...ok(), reward: { value, scores: { reward: value } } };
  }
  async cleanupBatch(): Promise<string[]> {
    return [];
  }
  async close(): Promise<void> {}
}

class Capture implements BatchCapture {
  async createSession(): Promise<void> {}
  async sessionFacts() {
    return { nCalls: 2, trainable: true, findings: [] };
  }
  async close(): Promise<void> {}
}

test('K infra failures in a row open the breaker; no sandbox starts until the probe answers; the streak runs again and the batch finishes with untouched groups', async () => {
  const dir = newBatch({ groupSize: 8, parallel: 2, breakerAfter: 3 });
  let daemonUp = false;
  let probes = 0;
  const backend = new OutageBackend(
    () => !daemonUp,
    (id) => (id.endsWith('.0') || id.endsWith('.1') ? 0 : 1),
  );
  const mod: BackendModule = {
    open: async () => ({ backend, capture: new Capture() }),
    cleanup: async () => [],
    preflight: async () => {
      probes++;
      if (probes >= 3) daemonUp = true; // the daemon comes back on the third probe
      if (!daemonUp) throw new Error('Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?');
    },
  };
  const lines: string[] = [];
  const snapshots: string[] = [];
  const summary = await runBatch({
    dir,
    module: mod,
    log: (l) => lines.push(l),
    breakerProbeMs: 20,
    onBreaker: (s) => snapshots.push(s.state),
  });
  // The breaker opened once after 3 failures; while it was open nothing started (only the probes ran).
  assert.equal(summary.breakerTrips, 1, lines.join('\n'));
  assert.deepEqual(snapshots, ['open', 'half-open', 'closed']);
  assert.ok(probes >= 3);
  const failedBeforeTrip = backend.attempts.slice(0, 3);
  // With parallel 2 at most one more attempt was already in flight when it opened.
  assert.ok(backend.attempts.length <= 8 + 4, `attempts: ${backend.attempts.join(' ')}`);
  assert.ok(
    lines.some((l) => /sandboxes paused: 3 rollouts in a row failed.*backend_down/.test(l)),
    lines.join('\n'),
  );
  assert.ok(lines.some((l) => /sandboxes resumed/.test(l)));
  // Every rollout of the streak ran again and the batch finished: all 8 done, none discarded.
  for (const id of failedBeforeTrip) assert.ok(summary.rerunAfterOutage.includes(id), `${id} was not run again`);
  assert.equal(summary.done, 8);
  assert.equal(summary.discarded, 0);
  const states = readRolloutStates(dir);
  const rerun = states.filter((s) => s.attempts.length > 1);
  assert.ok(rerun.length >= 3);
  for (const s of rerun) assert.equal(s.attempts[0]!.trainable, false);
  // Group statistics are over the scored members only: the outage's failures are not in them.
  const status = batchStatus(dir);
  const g = status.groups[0]!;
  assert.deepEqual(g.rewards.slice().sort(), [0, 0, 1, 1, 1, 1, 1, 1]);
  // Every attempt before a rollout's last failed in the outage: the account counts each of them.
  assert.equal(
    status.infra.failed_attempts,
    states.reduce((n, s) => n + s.attempts.length - 1, 0),
  );
  assert.equal(
    status.infra.attempts,
    states.reduce((n, s) => n + s.attempts.length, 0),
  );
  assert.ok((status.infra.causes.backend_down ?? 0) >= 3, JSON.stringify(status.infra));
});

test('the breaker stays shut after a failed trial, and 0 turns it off', async () => {
  let probeOk = true;
  const b = new CircuitBreaker({
    threshold: 2,
    probeMs: 5,
    probe: async () => (probeOk ? undefined : Promise.reject(new Error('still down'))),
  });
  try {
    assert.equal(b.recordFailure('image_build', 'the task image did not build'), false);
    assert.equal(b.recordFailure('image_build', 'the task image did not build'), true);
    assert.equal(b.snapshot().state, 'open');
    assert.throws(
      () => b.admitOrThrow(),
      (e: unknown) => e instanceof BreakerOpenError && /image_build: the task image did not build/.test(e.message),
    );
    await b.admit(); // the probe answers: half-open, this caller is the trial
    assert.equal(b.snapshot().state, 'half-open');
    assert.equal(b.tryAdmit(), false, 'only one trial while half-open');
    probeOk = false;
    assert.equal(b.recordFailure('image_build', 'the task image did not build'), true, 'a failed trial opens it again');
    assert.equal(b.snapshot().state, 'open');
    assert.equal(b.snapshot().trips, 2);
    await new Promise((r) => setTimeout(r, 30));
    assert.equal(b.snapshot().state, 'open');
    assert.match(b.snapshot().probeError ?? '', /still down/);
    b.recordSuccess();
    assert.equal(b.snapshot().state, 'closed');
  } finally {
    b.dispose();
  }
  const off = new CircuitBreaker({ threshold: 0, probe: async () => {} });
  for (let i = 0; i < 50; i++) assert.equal(off.recordFailure('other', 'x'), false);
  assert.equal(off.tryAdmit(), true);
  off.dispose();
});

test('infra failures are classed by cause', () => {
  const facts = (over: Partial<AttemptFacts>): AttemptFacts => ({ ...ok(), ...over });
  const cap = { nCalls: 2, trainable: true, findings: [] };
  assert.equal(
    classify(facts({ infraError: 'the sandbox image harness-lab/task-x did not build: step 2 failed', setupFailure: 'x' }), cap, 'discard')
      .cause,
    'image_build',
  );
  assert.equal(
    classify(facts({ infraError: 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock' }), cap, 'discard').cause,
    'backend_down',
  );
  assert.equal(classify(facts({ infraError: 'pods "x" is forbidden: exceeded quota: compute-resources' }), cap, 'discard').cause, 'quota');
  assert.equal(
    classify(facts({ infraError: 'pods "x" is forbidden: violates PodSecurity "baseline:latest": privileged' }), cap, 'discard').cause,
    'api_refused',
  );
  assert.equal(
    classify(facts({ infraError: 'the sandbox did not start within its start-up budget of 5 s', setupFailure: 'x' }), cap, 'discard').cause,
    'startup_timeout',
  );
  assert.equal(classify(facts({ agent: { exitCode: 137, timedOut: false, ms: 1 } }), cap, 'discard').cause, 'harness_crash');
  assert.equal(classify(facts({ verifier: null }), cap, 'discard').cause, 'verifier');
  assert.equal(classify(facts({}), { ...cap, nCalls: 0 }, 'discard').cause, 'no_model_calls');
  assert.equal(classify(facts({}), cap, 'discard').cause ?? null, null);
  assert.equal(infraCause('OOMKilled'), 'sandbox_lost');
});

test('the start gate caps start-ups apart from parallel, hands slots on in order, and enforces the budget', async () => {
  const gate = new StartSemaphore(2);
  const r1 = await gate.acquire();
  const r2 = await gate.acquire();
  const order: number[] = [];
  const third = gate.acquire().then((r) => (order.push(3), r));
  const fourth = gate.acquire().then((r) => (order.push(4), r));
  const aborted = new AbortController();
  const fifth = gate.acquire(aborted.signal);
  assert.equal(gate.starting, 2);
  assert.equal(gate.waiting, 3);
  aborted.abort();
  await assert.rejects(fifth, /cancelled before the sandbox started/);
  r1();
  r1(); // idempotent
  const r3 = await third;
  assert.deepEqual(order, [3]);
  r2();
  const r4 = await fourth;
  assert.deepEqual(order, [3, 4]);
  r3();
  r4();
  assert.equal(gate.starting, 0);
  let removedLate = false;
  // The create answers only after the budget ran out (resolved by hand: no race between timers).
  let finishCreate: (v: string) => void = () => {};
  const slow = new Promise<string>((r) => (finishCreate = r));
  await assert.rejects(
    withinStartBudget(slow, 10, () => (removedLate = true)),
    StartupBudgetError,
  );
  assert.equal(removedLate, false);
  finishCreate('sandbox');
  await slow;
  await new Promise((r) => setImmediate(r));
  assert.equal(removedLate, true, 'a sandbox made after its budget is removed');
  assert.equal(await withinStartBudget(Promise.resolve(7), 1000, () => assert.fail('not late')), 7);
});

test('the runner holds each attempt to the batch start cap', async () => {
  const dir = newBatch({ groupSize: 6, parallel: 6, maxStarting: 2 });
  let starting = 0;
  let maxStarting = 0;
  const backend: BatchBackend = {
    kind: 'docker',
    async run(a) {
      const release = await a.startGate!.acquire(a.signal);
      starting++;
      maxStarting = Math.max(maxStarting, starting);
      await new Promise((r) => setTimeout(r, 10));
      starting--;
      release();
      await new Promise((r) => setTimeout(r, 10));
      return ok();
    },
    cleanupBatch: async () => [],
    close: async () => {},
  };
  const summary = await runBatch({ dir, module: { open: async () => ({ backend, capture: new Capture() }), cleanup: async () => [] } });
  assert.equal(summary.done, 6);
  assert.equal(maxStarting, 2);
});

test('a running rollout with no model call and no sandbox output for the stall time is flagged with where it stalled', () => {
  const dir = newBatch({ groupSize: 2, parallel: 1 });
  const [s] = readRolloutStates(dir);
  const started = new Date(Date.now() - 3_600_000).toISOString();
  const outRel = join('attempts', s!.rollout_id, '0');
  Object.assign(s!, { state: 'running', session_id: 'sess-stall', started_at: started, backend_ref: null });
  s!.attempts.push({
    attempt: 0,
    session_id: 'sess-stall',
    started_at: started,
    ended_at: null,
    out_dir: outRel,
    outcome: 'running',
    trainable: false,
  });
  writeRolloutState(dir, s!);
  const old = new Date(Date.now() - 3_600_000);
  const stallOf = () => batchStatus(dir, { stallAfterS: 600 }).groups[0]!.rollouts[0]!.stalled;
  assert.deepEqual({ ...stallOf(), idle_s: 0 }, { idle_s: 0, where: 'starting sandbox' });
  assert.ok(stallOf()!.idle_s >= 3599);
  s!.backend_ref = 'ctr-1';
  writeRolloutState(dir, s!);
  mkdirSync(join(dir, outRel, 'agent'), { recursive: true });
  mkdirSync(join(dir, outRel, 'verifier'), { recursive: true });
  for (const p of [join(dir, outRel, 'agent'), join(dir, outRel, 'verifier'), join(dir, outRel)]) utimesSync(p, old, old);
  assert.equal(stallOf()?.where, 'agent running');
  // The harness writes its log: alive again.
  writeFileSync(join(dir, outRel, 'agent', 'harness.log'), 'step 3\n');
  assert.equal(stallOf(), null);
  utimesSync(join(dir, outRel, 'agent', 'harness.log'), old, old);
  for (const p of [join(dir, outRel, 'agent'), join(dir, outRel)]) utimesSync(p, old, old);
  // A model call lands in the session file: alive again.
  const sessionFile = batchSessionFile(dir, 'sess-stall');
  mkdirSync(dirname(sessionFile), { recursive: true });
  writeFileSync(sessionFile, '');
  assert.equal(stallOf(), null);
  utimesSync(sessionFile, old, old);
  writeFileSync(join(dir, outRel, 'verifier', 'test-stdout.txt'), 'running\n');
  for (const p of [join(dir, outRel, 'verifier', 'test-stdout.txt'), join(dir, outRel, 'verifier'), join(dir, outRel)])
    utimesSync(p, old, old);
  const st = batchStatus(dir, { stallAfterS: 600 });
  assert.equal(st.groups[0]!.rollouts[0]!.stalled?.where, 'verifier');
  assert.equal(st.counts.stalled, 1);
  assert.match(formatStatus(st), /STALLED .*: no model call and no sandbox output for \d+ s \(verifier\)/);
  assert.equal(batchStatus(dir, { stallAfterS: 7200 }).counts.stalled, 0);
});
