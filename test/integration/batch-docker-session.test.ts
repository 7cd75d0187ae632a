// A Docker batch's session is on disk before its attempt is recorded: the runner saves the attempt
// (with the session id) right after createSession resolves, and a lab killed -9 after that must
// leave the session's file for the resumed lab and for debugging (it once resolved before the
// session line was written, and the batches-on-Docker test caught an interrupted attempt without
// its file).
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { InProcessCapture } from '../../src/batch/backends/docker.js';
import { CaptureProxy } from '../../src/capture/proxy.js';
import { sessionFileOf } from '../../src/capture/store.js';

const dir = mkdtempSync(join(tmpdir(), 'hl-batch-session-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('createSession resolves once the session line is in its file', async () => {
  // Nothing listens on the engine URL: creating a session does not contact the engine.
  const proxy = await CaptureProxy.start({ engineUrl: 'http://127.0.0.1:9', model: 'm', dataDir: dir, captureLevel: 'tokens' });
  try {
    const capture = new InProcessCapture(proxy, undefined);
    for (const id of ['b1-r0-a0', 'b1-r1-a0']) {
      await capture.createSession({ sessionId: id, metadata: { rollout: id }, sampling: { temperature: 1 }, maxModelCalls: 10 });
      const file = sessionFileOf(dir, id);
      assert.ok(existsSync(file), `${id}: its file exists when createSession resolves`);
      const first = JSON.parse(readFileSync(file, 'utf8').split('\n')[0]!) as { type: string; session_id: string };
      assert.deepEqual([first.type, first.session_id], ['session', id]);
    }
  } finally {
    await proxy.close();
  }
});
