import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ChatRequest } from '../../src/capture/types.js';
import { formatDifference, jsonDifferences, matchCall } from '../../src/replay/match.js';

const base = (): ChatRequest => ({
  model: 'm',
  messages: [
    { role: 'system', content: 'You are an agent. Today is 2026-12-02. Work in /tmp/run-abc123/work.' },
    { role: 'user', content: 'Create hello.txt' },
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'bash', arguments: '{"cmd":"ls"}' } }],
    },
    { role: 'tool', tool_call_id: 'call_1', content: 'a.txt\nProcess Group PGID: 66' },
  ],
  tools: [{ type: 'function', function: { name: 'bash', description: 'run a command' } }],
  temperature: 1,
  max_tokens: 8192,
});

test('the same request is an exact match, whatever the proxy set (model, sampling, token flags)', () => {
  const replayed = { ...base(), model: 'other', temperature: 0.2, seed: 7, logprobs: true, return_token_ids: true, max_tokens: 10 };
  const m = matchCall({ request: base() }, { request: replayed });
  assert.equal(m.level, 'exact');
  assert.deepEqual(m.tolerated, []);
  assert.equal(m.firstDifference, null);
});

test('dates, temp paths, ids and pids the harness makes by itself are tolerated, each listed with its rule', () => {
  const replayed = base();
  replayed.messages[0]!.content = 'You are an agent. Today is 2026-12-03. Work in /tmp/run-ffe991/work.';
  replayed.messages[3]!.content = 'a.txt\nProcess Group PGID: 68';
  const m = matchCall({ request: base() }, { request: replayed });
  assert.equal(m.level, 'tolerated');
  assert.deepEqual(
    m.tolerated.map((d) => [d.path, d.rules]),
    [
      ['messages[0].content', ['date', 'temp path']],
      ['messages[3].content', ['pid']],
    ],
  );
  assert.deepEqual(m.toolOutputs, []);
});

test("codex's Chunk ID is tolerated even when its random hex is all digits (the hex id rule needs a letter)", () => {
  const out = (id: string) => `Chunk ID: ${id}\nWall time: 0.0000 seconds\nProcess exited with code 0\nOutput:\n`;
  const recorded = base();
  recorded.messages[3]!.content = out('90f9f1');
  for (const id of ['904213', 'c1648d', 'abcdef']) {
    const replayed = base();
    replayed.messages[3]!.content = out(id);
    const m = matchCall({ request: recorded }, { request: replayed });
    assert.deepEqual([m.level, m.toolOutputs, m.tolerated.map((d) => d.rules)], ['tolerated', [], [['duration', 'labelled id']]], id);
  }
});

test("openclaw's prompt stamp on another day is tolerated: the weekday goes with its date", () => {
  const stamp = (s: string) => `[${s}] Create a file named \`hello.txt\`.`;
  const recorded = base();
  recorded.messages[1]!.content = stamp('Wed 2026-12-02 15:52 UTC');
  for (const s of ['Thu 2026-12-03 01:48 UTC', 'Wed 2026-12-02 15:53 UTC']) {
    const replayed = base();
    replayed.messages[1]!.content = stamp(s);
    const m = matchCall({ request: recorded }, { request: replayed });
    assert.deepEqual([m.level, m.tolerated.map((d) => d.rules)], ['tolerated', [['timestamp']]], s);
  }
  const otherWord = base();
  otherWord.messages[1]!.content = '[Wed 2026-12-02 15:52 UTC] Create a file named `hola.txt`.';
  assert.equal(matchCall({ request: recorded }, { request: otherWord }).level, 'none');
});

test("the host's kernel release in a harness's prompt is tolerated: a fixture replays on another host", () => {
  const prompt = (os: string) => `Environment:\n - Platform: linux\n - OS Version: ${os}\n - Model: tiny`;
  const recorded = base();
  recorded.messages[0]!.content = prompt('Linux 6.18.44-fc-v1045');
  for (const os of ['Linux 6.18.44-fc-v1252', 'Linux 6.8.0-49-generic', 'Linux 5.15.167.4-microsoft-standard-WSL2']) {
    const replayed = base();
    replayed.messages[0]!.content = prompt(os);
    const m = matchCall({ request: recorded }, { request: replayed });
    assert.deepEqual([m.level, m.tolerated.map((d) => d.rules)], ['tolerated', [['os version']]], os);
  }
  const otherPlatform = base();
  otherPlatform.messages[0]!.content = prompt('Linux 6.18.44-fc-v1045').replace('Platform: linux', 'Platform: darwin');
  assert.equal(matchCall({ request: recorded }, { request: otherPlatform }).level, 'none');
});

test('a tool result that differs is reported apart, and does not halt', () => {
  const replayed = base();
  replayed.messages[3]!.content = 'b.txt\nProcess Group PGID: 66';
  const m = matchCall({ request: base() }, { request: replayed });
  assert.equal(m.level, 'tolerated');
  assert.deepEqual(
    m.toolOutputs.map((d) => d.path),
    ['messages[3].content'],
  );
  assert.equal(m.toolOutputs[0]!.replayed, 'b.txt\nProcess Group PGID: 66');
});

test('a changed system prompt is no match, and the diff names the field and shows both sides', () => {
  const replayed = base();
  replayed.messages[0]!.content = 'You are a careful agent. Today is 2026-12-02. Work in /tmp/run-abc123/work.';
  const m = matchCall({ request: base() }, { request: replayed });
  assert.equal(m.level, 'none');
  assert.equal(m.firstDifference?.path, 'messages[0].content');
  const text = formatDifference(m.firstDifference!);
  assert.match(text, /^field messages\[0\]\.content\n {2}at character 9:/);
  assert.match(text, /- recorded: "You are an agent\./);
  assert.match(text, /\+ replayed: "You are a careful agent\./);
});

test('a new tool, a removed message and a changed tool description are no match, named by path', () => {
  const more = base();
  more.tools!.push({ type: 'function', function: { name: 'read' } });
  assert.equal(matchCall({ request: base() }, { request: more }).firstDifference?.path, 'tools.length');
  const fewer = base();
  fewer.messages.pop();
  assert.equal(matchCall({ request: base() }, { request: fewer }).firstDifference?.path, 'messages.length');
  const described = base();
  described.tools![0]!.function.description = 'run a shell command';
  const m = matchCall({ request: base() }, { request: described });
  assert.equal(m.level, 'none');
  assert.equal(m.firstDifference?.path, 'tools[0].function.description');
});

test('a field the harness added or dropped is a difference of its own', () => {
  const added = { ...base(), tool_choice: 'auto' };
  const m = matchCall({ request: base() }, { request: added });
  assert.equal(m.firstDifference?.path, 'tool_choice');
  assert.equal(formatDifference(m.firstDifference!), 'field tool_choice\n  - recorded: (absent)\n  + replayed: "auto"');
  assert.deepEqual(jsonDifferences({ a: [1, { b: 2 }] }, { a: [1, { b: 3 }] }), [{ path: 'a[1].b', recorded: 2, replayed: 3 }]);
});
