// The call codec: a session stored as references plus suffixes reads back exactly as it was recorded,
// whatever its shape (continuations, retries, subagent roots, compaction, parallel calls), and a
// reconstruction that does not match its hash is refused, not returned.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import fc from 'fast-check';
import {
  SessionEncoder,
  foldIds,
  listHash,
  sameJson,
  scanPromptIds,
  tokenHash,
  tokenHashV2,
  tokenHashV4,
} from '../../src/capture/call-codec.js';
import { CaptureStore, loadSessionFile, readSessionIndex } from '../../src/capture/store.js';
import { noteExtension } from '../../src/capture/token-ids.js';
import type { CallRecord, ChatMessage, SessionInfo } from '../../src/capture/types.js';

const dirs: string[] = [];
after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
function freshStore(): CaptureStore {
  const dir = mkdtempSync(join(tmpdir(), 'hl-codec-'));
  dirs.push(dir);
  return new CaptureStore(dir);
}
const info = (id: string): SessionInfo => ({
  session_id: id,
  created_at: '2026-01-01T00:00:00.000Z',
  model: 'm',
  engine_url: 'http://e',
  max_model_calls: 0,
  metadata: {},
});

interface Turn {
  prompt: number[];
  sampled: number[];
  messages: ChatMessage[];
}

function record(sessionId: string, index: number, turn: Turn, bodyKey: 'messages' | 'input' | 'contents', error = false): CallRecord {
  return {
    call_id: `c${index.toString(16).padStart(11, '0')}`,
    session_id: sessionId,
    index,
    dialect: 'openai_chat',
    path: '/v1/chat/completions',
    stream: false,
    started_at: '2026-01-01T00:00:00.000Z',
    ended_at: '2026-01-01T00:00:01.000Z',
    latency_ms: 1000,
    harness_session_id: null,
    request: {
      headers: { 'content-type': 'application/json' },
      body: { model: 'm', [bodyKey]: turn.messages.map((m) => ({ ...m, from: 'client' })), tools: [] },
    },
    engine_url: 'http://e',
    engine_request: { model: 'm', messages: turn.messages, max_tokens: 64 },
    engine_response: null,
    response_body: { ok: true },
    model: 'm',
    finish_reason: 'stop',
    usage: {
      prompt_tokens: turn.prompt.length,
      completion_tokens: turn.sampled.length,
      total_tokens: turn.prompt.length + turn.sampled.length,
    },
    n_tools: 0,
    requested_sampling_params: {},
    sampling_params: { temperature: 1 },
    findings: [],
    error: error ? { status: 502, message: 'engine failed', kind: 'engine' } : null,
    prompt_token_ids: error ? null : turn.prompt,
    completion_token_ids: error ? null : turn.sampled,
    logprobs: error ? null : turn.sampled.map(() => -0.5),
    top_logprobs: null,
    token_bytes: null,
  };
}

/** How a call relates to an earlier one: continue it, retry it, compact it, or start over (a subagent). */
type Step = {
  kind: 'continue' | 'retry' | 'compact' | 'root';
  of: number;
  extra: number[];
  sampled: number[];
  keep: number;
  error: boolean;
  /** A continuation built as the token-in bridge builds it: noted, so the encoder does not compare. */
  noted?: boolean;
};

const stepArb: fc.Arbitrary<Step> = fc.record({
  kind: fc.constantFrom('continue', 'continue', 'continue', 'retry', 'compact', 'root'),
  of: fc.nat(),
  extra: fc.array(fc.integer({ min: 0, max: 50_000 }), { minLength: 0, maxLength: 30 }),
  sampled: fc.array(fc.integer({ min: 0, max: 50_000 }), { minLength: 1, maxLength: 20 }),
  keep: fc.nat(),
  error: fc.integer({ min: 0, max: 9 }).map((n) => n < 2),
  noted: fc.boolean(),
});

function buildTurns(steps: Step[]): { turns: Turn[]; errors: boolean[] } {
  const turns: Turn[] = [];
  const errors: boolean[] = [];
  for (const [k, s] of steps.entries()) {
    const prev = turns.length ? turns[s.of % turns.length]! : undefined;
    const msg = (text: string, role = 'user'): ChatMessage => ({ role, content: text });
    let t: Turn;
    if (!prev || s.kind === 'root')
      t = { prompt: [1, ...s.extra], sampled: s.sampled, messages: [msg(`sys ${k}`, 'system'), msg(`task ${k}`)] };
    else if (s.kind === 'retry') t = { prompt: prev.prompt, sampled: s.sampled, messages: prev.messages };
    else if (s.kind === 'compact') {
      const keep = s.keep % (prev.prompt.length + 1);
      t = {
        prompt: [...prev.prompt.slice(0, keep), ...s.extra],
        sampled: s.sampled,
        messages: [...prev.messages.slice(0, s.keep % (prev.messages.length + 1)), msg(`summary ${k}`)],
      };
    } else
      t = {
        prompt: s.noted ? prev.prompt.concat(prev.sampled, s.extra) : [...prev.prompt, ...prev.sampled, ...s.extra],
        sampled: s.sampled,
        messages: [...prev.messages, msg(`answer ${k - 1}`, 'assistant'), { role: 'tool', content: `result ${k}`, tool_call_id: `t${k}` }],
      };
    if (prev && s.kind === 'continue' && s.noted) noteExtension(t.prompt, prev.prompt, prev.sampled);
    turns.push(t);
    errors.push(s.error);
  }
  return { turns, errors };
}

test('random session shapes read back field for field, through a store that writes them against their parents', async () => {
  let n = 0;
  await fc.assert(
    fc.asyncProperty(
      fc.array(stepArb, { minLength: 1, maxLength: 25 }),
      fc.constantFrom('messages' as const, 'input' as const, 'contents' as const),
      fc.boolean(),
      async (steps, bodyKey, concurrent) => {
        const store = freshStore();
        const id = `s${n++}`;
        await store.append(id, { type: 'session', ...info(id) });
        const { turns, errors } = buildTurns(steps);
        const records = turns.map((t, i) => record(id, i, t, bodyKey, errors[i]));
        // Parallel appends (subagents in flight together) are encoded only against lines already on disk.
        if (concurrent) await Promise.all(records.map((r) => store.append(id, { type: 'call', ...r })));
        else for (const r of records) await store.append(id, { type: 'call', ...r });
        await store.close();
        const loaded = loadSessionFile(store.fileOf(id))!;
        assert.equal(loaded.skipped, 0);
        assert.deepEqual(loaded.calls, JSON.parse(JSON.stringify(records)));
        const index = readSessionIndex(store.fileOf(id))!;
        assert.equal(index.tally.n, records.length);
        assert.equal(index.tally.next, records.length);
      },
    ),
    { numRuns: 60 },
  );
});

test('a linear 40-turn session is stored in bytes that grow with its turns, not their square', async () => {
  const store = freshStore();
  await store.append('lin', { type: 'session', ...info('lin') });
  const steps: Step[] = Array.from({ length: 40 }, (_, k) => ({
    kind: k === 0 ? 'root' : 'continue',
    of: k - 1,
    extra: Array.from({ length: 20 }, (_, j) => k * 100 + j),
    sampled: [k, k + 1, k + 2],
    keep: 0,
    error: false,
  }));
  const records = buildTurns(steps).turns.map((t, i) => record('lin', i, t, 'messages'));
  for (const r of records) await store.append('lin', { type: 'call', ...r });
  await store.close();
  const full = records.reduce((b, r) => b + JSON.stringify(r).length, 0);
  const stored = statSync(store.fileOf('lin')).size;
  assert.ok(stored * 5 < full, `stored ${stored} bytes against ${full} for full records`);
  assert.deepEqual(loadSessionFile(store.fileOf('lin'))!.calls, JSON.parse(JSON.stringify(records)));
});

test('a suffix that does not rebuild its hash is refused with a warning, and so is every call written against it', async () => {
  const store = freshStore();
  await store.append('bad', { type: 'session', ...info('bad') });
  const steps: Step[] = Array.from({ length: 3 }, (_, k) => ({
    kind: k === 0 ? 'root' : 'continue',
    of: k - 1,
    extra: Array.from({ length: 10 }, (_, j) => k * 100 + j),
    sampled: [k],
    keep: 0,
    error: false,
  }));
  for (const r of buildTurns(steps).turns.map((t, i) => record('bad', i, t, 'messages'))) await store.append('bad', { type: 'call', ...r });
  await store.close();
  const file = store.fileOf('bad');
  const lines = readFileSync(file, 'utf8').split('\n');
  const second = lines.findIndex((l) => l.includes('"index":1,'));
  const line = JSON.parse(lines[second]!) as { enc: unknown; prompt_token_ids: number[] };
  assert.ok(line.enc, 'the second call is written against the first');
  line.prompt_token_ids[0] = 999_999;
  lines[second] = JSON.stringify(line);
  writeFileSync(file, lines.join('\n'));
  const warnings: string[] = [];
  const loaded = loadSessionFile(file, (m) => warnings.push(m))!;
  assert.deepEqual(
    loaded.calls.map((c) => c.index),
    [0],
  );
  assert.match(warnings[0]!, /do not match their hash/);
  assert.match(warnings[1]!, /not stored before it/);
});

test('a file written before the codec (full records, no tallies) still reads, and its index comes from reading it', () => {
  const store = freshStore();
  const turns = buildTurns([
    { kind: 'root', of: 0, extra: [5, 6], sampled: [7], keep: 0, error: false },
    { kind: 'continue', of: 0, extra: [8], sampled: [9], keep: 0, error: false },
  ]).turns;
  const records = turns.map((t, i) => record('old', i, t, 'messages'));
  writeFileSync(
    store.fileOf('old'),
    [{ type: 'session', ...info('old') }, ...records.map((r) => ({ type: 'call', ...r }))].map((l) => JSON.stringify(l)).join('\n') + '\n',
  );
  assert.deepEqual(loadSessionFile(store.fileOf('old'))!.calls, JSON.parse(JSON.stringify(records)));
  const index = readSessionIndex(store.fileOf('old'))!;
  assert.deepEqual({ n: index.tally.n, ok: index.tally.ok, pt: index.tally.pt }, { n: 2, ok: 2, pt: 3 + 5 });
});

test('v2 and v3 files still read, a suffix whose hash is of another version is refused, and a newer line version is named', () => {
  const store = freshStore();
  const first = Array.from({ length: 40 }, (_, i) => 1000 + i);
  const second = [...first, 77, 88, 99];
  const base = record('old', 0, { prompt: first, sampled: [77], messages: [{ role: 'user', content: 'hi' }] }, 'messages');
  const next = record(
    'old',
    1,
    {
      prompt: second,
      sampled: [5],
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'x' },
        { role: 'user', content: 'more' },
      ],
    },
    'messages',
  );
  const suffixLine = (v: number, h: string) => ({
    type: 'call',
    v,
    enc: { p: { from: base.call_id, keep: 41, h } },
    ...next,
    prompt_token_ids: [88, 99],
  });
  const write = (v: number, h: string) =>
    writeFileSync(
      store.fileOf('old'),
      [{ type: 'session', ...info('old') }, { type: 'call', v, ...base }, suffixLine(v, h)].map((l) => JSON.stringify(l)).join('\n') + '\n',
    );
  const read = () => {
    const warnings: string[] = [];
    const calls = loadSessionFile(store.fileOf('old'), (m) => warnings.push(m))!.calls;
    return { calls, warnings };
  };
  // Each version's own hash reads back; another version's hash of the same ids does not pass (the
  // line's version decides which is checked).
  for (const [v, own, other] of [
    [2, tokenHashV2, tokenHash],
    [3, tokenHash, tokenHashV4],
    [4, tokenHashV4, tokenHash],
  ] as const) {
    write(v, own(second));
    assert.deepEqual(
      read().calls.map((c) => c.prompt_token_ids),
      [first, second],
      `v${v}`,
    );
    write(v, other(second));
    const { calls, warnings } = read();
    assert.deepEqual(
      calls.map((c) => c.index),
      [0],
      `v${v}`,
    );
    assert.match(warnings[0]!, /do not match their hash/);
  }
  write(5, tokenHashV4(second));
  const { calls, warnings } = read();
  assert.deepEqual(
    calls.map((c) => c.index),
    [],
  );
  assert.match(warnings.join('\n'), /line version 5 was written by a newer Harness Lab \(this one reads up to 4\)/);
});

test('the v3 and v4 prompt-id hashes: one value per list, and each changes with any id, the order or the length', () => {
  fc.assert(
    fc.property(
      fc.array(fc.integer({ min: 0, max: 2 ** 31 - 1 }), { minLength: 1, maxLength: 300 }),
      fc.nat(),
      fc.integer({ min: 1, max: 2 ** 20 }),
      (ids, at, delta) => {
        for (const hash of [tokenHash, tokenHashV4]) {
          const h = hash(ids);
          assert.match(h, /^[0-9a-f]{16}$/);
          assert.equal(hash(Uint32Array.from(ids)), h, 'a typed copy hashes the same');
          const i = at % ids.length;
          const changed = ids.slice();
          changed[i] = changed[i]! + delta;
          assert.notEqual(hash(changed), h);
          assert.notEqual(hash([...ids, 0]), h);
          assert.notEqual(hash(ids.slice(0, -1)), h);
          if (ids.length > 1 && ids[0] !== ids[1]) assert.notEqual(hash([ids[1]!, ids[0]!, ...ids.slice(2)]), h);
        }
      },
    ),
  );
});

test('sameJson: true only where JSON.stringify writes the same text, and true for a parsed copy', () => {
  fc.assert(
    fc.property(fc.jsonValue(), fc.jsonValue(), (a, b) => {
      if (sameJson(a, b)) assert.equal(JSON.stringify(a), JSON.stringify(b));
      assert.equal(sameJson(a, JSON.parse(JSON.stringify(a))), true, 'a parsed copy has the same text');
    }),
    { numRuns: 500 },
  );
  // Key order is part of the text; properties stringify leaves out are left out here too.
  assert.equal(sameJson({ a: 1, b: 2 }, { b: 2, a: 1 }), false);
  assert.equal(sameJson({ a: 1, skip: undefined, f: () => 1 }, { a: 1 }), true);
  assert.equal(sameJson([undefined], [null]), false, 'equal text, but a false only shares less');
  assert.equal(sameJson({ toJSON: () => 'x' }, { toJSON: () => 'x' }), false, 'not a plain object');
  assert.equal(sameJson(new Date(0), new Date(0)), false);
  assert.equal(sameJson(Number.NaN, Number.NaN), false);
  let deep: unknown = 1;
  let deepCopy: unknown = 1;
  for (let i = 0; i < 200; i++) {
    deep = [deep];
    deepCopy = [deepCopy];
  }
  assert.equal(sameJson(deep, deepCopy), true, 'past the recursion bound the texts are compared');
});

test("the encoder hashes a kept history by extending its parent's state: the same hash as the whole list, in every shape", () => {
  const msg = (role: string, content: string) => ({ role, content });
  const histories: { role: string; content: string }[][] = [];
  let history = [msg('system', 'sys'), msg('user', 'task')];
  for (let k = 0; k < 6; k++) {
    histories.push(history);
    // A parsed copy each call, as the proxy has: the encoder compares by value, not by identity.
    history = JSON.parse(JSON.stringify([...history, msg('assistant', `a${k}`), msg('tool', `r${k}`)])) as typeof history;
  }
  histories.push([histories[5]![0]!, msg('user', 'compacted')]); // keeps less than its parent's list
  const encoder = new SessionEncoder();
  for (const [i, messages] of histories.entries()) {
    const turn = { prompt: [1, 2, 3, i], sampled: [9], messages };
    const encoded = encoder.encode(record('s', i, turn, 'messages'));
    encoder.remember(encoded.base);
    const line = JSON.parse(encoded.text) as { enc?: { em?: { keep: number; h: string }; bm?: { h: string } } };
    if (i === 0) continue;
    assert.ok(line.enc?.em, `call ${i} is written against an earlier one`);
    assert.equal(line.enc.em.h, listHash(messages.map((m) => JSON.stringify(m))), `call ${i}: engine messages hash`);
    assert.equal(line.enc.bm!.h, listHash(messages.map((m) => JSON.stringify({ ...m, from: 'client' }))), `call ${i}: body messages hash`);
  }
});

test('a branch extends one typed buffer in place; a fork, a noted prompt and a failed write each read right', () => {
  fc.assert(
    fc.property(
      fc.array(
        fc.record({
          of: fc.nat(),
          extra: fc.array(fc.integer({ min: 0, max: 2 ** 31 - 1 }), { maxLength: 40 }),
          sampled: fc.array(fc.integer({ min: 0, max: 200_000 }), { minLength: 1, maxLength: 8 }),
          noted: fc.boolean(),
          remembered: fc.integer({ min: 0, max: 9 }).map((n) => n > 0),
        }),
        { minLength: 1, maxLength: 30 },
      ),
      (steps) => {
        // Calls built on the newest remembered call or an older one (a fork), each scanned against the
        // newest remembered base as the encoder does; every view must still hold its own ids.
        const calls: {
          prompt: number[];
          sampled: number[];
          ends: Uint32Array;
          store: { buf: Uint32Array; used: number };
          idsState: ReturnType<typeof foldIds>;
        }[] = [];
        const kept: typeof calls = [];
        for (const step of steps) {
          const newest = kept[kept.length - 1];
          const parent = kept.length ? kept[step.of % kept.length]! : undefined;
          const prompt = parent ? parent.prompt.concat(parent.sampled, step.extra) : [7, ...step.extra];
          const noted = parent !== undefined && parent === newest && step.noted;
          const scan = scanPromptIds(prompt, step.sampled, newest, noted);
          if (parent === newest && parent) assert.equal(scan.shared, parent.ends.length);
          assert.equal(scan.hash, tokenHashV4(prompt));
          const call = { prompt, sampled: step.sampled, ends: scan.ends, store: scan.store, idsState: scan.idsState };
          calls.push(call);
          if (step.remembered) kept.push(call);
          for (const c of calls) assert.deepEqual([...c.ends], [...c.prompt, ...c.sampled]);
        }
      },
    ),
    { numRuns: 300 },
  );
});

test('the prompt-id scan copies, compares and hashes (v4) exactly as separate passes would', () => {
  const baseOf = (ends: Uint32Array) => ({ ends, idsState: foldIds({ a: 0x811c9dc5, b: 0x9747b28c, n: 0 }, ends, 0, ends.length) });
  fc.assert(
    fc.property(
      fc.array(fc.integer({ min: 0, max: 2 ** 33 }), { maxLength: 60 }),
      fc.array(fc.integer({ min: 0, max: 200_000 }), { maxLength: 10 }),
      fc.option(fc.array(fc.integer({ min: 0, max: 2 ** 33 }), { maxLength: 70 }), { nil: undefined }),
      fc.nat(60),
      (prompt, completion, other, overlap) => {
        // A newest base that shares a prefix of the prompt, then differs (or a random one).
        const newest = other === undefined ? undefined : baseOf(Uint32Array.from([...prompt.slice(0, overlap), ...other]));
        const scan = scanPromptIds(prompt, completion, newest);
        assert.deepEqual([...scan.ends], [...Uint32Array.from([...prompt, ...completion])]);
        let shared = 0;
        const n = Math.min(prompt.length, newest?.ends.length ?? 0);
        while (shared < n && newest!.ends[shared] === prompt[shared]) shared++;
        assert.equal(scan.shared, shared);
        assert.equal(scan.hash, tokenHashV4(Uint32Array.from(prompt)));
        assert.deepEqual(scan.idsState, baseOf(scan.ends).idsState, 'the state over prompt ++ completion');
      },
    ),
    { numRuns: 300 },
  );
  // A continuation (the prompt extends the newest base's whole list): the hash goes on from the
  // base's state, and equals the whole list's.
  fc.assert(
    fc.property(
      fc.array(fc.integer({ min: 0, max: 2 ** 31 - 1 }), { minLength: 1, maxLength: 80 }),
      fc.array(fc.integer({ min: 0, max: 2 ** 31 - 1 }), { maxLength: 20 }),
      fc.array(fc.integer({ min: 0, max: 200_000 }), { maxLength: 10 }),
      (parent, added, completion) => {
        const newest = baseOf(Uint32Array.from(parent));
        const prompt = [...parent, ...added];
        const scan = scanPromptIds(prompt, completion, newest);
        assert.equal(scan.shared, parent.length);
        assert.equal(scan.hash, tokenHashV4(prompt));
        assert.deepEqual(scan.idsState, baseOf(Uint32Array.from([...prompt, ...completion])).idsState);
      },
    ),
    { numRuns: 300 },
  );
});
