// The token-in proof (issue 25) in Docker: every registry harness on the sum-numbers task (four turns)
// with a policy that reasons before every action, the proxy rendering (token in, token out): reward 1
// and ONE training sample per rollout holding every sampled token of every agent turn; every bridged
// turn's prompt, as the engine received it (a relay between proxy and engine keeps the ids), is the
// anchor's exact prompt + sampled ids followed by the bridge. The policy that writes its tool calls
// its own way (compact, keys reversed) runs on a subset (CI time: about 40 s a rollout). The same
// policies in chat mode on the reference harness are the control: there every turn is its own sample.
// HARNESS_LAB_SANDBOX_HARNESSES=a,b narrows the harnesses (development aid).
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { formatRunLine, proofHarnesses, proofRun, ProofRig, type ProofPolicy, type ProofRun } from '../../scripts/token-in-proof.js';
import { dockerReady, realHarnesses } from './sandbox-fixtures.js';

const PER_RUN_MS = 600_000;
/** The raw-args policy's harnesses: the reference one and one per dialect (Anthropic, Responses, chat). */
const RAW_ARGS_HARNESSES = ['react', 'claude-code', 'codex', 'opencode'];

const harnesses = (): string[] =>
  process.env.HARNESS_LAB_SANDBOX_HARNESSES ? [...new Set(['react', ...realHarnesses()])] : proofHarnesses();

function assertOneSample(run: ProofRun): void {
  const shown = formatRunLine(run);
  assert.equal(run.error, null, shown);
  assert.equal(run.reward, 1, shown);
  assert.ok(run.contract_ok, shown);
  assert.deepEqual(run.fatal, [], shown);
  assert.ok(run.turns.length >= 4, `four agent turns (three shell calls and the answer): ${shown}`);
  assert.equal(run.samples?.samples, 1, `one training sample per rollout: ${shown}`);
  // Every sampled token of every agent turn is in that one sample, and nothing is sent twice.
  assert.equal(
    run.samples!.sampled_tokens,
    run.turns.reduce((a, t) => a + t.n_sampled, 0),
    shown,
  );
  assert.equal(run.samples!.tokens_to_trainer, run.samples!.merged_tokens, shown);
  assert.equal(run.turns[0]!.kind, 'full', shown);
  for (const t of run.turns.slice(1)) {
    assert.equal(t.kind, 'bridge', `turn ${t.index} continues the one before: ${shown}`);
    assert.equal(t.bridge_construction, true, `turn ${t.index}: the anchor's exact ids, then the bridge: ${shown}`);
  }
  for (const t of run.turns)
    assert.equal(t.engine_received, true, `turn ${t.index}: the engine received exactly the recorded prompt ids: ${shown}`);
}

describe('token in, token out: one training sample per rollout for every harness (Docker, sum-numbers)', { concurrency: false }, () => {
  const rigs = new Map<ProofPolicy, ProofRig>();

  before(async () => {
    await dockerReady();
    rigs.set('thinking', await ProofRig.start('thinking', ['proxy', 'engine']));
    rigs.set('raw-args', await ProofRig.start('raw-args', ['proxy', 'engine']));
  });
  after(async () => {
    for (const rig of rigs.values()) await rig.close();
  });

  const run = (harness: string, policy: ProofPolicy, mode: 'proxy' | 'engine') => {
    const rig = rigs.get(policy)!;
    return proofRun({
      harness,
      policy,
      mode,
      proxy: rig.proxies[mode],
      model: rig.engine.engine.modelName,
      recorder: rig.recorder,
      outDir: mkdtempSync(join(tmpdir(), 'hl-tito-test-')),
    });
  };

  for (const harness of harnesses()) {
    test(
      `${harness}, reasoning before every action, token in: reward 1, one sample, every prompt the bridge construction`,
      { timeout: PER_RUN_MS },
      async () => {
        assertOneSample(await run(harness, 'thinking', 'proxy'));
      },
    );
  }
  for (const harness of RAW_ARGS_HARNESSES.filter((h) => harnesses().includes(h))) {
    test(
      `${harness}, tool calls written compact with the keys reversed, token in: reward 1, one sample`,
      { timeout: PER_RUN_MS },
      async () => {
        assertOneSample(await run(harness, 'raw-args', 'proxy'));
      },
    );
  }
  for (const policy of ['thinking', 'raw-args'] as const) {
    test(
      `control: react with the ${policy} policy in chat mode splits every turn into its own sample`,
      { timeout: PER_RUN_MS },
      async () => {
        const r = await run('react', policy, 'engine');
        const shown = formatRunLine(r);
        assert.equal(r.reward, 1, shown);
        assert.equal(r.samples?.samples, r.turns.length, `the re-rendered history never extends what was sampled: ${shown}`);
        assert.ok(r.samples!.tokens_to_trainer > 1.5 * r.samples!.merged_tokens, shown);
      },
    );
  }
});
