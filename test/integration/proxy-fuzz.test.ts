// 10,000 generated malformed or unusual bodies per dialect: every answer is a 4xx in that dialect's
// error shape or a valid reply; never a proxy 5xx, never an internal error, never a crash.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import { Agent, request } from 'undici';
import { CaptureProxy } from '../../src/capture/proxy.js';
import { startFakeEngine, type FakeEngine } from '../../src/engine/fake-engine.js';

const RUNS = Number(process.env.FUZZ_RUNS ?? 10_000);

interface DialectCase {
  name: string;
  path: string;
  headers: Record<string, string>;
  base: Record<string, unknown>;
  isErrorShape(body: unknown, status: number): boolean;
}

const obj = (v: unknown): Record<string, unknown> => (v && typeof v === 'object' ? (v as Record<string, unknown>) : {});
const openaiError = (body: unknown) => typeof obj(obj(body).error).message === 'string';

const CASES: DialectCase[] = [
  {
    name: 'openai chat',
    path: '/v1/chat/completions',
    headers: {},
    base: {
      model: 'm',
      messages: [
        { role: 'system', content: 'sys' },
        { role: 'user', content: [{ type: 'text', text: 'hi' }] },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'bash', arguments: '{"command":"ls"}' } }],
        },
        { role: 'tool', tool_call_id: 'c1', content: 'a.txt' },
      ],
      tools: [{ type: 'function', function: { name: 'bash', parameters: { type: 'object' } } }],
      temperature: 0.5,
    },
    isErrorShape: openaiError,
  },
  {
    name: 'openai responses',
    path: '/v1/responses',
    headers: {},
    base: {
      model: 'm',
      instructions: 'sys',
      input: [
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'hi' }] },
        { type: 'function_call', call_id: 'c1', name: 'shell', arguments: '{"command":["ls"]}' },
        { type: 'function_call_output', call_id: 'c1', output: 'a.txt' },
      ],
      tools: [{ type: 'function', name: 'shell', parameters: { type: 'object' } }],
      max_output_tokens: 100,
    },
    isErrorShape: openaiError,
  },
  {
    name: 'anthropic messages',
    path: '/v1/messages',
    headers: { 'anthropic-version': '2023-06-01' },
    base: {
      model: 'claude',
      max_tokens: 100,
      system: [{ type: 'text', text: 'sys' }],
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'Bash', input: { command: 'ls' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'a.txt' }] },
      ],
      tools: [{ name: 'Bash', input_schema: { type: 'object' } }],
    },
    isErrorShape: (body) => obj(body).type === 'error' && typeof obj(obj(body).error).message === 'string',
  },
  {
    name: 'google gemini',
    path: '/v1beta/models/gemini-x:generateContent',
    headers: {},
    base: {
      systemInstruction: { parts: [{ text: 'sys' }] },
      contents: [
        { role: 'user', parts: [{ text: 'hi' }] },
        { role: 'model', parts: [{ functionCall: { name: 'run', args: { command: 'ls' } } }] },
        { role: 'user', parts: [{ functionResponse: { name: 'run', response: { output: 'a.txt' } } }] },
      ],
      tools: [{ functionDeclarations: [{ name: 'run', parameters: { type: 'OBJECT' } }] }],
      generationConfig: { maxOutputTokens: 100 },
    },
    isErrorShape: (body, status) => typeof obj(obj(body).error).message === 'string' && obj(obj(body).error).code === status,
  },
];

/** Replaces the value at a random path of `base` (or deletes it), keeping the rest valid. */
function mutate(base: unknown, choices: number[], replacement: unknown, remove: boolean): unknown {
  if (choices.length === 0 || base === null || typeof base !== 'object') return replacement;
  const copy: Record<string, unknown> | unknown[] = Array.isArray(base) ? [...base] : { ...(base as Record<string, unknown>) };
  const keys = Object.keys(copy);
  if (keys.length === 0) return replacement;
  const key = keys[choices[0]! % keys.length]!;
  const child = (copy as Record<string, unknown>)[key];
  if (choices.length === 1 && remove && !Array.isArray(copy)) delete (copy as Record<string, unknown>)[key];
  else (copy as Record<string, unknown>)[key] = mutate(child, choices.slice(1), replacement, remove);
  return copy;
}

function bodyArbitrary(base: Record<string, unknown>): fc.Arbitrary<string> {
  const weird = fc.oneof(
    fc.jsonValue({ maxDepth: 3 }),
    fc.constantFrom(null, '', 0, -1, 1e308, true, [], {}, 'x'.repeat(5000), '\u0000\ud800', [[[[[]]]]]),
  );
  const mutated = fc
    .tuple(fc.array(fc.nat(), { minLength: 1, maxLength: 6 }), weird, fc.boolean())
    .map(([choices, value, remove]) => JSON.stringify(mutate(base, choices, value, remove)));
  const extraKeys = fc
    .dictionary(fc.string({ maxLength: 12 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 })
    .map((extra) => JSON.stringify({ ...base, ...extra }));
  const nested = fc.integer({ min: 1, max: 20000 }).map((depth) => `{"messages":${'['.repeat(depth)}${']'.repeat(depth)}}`);
  const garbage = fc.oneof(
    fc.string({ maxLength: 200 }),
    fc.jsonValue().map((v) => JSON.stringify(v)),
    fc.constant('{"a":'),
    fc.constant('\ufeff{}'),
  );
  return fc.oneof(
    { arbitrary: mutated, weight: 6 },
    { arbitrary: extraKeys, weight: 2 },
    { arbitrary: garbage, weight: 2 },
    { arbitrary: nested, weight: 1 },
  );
}

describe('fuzz: malformed and unusual bodies in every dialect', () => {
  let engine: FakeEngine;
  let proxy: CaptureProxy;
  let key: string;
  const internalErrors: string[] = [];
  const agent = new Agent({ connections: 16 });

  before(async () => {
    engine = await startFakeEngine();
    proxy = await CaptureProxy.start({
      engineUrl: engine.url,
      model: engine.model,
      captureLevel: 'tokens',
      logger: { info() {}, warn() {}, error: (m) => internalErrors.push(m) },
    });
    key = proxy.sessions.create().session_id;
  });
  after(async () => {
    await proxy.close();
    await engine.close();
    await agent.close();
  });

  for (const dialect of CASES) {
    test(`${dialect.name}: ${RUNS} bodies, only 2xx replies or 4xx errors in the dialect's shape`, async () => {
      const bodies = fc.sample(bodyArbitrary(dialect.base), { numRuns: RUNS, seed: 20261130 });
      const failures: string[] = [];
      let ok = 0;
      let rejected = 0;
      let next = 0;
      const worker = async () => {
        while (next < bodies.length) {
          const body = bodies[next++]!;
          const res = await request(`${proxy.url}${dialect.path}`, {
            method: 'POST',
            dispatcher: agent,
            headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, ...dialect.headers },
            body,
          });
          const text = await res.body.text();
          if (res.statusCode === 200) {
            ok++;
            if (String(res.headers['content-type']).includes('text/event-stream')) continue;
            try {
              JSON.parse(text);
            } catch {
              failures.push(`200 with a non-JSON body for ${body.slice(0, 200)}`);
            }
            continue;
          }
          let parsed: unknown;
          try {
            parsed = JSON.parse(text);
          } catch {
            parsed = undefined;
          }
          if (res.statusCode >= 400 && res.statusCode < 500 && dialect.isErrorShape(parsed, res.statusCode)) rejected++;
          else failures.push(`${res.statusCode} ${text.slice(0, 200)} for ${body.slice(0, 200)}`);
        }
      };
      await Promise.all(Array.from({ length: 8 }, worker));
      assert.deepEqual(failures.slice(0, 5), [], `${failures.length} bad answers`);
      assert.equal(ok + rejected, RUNS);
      assert.ok(ok > RUNS / 20, `enough bodies were valid to exercise the reply path (${ok})`);
      assert.ok(rejected > RUNS / 20, `enough bodies were rejected (${rejected})`);
      assert.deepEqual(internalErrors, []);
      const health = await request(`${proxy.url}/health`, { dispatcher: agent });
      assert.equal(health.statusCode, 200);
      await health.body.text();
    });
  }
});
