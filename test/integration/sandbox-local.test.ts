// The local runtime cannot isolate, and says so instead of pretending: `harness-lab rollout --sandbox
// local` warns on stderr, and the rollout records isolation none (still with a keyless verifier).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { EXAMPLES, cli, outDir } from './sandbox-fixtures.js';

test(
  '`run --sandbox local`: reward 1, a warning that nothing is isolated, isolation none in the record',
  { timeout: 300_000 },
  async () => {
    const out = outDir();
    const r = await cli(['rollout', '--sandbox', 'local', '--task', join(EXAMPLES, 'hello-file'), '--harness', 'react', '--out', out], {
      env: { HARNESS_LAB_POLICY_ENGINE: 'fake' },
    });
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /^\[react \/ local\] task hello-file: ok reward=1\.00 /m);
    assert.match(r.stderr, /--sandbox local does not isolate: .*can reach the engine and every loopback service.*isolation: none/);
    const doc = JSON.parse(readFileSync(join(out, 'hello-file', 'react', '0', 'rollout.json'), 'utf8'));
    assert.equal(doc.isolation, 'none');
    assert.equal(doc.verifier.session_key_absent, true);
    assert.equal(doc.verifier.admin_key_absent, true);
  },
);
