// Prompt tokens as text after the engine stopped: a session captured through the proxy from the
// embedded engine, then `harness-lab report` with no engine reads the GGUF's vocabulary; a model
// with a tokenizer.json in the Hugging Face cache is read with @huggingface/tokenizers; a model
// with neither says why the tokens stay ids and how to get text. While a session is live the
// extension keeps its prompt-token texts with the capture.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CaptureProxy } from '../../src/capture/proxy.js';
import { LiveTokenTexts } from '../../src/extension/live-token-texts.js';
import { findTokenizer, offlineTokenTexts } from '../../src/report/offline-token-texts.js';
import { TEST_DATA_DIR, post, startTestEngine } from './engine-fixture.js';

const ROOT = join(__dirname, '..', '..');
const dir = mkdtempSync(join(tmpdir(), 'hl-offline-tok-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('a report made after the engine stopped shows prompt tokens as text (the GGUF vocabulary)', { timeout: 240_000 }, async () => {
  const engine = await startTestEngine();
  const proxy = await CaptureProxy.start({ engineUrl: engine.url, model: engine.engine.modelName, dataDir: join(dir, 'captures') });
  let promptIds: number[] = [];
  const expected: Record<number, string> = {};
  const rolloutFile = join(dir, 'offline.rollout.json');
  try {
    const session = proxy.sessions.create();
    const res = await fetch(`${proxy.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${session.session_id}` },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'Say hello to the world' }], max_tokens: 4 }),
    });
    assert.equal(res.status, 200, await res.clone().text());
    const doc = proxy.sessions.rollout(session.session_id)!;
    promptIds = doc.calls[0]!.prompt_token_ids!;
    const live = (await post(engine.url, '/detokenize', { tokens: [] })).status;
    assert.equal(live, 200);
    for (const id of new Set(promptIds))
      expected[id] = ((await post(engine.url, '/detokenize', { tokens: [id] })).body as { prompt: string }).prompt;
    writeFileSync(rolloutFile, JSON.stringify(doc));
  } finally {
    await proxy.close();
    await engine.close();
  }
  assert.ok(promptIds.length > 5);
  await assert.rejects(fetch(`${engine.url}/health`), 'the engine is stopped');

  const r = await offlineTokenTexts(['harness-lab/tiny-qwen3'], promptIds, { dataDirs: [TEST_DATA_DIR] });
  assert.equal(r.problem, null);
  assert.equal(r.source?.kind, 'gguf');
  for (const id of promptIds) assert.equal(r.texts[id], expected[id], `token ${id}`);
  assert.match(promptIds.map((id) => r.texts[id]).join(''), /<\|im_start\|>user\nSay hello to the world<\|im_end\|>/);

  // The CLI, as a user runs it once the engine is gone.
  const html = join(dir, 'report.html');
  const cli = spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'src', 'cli', 'main.ts'), 'report', rolloutFile, '-o', html], {
    encoding: 'utf8',
    env: { ...process.env, HARNESS_LAB_DATA_DIR: TEST_DATA_DIR },
  });
  assert.equal(cli.status, 0, cli.stderr);
  assert.match(cli.stdout, /prompt-token texts from .*tiny-qwen3.*\.gguf/);
  const page = readFileSync(html, 'utf8');
  const im = promptIds.find((id) => expected[id] === '<|im_start|>')!;
  // The data is inlined as JSON with `<` escaped (a script element cannot be closed from inside it).
  assert.ok(page.includes(`"${im}":"\\u003c|im_start|>"`), 'the report carries the prompt-token texts');
});

test('tokenizer.json from the Hugging Face cache; no tokenizer: ids, with why and how to get text', async () => {
  const hub = join(dir, 'hf', 'hub');
  const snap = join(hub, 'models--acme--tiny-chat', 'snapshots', 'abc123');
  mkdirSync(snap, { recursive: true });
  const tokenizer = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [{ id: 3, content: '<|im_start|>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }],
    normalizer: null,
    pre_tokenizer: { type: 'Whitespace' },
    post_processor: null,
    decoder: null,
    model: { type: 'WordLevel', vocab: { hello: 0, world: 1, '[UNK]': 2, '<|im_start|>': 3 }, unk_token: '[UNK]' },
  };
  writeFileSync(join(snap, 'tokenizer.json'), JSON.stringify(tokenizer));
  const env = { ...process.env, HF_HUB_CACHE: hub };
  assert.deepEqual(findTokenizer(['acme/tiny-chat'], { env }), { kind: 'tokenizer.json', path: join(snap, 'tokenizer.json') });
  const r = await offlineTokenTexts(['acme/tiny-chat'], [3, 0, 1], { env });
  assert.deepEqual(r.texts, { 3: '<|im_start|>', 0: 'hello', 1: 'world' });
  assert.equal(r.problem, null);

  const none = await offlineTokenTexts(['acme/not-here'], [1, 2], { env });
  assert.deepEqual(none.missing, [1, 2]);
  assert.match(none.problem!, /no tokenizer for acme\/not-here on this machine, so prompt tokens are shown as ids/);
  assert.match(none.problem!, /huggingface-cli download acme\/not-here tokenizer\.json/);
});

test(
  'while a session is live, its prompt-token texts are fetched off the call path and kept with the capture',
  { timeout: 240_000 },
  async () => {
    const engine = await startTestEngine();
    const dataDir = join(dir, 'live');
    const proxy = await CaptureProxy.start({ engineUrl: engine.url, model: engine.engine.modelName, dataDir });
    const warnings: string[] = [];
    const live = new LiveTokenTexts(() => dataDir, { warn: (m) => warnings.push(m) }, 50);
    const sub = proxy.sessions.onDidRecordCall((rec) => live.noteCall(rec));
    try {
      const session = proxy.sessions.create();
      const res = await fetch(`${proxy.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${session.session_id}` },
        body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'Kept with the capture' }], max_tokens: 2 }),
      });
      assert.equal(res.status, 200);
      assert.equal(live.read(session.session_id), undefined, 'nothing is fetched on the call path');
      await live.idle();
      const ids = proxy.sessions.calls(session.session_id)[0]!.prompt_token_ids!;
      const kept = live.read(session.session_id)!;
      assert.ok(kept, `no texts kept (${warnings.join('; ')})`);
      assert.match(ids.map((id) => kept[id]).join(''), /<\|im_start\|>user\nKept with the capture<\|im_end\|>/);
      assert.ok(existsSync(join(dataDir, 'token-texts', `${session.session_id}.json`)));
      live.delete(session.session_id);
      assert.equal(live.read(session.session_id), undefined);
    } finally {
      sub.dispose();
      live.dispose();
      await proxy.close();
      await engine.close();
    }
  },
);
