// Restoring Gemini function-call ids a harness dropped on replay (pi's google-generative-ai provider):
// request shapes recorded from pi 0.73.1 and gemini-cli 0.61.0 against the proxy.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { restoreGeminiCallIds } from '../../src/capture/dialects/gemini-call-ids.js';
import type { CallRecord, JsonObject } from '../../src/capture/types.js';

/** The part of an earlier call record the restorer reads: the tool calls the proxy answered with. */
function answered(calls: { id: string; name: string; arguments: string }[]): CallRecord {
  return {
    engine_response: {
      choices: [
        {
          index: 0,
          finish_reason: 'tool_calls',
          message: {
            role: 'assistant',
            content: null,
            tool_calls: calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } })),
          },
        },
      ],
    },
  } as unknown as CallRecord;
}

const task = { role: 'user', parts: [{ text: 'Use your shell tool to write the proof file, then say you are done.' }] };

// pi 0.73.1, google-generative-ai, second request of a tool round trip: no ids anywhere.
const piReplay: JsonObject = {
  contents: [
    task,
    { role: 'model', parts: [{ functionCall: { name: 'bash', args: { command: 'echo hl-proof > proof.txt && cat proof.txt' } } }] },
    { role: 'user', parts: [{ functionResponse: { name: 'bash', response: { output: 'hl-proof\n' } } }] },
  ],
  generationConfig: { maxOutputTokens: 16384 },
};

describe('Gemini call ids restored from the session', () => {
  test("the session's calls are read only when a part lacks its id", () => {
    let reads = 0;
    const previous = () => {
      reads++;
      return [answered([{ id: 'chatcmpl-tool-1', name: 'bash', arguments: '{"command": "echo hl-proof > proof.txt && cat proof.txt"}' }])];
    };
    const withIds: JsonObject = {
      contents: [
        task,
        { role: 'model', parts: [{ functionCall: { id: 'x1', name: 'bash', args: { command: 'ls' } } }] },
        { role: 'user', parts: [{ functionResponse: { id: 'x1', name: 'bash', response: { output: '' } } }] },
      ],
    };
    assert.equal(restoreGeminiCallIds(withIds, previous).restored, 0);
    assert.equal(reads, 0, 'every id present (gemini-cli): nothing read');
    assert.equal(restoreGeminiCallIds(piReplay, previous).restored, 2);
    assert.equal(reads, 1);
  });

  test('pi: the replayed call and its response get the id the proxy answered with', () => {
    const previous = [
      answered([{ id: 'chatcmpl-tool-ae763de80', name: 'bash', arguments: '{"command": "echo hl-proof > proof.txt && cat proof.txt"}' }]),
    ];
    const r = restoreGeminiCallIds(piReplay, previous);
    assert.equal(r.restored, 2);
    const contents = r.body.contents as { parts: JsonObject[] }[];
    assert.equal((contents[1]!.parts[0]!.functionCall as JsonObject).id, 'chatcmpl-tool-ae763de80');
    assert.equal((contents[2]!.parts[0]!.functionResponse as JsonObject).id, 'chatcmpl-tool-ae763de80');
    assert.match(r.finding!, /^\[INFO\] call_ids_restored: 2 /);
    // The body as received (it is what the record keeps) is not touched.
    assert.equal(((piReplay.contents as { parts: JsonObject[] }[])[1]!.parts[0]!.functionCall as JsonObject).id, undefined);
  });

  test('two parallel calls of one tool: matched by arguments, responses by order', () => {
    const body: JsonObject = {
      contents: [
        task,
        {
          role: 'model',
          parts: [{ functionCall: { name: 'bash', args: { command: 'b' } } }, { functionCall: { name: 'bash', args: { command: 'a' } } }],
        },
        {
          role: 'user',
          parts: [
            { functionResponse: { name: 'bash', response: { output: 'B' } } },
            { functionResponse: { name: 'bash', response: { output: 'A' } } },
          ],
        },
      ],
    };
    const r = restoreGeminiCallIds(body, [
      answered([
        { id: 'id-a', name: 'bash', arguments: '{"command":"a"}' },
        { id: 'id-b', name: 'bash', arguments: '{"command":"b"}' },
      ]),
    ]);
    const contents = r.body.contents as { parts: JsonObject[] }[];
    assert.deepEqual(
      contents[1]!.parts.map((p) => (p.functionCall as JsonObject).id),
      ['id-b', 'id-a'],
    );
    assert.deepEqual(
      contents[2]!.parts.map((p) => (p.functionResponse as JsonObject).id),
      ['id-b', 'id-a'],
    );
  });

  test('the same call made twice in a session takes each answer once, in order', () => {
    const call = { functionCall: { name: 'bash', args: { command: 'ls' } } };
    const body: JsonObject = {
      contents: [
        task,
        { role: 'model', parts: [call] },
        { role: 'user', parts: [{ functionResponse: { name: 'bash', response: {} } }] },
        { role: 'model', parts: [call] },
      ],
    };
    const r = restoreGeminiCallIds(body, [
      answered([{ id: 'first', name: 'bash', arguments: '{"command":"ls"}' }]),
      answered([{ id: 'second', name: 'bash', arguments: '{"command":"ls"}' }]),
    ]);
    const contents = r.body.contents as { parts: JsonObject[] }[];
    assert.equal((contents[1]!.parts[0]!.functionCall as JsonObject).id, 'first');
    assert.equal((contents[3]!.parts[0]!.functionCall as JsonObject).id, 'second');
  });

  test('gemini-cli sends its ids back: nothing changes, no finding', () => {
    const body: JsonObject = {
      contents: [
        task,
        {
          role: 'model',
          parts: [
            {
              functionCall: { name: 'run_shell_command', args: { command: 'ls' }, id: 'chatcmpl-tool-50b15b910' },
              thoughtSignature: 'skip_thought_signature_validator',
            },
          ],
        },
        {
          role: 'user',
          parts: [{ functionResponse: { name: 'run_shell_command', response: { output: 'x' }, id: 'chatcmpl-tool-50b15b910' } }],
        },
      ],
    };
    const r = restoreGeminiCallIds(body, [
      answered([{ id: 'chatcmpl-tool-50b15b910', name: 'run_shell_command', arguments: '{"command":"ls"}' }]),
    ]);
    assert.equal(r.body, body);
    assert.equal(r.restored, 0);
    assert.equal(r.finding, undefined);
  });

  test('a call the session never answered keeps no id and is reported', () => {
    const r = restoreGeminiCallIds(piReplay, [answered([{ id: 'other', name: 'bash', arguments: '{"command":"pwd"}' }])]);
    assert.equal(r.restored, 0);
    assert.equal(r.body, piReplay);
    assert.match(r.finding!, /^\[INFO\] call_ids_missing: 2 /);
  });
});
