// The proxy-side renderer, bridge and answer parser of token-in mode, on the embedded engine's tiny
// Qwen3 GGUF (the real Qwen3 vocabulary and chat template): ids equal llama.cpp's tokenization, a
// bridge extends the anchor's prompt + sampled ids exactly, and every case that cannot be proven
// starts a new root with the reason.
import assert from 'node:assert/strict';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Bridge, canonicalJson, messageKey } from '../../src/capture/render/bridge.js';
import { detectFamily, UnsupportedFamilyError } from '../../src/capture/render/families.js';
import { InThreadRenderer, Renderer } from '../../src/capture/render/renderer.js';
import type { CallRecord, ChatMessage, ChatTool } from '../../src/capture/types.js';
import { renderAssistantText } from '../../src/engine/assistant-output.js';
import { LlamaRuntime } from '../../src/engine/llama-runtime.js';
import { ensureTinyModel, IM_END } from '../../src/engine/tiny-model.js';

const DATA_DIR = process.env.HARNESS_LAB_DATA_DIR ?? join(tmpdir(), 'harness-lab-test-data');
let renderer: Renderer;
let runtime: LlamaRuntime;
before(async () => {
  const { path } = await ensureTinyModel({ dataDir: DATA_DIR });
  renderer = await Renderer.load(path);
  runtime = await LlamaRuntime.load({ modelPath: path, contextSize: 4096 });
});
after(async () => {
  await runtime?.dispose();
});

const tools: ChatTool[] = [
  {
    type: 'function',
    function: {
      name: 'bash',
      description: 'Run a shell command',
      parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
    },
  },
];
const conversation: ChatMessage[] = [
  { role: 'system', content: 'You are a careful agent.' },
  { role: 'user', content: 'Count lines of ünïcödé 日本語 notes.txt 😀, then   report 12345.\n\n  indented\ttab' },
  {
    role: 'assistant',
    content: 'Sure.',
    reasoning_content: 'I should list first.',
    tool_calls: [{ id: 'a', type: 'function', function: { name: 'bash', arguments: '{"command": "ls"}' } }],
  },
  { role: 'tool', tool_call_id: 'a', content: 'notes.txt\n' },
  { role: 'user', content: 'Thanks. <not a tag> & "quotes"' },
];

describe('renderer', () => {
  test('reads the GGUF: the Qwen3 family, stop ids <|im_end|> and <|endoftext|>', async () => {
    assert.equal(renderer.family.name, 'qwen3');
    assert.deepEqual([...renderer.stopIds].sort(), [151643, 151645]);
    assert.equal(renderer.turnCloseText, '<|im_end|>');
  });

  test('rendered prompts tokenize to exactly the ids llama.cpp produces', async () => {
    for (let n = 1; n <= conversation.length; n++) {
      const text = renderer.renderText(conversation.slice(0, n), { tools });
      assert.deepEqual(renderer.encode(text), runtime.tokenize(text), `prefix of ${n} messages`);
    }
    const thinkingOff = renderer.renderText(conversation.slice(0, 2), { tools, kwargs: { enable_thinking: false } });
    assert.ok(thinkingOff.endsWith('<think>\n\n</think>\n\n'));
    assert.deepEqual(renderer.encode(thinkingOff), runtime.tokenize(thinkingOff));
  });

  test('decode(encode(x)) is x, and an assistant turn round-trips through the parser', async () => {
    const text = renderer.renderText(conversation, { tools });
    assert.equal(renderer.decode(renderer.encode(text)), text);
    const answer = {
      reasoning: 'Let me think.',
      content: 'Listing.',
      toolCalls: [{ name: 'bash', arguments: { command: 'ls -la', n: 2 } }],
    };
    const ids = [...renderer.encode(renderAssistantText(answer)), IM_END];
    const parsed = renderer.parseAnswer(ids, { tools, parseToolCalls: true });
    assert.equal(parsed.reasoning, 'Let me think.');
    assert.equal(parsed.content, 'Listing.');
    assert.equal(parsed.toolCallParse, 'ok');
    assert.deepEqual(parsed.toolCallStatuses, ['ok']);
    assert.equal(parsed.toolCalls[0]!.function.arguments, '{"command": "ls -la", "n": 2}');
    assert.ok(parsed.stopped);
    // Re-rendered as the next turn's history, the parsed message gives back the sampled text.
    const history = renderer.renderText(
      [
        { role: 'user', content: 'x' },
        { role: 'assistant', ...parsed, reasoning_content: parsed.reasoning, tool_calls: parsed.toolCalls },
        { role: 'tool', content: 'ok' },
      ],
      { tools },
    );
    assert.ok(history.includes(`${renderAssistantText(answer)}<|im_end|>`));
  });

  test('parser statuses: bad JSON and a missing name are answered as text; an unclosed or unknown call is marked', async () => {
    const parse = (text: string, stop = true) =>
      renderer.parseAnswer([...renderer.encode(text), ...(stop ? [IM_END] : [])], { tools, parseToolCalls: true });
    const bad = parse('Trying.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"\n</tool_call>');
    assert.equal(bad.toolCallParse, 'failed');
    assert.deepEqual(bad.toolCallStatuses, ['invalid_json']);
    assert.deepEqual(bad.toolCalls, []);
    assert.match(bad.content!, /^Trying\.\n<tool_call>/);
    assert.deepEqual(parse('<tool_call>\n{"arguments": {}}\n</tool_call>').toolCallStatuses, ['missing_name']);
    assert.deepEqual(parse('<tool_call>\n[1, 2]\n</tool_call>').toolCallStatuses, ['malformed_structure']);
    const unknown = parse('<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>');
    assert.deepEqual([unknown.toolCallParse, unknown.toolCallStatuses], ['ok', ['unknown_tool']]);
    const cut = parse('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}', false);
    assert.deepEqual([cut.toolCallParse, cut.toolCallStatuses, cut.stopped], ['ok', ['unclosed_block'], false]);
    const none = parse('<think>\nhmm\n</think>\n\nJust text.');
    assert.deepEqual([none.reasoning, none.content, none.toolCallParse], ['hmm', 'Just text.', 'none']);
    const thinking = parse('<think>\nstill thinking', false);
    assert.deepEqual([thinking.reasoning, thinking.content], ['still thinking', null]);
    // A <tool_call> drafted inside the reasoning is not a call.
    const drafted = parse('<think>\nmaybe <tool_call>\n{"name": "bash"}\n</tool_call>\n</think>\n\nNo call.');
    assert.deepEqual([drafted.toolCallParse, drafted.content], ['none', 'No call.']);
  });

  test('families are told apart by their templates; unsupported ones name the fallback', async () => {
    assert.equal(detectFamily('{{ "<|start_header_id|>" }}').name, 'llama3');
    assert.equal(detectFamily('<|im_start|><tool_call><function=x><parameter=y>').name, 'qwen3_coder');
    assert.match(new UnsupportedFamilyError(detectFamily('[TOOL_CALLS]'), 'mistral-x').message, /mistral family.*--render engine/);
  });
});

/** A token-in record of the proxy, as the bridge reads it back from a session. */
function turnRecord(
  index: number,
  messages: ChatMessage[],
  answer: { reasoning?: string; content?: string; toolCalls?: { name: string; arguments: Record<string, unknown> }[] },
  promptIds: number[],
  opts: { stop?: boolean } = {},
): CallRecord {
  const sampled = [...renderer.encode(renderAssistantText(answer)), ...(opts.stop === false ? [] : [IM_END])];
  const parsed = renderer.parseAnswer(sampled, { tools, parseToolCalls: true });
  return {
    call_id: `call${index}`,
    index,
    error: null,
    findings: [],
    engine_request: { messages, tools },
    engine_response: {
      id: 'x',
      object: 'chat.completion',
      created: 0,
      model: 'm',
      choices: [
        {
          index: 0,
          finish_reason: 'stop',
          message: { role: 'assistant', content: parsed.content, reasoning: parsed.reasoning, tool_calls: parsed.toolCalls },
        },
      ],
    },
    prompt_token_ids: promptIds,
    completion_token_ids: sampled,
    logprobs: sampled.map(() => -0.5),
    render: {
      mode: 'proxy',
      family: 'qwen3',
      kind: 'full',
      anchor_call_id: null,
      anchor_tokens: 0,
      bridge_span: null,
      synthesized_close: false,
      new_root_reason: null,
      full_render: null,
    },
  } as unknown as CallRecord;
}

/** What a harness echoes of an answer: content and tool calls, reasoning dropped, arguments re-serialised. */
function echoed(record: CallRecord, opts: { respace?: boolean; keepReasoning?: boolean } = {}): ChatMessage {
  const m = record.engine_response!.choices[0]!.message;
  const calls = (m.tool_calls ?? []).map((c) => {
    const args = JSON.parse(c.function.arguments) as Record<string, unknown>;
    const reordered = Object.fromEntries(Object.entries(args).reverse());
    return {
      id: `harness-${c.id}`,
      type: 'function' as const,
      function: { name: c.function.name, arguments: opts.respace ? JSON.stringify(reordered, null, 1) : JSON.stringify(args) },
    };
  });
  return {
    role: 'assistant',
    content: m.content ?? null,
    ...(calls.length ? { tool_calls: calls } : {}),
    ...(opts.keepReasoning ? { reasoning_content: m.reasoning as string } : {}),
  };
}

describe('bridge', () => {
  const task: ChatMessage[] = [
    { role: 'system', content: 'You are a careful agent.' },
    { role: 'user', content: 'How many lines does notes.txt have?' },
  ];
  const act1 = {
    reasoning: 'List the files first.',
    content: 'Looking.',
    toolCalls: [{ name: 'bash', arguments: { command: 'ls', flags: ['-l', '-a'] } }],
  };
  const act2 = { reasoning: 'Count them.', toolCalls: [{ name: 'bash', arguments: { command: 'wc -l notes.txt' } }] };

  async function firstTurn(bridge: Bridge, owner: object) {
    const plan = await bridge.plan(owner, [], { messages: task, tools, kwargs: undefined });
    assert.equal(plan.info.kind, 'full');
    assert.equal(plan.info.new_root_reason, null);
    assert.deepEqual(plan.findings, []);
    return turnRecord(0, task, act1, plan.promptIds);
  }

  test('a tool loop with the reasoning dropped by the harness: the prompt extends the previous prompt + completion exactly', async () => {
    const bridge = new Bridge(new InThreadRenderer(renderer), { fullRenderCheck: 'always' });
    const owner = {};
    const r0 = await firstTurn(bridge, owner);
    const messages1 = [...task, echoed(r0), { role: 'tool', tool_call_id: 'harness-x', content: 'notes.txt\nother.md' }];
    const p1 = await bridge.plan(owner, [r0], { messages: messages1, tools, kwargs: undefined });
    assert.equal(p1.info.kind, 'bridge');
    assert.equal(p1.info.anchor_call_id, 'call0');
    const end0 = [...r0.prompt_token_ids!, ...r0.completion_token_ids!];
    assert.deepEqual(p1.promptIds.slice(0, end0.length), end0);
    // The bridge: the "\n" the stop token left out, the tool turn and the generation prompt, nothing else.
    const bridgeText = renderer.decode(p1.promptIds.slice(end0.length));
    assert.equal(
      bridgeText,
      '\n<|im_start|>user\n<tool_response>\nnotes.txt\nother.md\n</tool_response><|im_end|>\n<|im_start|>assistant\n',
    );
    assert.deepEqual(p1.info.bridge_span, [end0.length, p1.promptIds.length]);
    // The harness dropped the reasoning, so a full render differs: recorded as drift, not used.
    assert.equal(p1.info.full_render!.equal, false);
    assert.ok(p1.info.full_render!.drift_tokens > 0);
    // With the reasoning sent back, a full render agrees with the bridge token for token.
    const p1r = await bridge.plan(owner, [r0], {
      messages: [...task, echoed(r0, { keepReasoning: true }), messages1[3]!],
      tools,
      kwargs: undefined,
    });
    assert.equal(p1r.info.kind, 'bridge');
    assert.equal(p1r.info.full_render!.equal, true);
    assert.deepEqual(p1r.promptIds, p1.promptIds);

    // Third turn: two tool results in one Qwen3 user block; arguments respaced and reordered by the harness.
    const r1 = turnRecord(1, messages1, act2, p1.promptIds);
    const messages2 = [
      ...messages1,
      echoed(r1, { respace: true }),
      { role: 'tool', content: '3 notes.txt' },
      { role: 'tool', content: 'done' },
    ];
    const p2 = await bridge.plan(owner, [r0, r1], { messages: messages2, tools, kwargs: undefined });
    assert.equal(p2.info.kind, 'bridge');
    assert.equal(p2.info.anchor_call_id, 'call1');
    const end1 = [...r1.prompt_token_ids!, ...r1.completion_token_ids!];
    assert.deepEqual(p2.promptIds.slice(0, end1.length), end1);
    assert.equal(
      renderer.decode(p2.promptIds.slice(end1.length)),
      '\n<|im_start|>user\n<tool_response>\n3 notes.txt\n</tool_response>\n<tool_response>\ndone\n</tool_response><|im_end|>\n<|im_start|>assistant\n',
    );
  });

  test("a session's calls are read only for calls the bridge has not seen recorded (a restart), once", async () => {
    const bridge = new Bridge(new InThreadRenderer(renderer));
    let reads = 0;
    const stored: CallRecord[] = [];
    // What the proxy passes: the session, whose `calls` would load a non-resident session's file.
    const session = {
      callCount: 0,
      get calls(): readonly CallRecord[] {
        reads++;
        return [...stored];
      },
    };
    const r0 = await firstTurn(bridge, session);
    stored.push(r0);
    session.callCount = 1;
    bridge.observe(session, r0);
    const messages1 = [...task, echoed(r0), { role: 'tool', tool_call_id: 'harness-x', content: 'notes.txt' }];
    const p1 = await bridge.plan(session, session, { messages: messages1, tools, kwargs: undefined });
    assert.equal(p1.info.kind, 'bridge');
    assert.equal(p1.info.anchor_call_id, 'call0');
    assert.equal(reads, 0, 'every call was seen recorded: nothing is read');

    // A restart: the same stored calls, a session object the bridge has not seen.
    const restored = { callCount: 1, calls: stored as readonly CallRecord[] };
    let restoredReads = 0;
    const counting = {
      get callCount() {
        return restored.callCount;
      },
      get calls() {
        restoredReads++;
        return restored.calls;
      },
    };
    for (let i = 0; i < 2; i++) {
      const p = await bridge.plan(counting, counting, { messages: messages1, tools, kwargs: undefined });
      assert.equal(p.info.kind, 'bridge');
      assert.deepEqual(p.promptIds, p1.promptIds);
    }
    assert.equal(restoredReads, 1, 'read once, then known');
    // A call recorded and also found in a later read is taken in once.
    bridge.observe(counting, r0);
    assert.equal((await bridge.plan(counting, counting, { messages: messages1, tools, kwargs: undefined })).info.kind, 'bridge');
    assert.equal(restoredReads, 1);
  });

  test('the index holds one prompt array per branch: each turn bridged on keeps its prompt as a prefix of the next', async () => {
    const bridge = new Bridge(new InThreadRenderer(renderer));
    const owner = {};
    // The proxy observes each record with the prompt array the plan built (engine_request.messages too).
    const r0 = await firstTurn(bridge, owner);
    bridge.observe(owner, r0);
    let messages = [...task];
    let last = r0;
    // What each turn's prompt was when it was planned (copies: the arrays themselves grow in place).
    const prompts: number[][] = [[...r0.prompt_token_ids!]];
    const records = [r0];
    for (let t = 1; t <= 4; t++) {
      messages = [...messages, echoed(last), { role: 'tool', tool_call_id: 'harness-x', content: `output ${t}` }];
      const plan = await bridge.plan(owner, [], { messages, tools, kwargs: undefined });
      assert.equal(plan.info.kind, 'bridge');
      assert.equal(plan.info.anchor_call_id, last.call_id);
      const end = [...last.prompt_token_ids!, ...last.completion_token_ids!];
      assert.deepEqual(plan.promptIds.slice(0, end.length), end);
      assert.equal(plan.parts!.anchorPrompt, plan.promptIds, `turn ${t} grows the anchor's array in place`);
      last = turnRecord(t, messages, t % 2 ? act2 : act1, plan.promptIds);
      bridge.observe(owner, last);
      prompts.push([...plan.promptIds]);
      records.push(last);
    }
    assert.equal(bridge.promptArrays(owner), 1, 'five turns, one array');
    // The turns after the first grew one array in place; every record still reads the prompt it had.
    assert.deepEqual(
      records.map((r) => r.prompt_token_ids),
      prompts,
    );

    // A retry of turn 2 (the same messages again) anchors on turn 1, whose prompt now lives inside a
    // later turn's array: it is cut back out exactly, and the retry keeps its own array (a branch).
    const turn1Messages = [...task, echoed(r0), { role: 'tool', tool_call_id: 'harness-x', content: 'output 1' }];
    const t1 = records[1]!.prompt_token_ids!;
    const t1Record = turnRecord(1, turn1Messages, act2, t1);
    const retryMessages = [...turn1Messages, echoed(t1Record), { role: 'tool', content: 'output 2' }];
    const plan = await bridge.plan(owner, [], { messages: retryMessages, tools, kwargs: undefined });
    assert.equal(plan.info.kind, 'bridge');
    assert.equal(plan.info.anchor_call_id, 'call1');
    const t1End = [...t1, ...t1Record.completion_token_ids!];
    assert.deepEqual(plan.promptIds.slice(0, t1End.length), t1End);
    assert.deepEqual(plan.promptIds, prompts[2], 'the same prompt as turn 2 had');
    // Observed as the proxy does (its record holds the planned messages and prompt arrays).
    bridge.observe(owner, turnRecord(9, retryMessages, act1, plan.promptIds));
    assert.equal(bridge.promptArrays(owner), 2, 'the retry is a second branch');
  });

  test('tools resent with their keys in another order still bridge: the probe render is kept per exact tool text', async () => {
    const bridge = new Bridge(new InThreadRenderer(renderer));
    const owner = {};
    const reordered: ChatTool[] = [
      {
        function: {
          parameters: { required: ['command'], properties: { command: { type: 'string' } }, type: 'object' },
          description: 'Run a shell command',
          name: 'bash',
        },
        type: 'function',
      },
    ];
    assert.notEqual(JSON.stringify(reordered), JSON.stringify(tools));
    const r0 = await firstTurn(bridge, owner);
    bridge.observe(owner, r0);
    let messages = [...task];
    let last = r0;
    // The first bridge keeps the probe render of `tools`; the next ones send the same tools reordered.
    for (const [t, turnTools] of [tools, reordered, reordered, tools].entries()) {
      messages = [...messages, echoed(last), { role: 'tool', tool_call_id: 'harness-x', content: `output ${t}` }];
      const plan = await bridge.plan(owner, [], { messages, tools: turnTools, kwargs: undefined });
      assert.equal(plan.info.kind, 'bridge', `turn ${t + 1}: ${plan.findings.join('; ')}`);
      // The template writes the tools only in the system block: the bridge is the same either way.
      const end = [...last.prompt_token_ids!, ...last.completion_token_ids!];
      assert.equal(
        renderer.decode(plan.promptIds.slice(end.length)),
        `\n<|im_start|>user\n<tool_response>\noutput ${t}\n</tool_response><|im_end|>\n<|im_start|>assistant\n`,
      );
      last = turnRecord(t + 1, messages, act2, plan.promptIds);
      bridge.observe(owner, last);
    }
  });

  test('message identity: argument spacing and key order, tool-call ids and dropped reasoning do not count; text does', async () => {
    const a: ChatMessage = {
      role: 'assistant',
      content: ' Hi. ',
      tool_calls: [{ id: '1', type: 'function', function: { name: 'f', arguments: '{"a": 1, "b": [1, 2]}' } }],
    };
    const b: ChatMessage = {
      role: 'assistant',
      content: 'Hi.',
      reasoning_content: 'x',
      tool_calls: [{ id: '2', type: 'function', function: { name: 'f', arguments: '{"b":[1,2],"a":1}' } }],
    };
    assert.equal(messageKey(a), messageKey(b));
    assert.notEqual(messageKey(a), messageKey({ ...b, content: 'Hello.' }));
    assert.notEqual(messageKey({ role: 'tool', content: 'x ' }), messageKey({ role: 'tool', content: 'x' }));
    assert.equal(canonicalJson({ b: 1, a: { d: 2, c: 3 } }), '{"a":{"c":3,"d":2},"b":1}');
  });

  test('a new user turn after reasoning: the template drops the reasoning, so a full render and a new root', async () => {
    const bridge = new Bridge(new InThreadRenderer(renderer), { fullRenderCheck: 'always' });
    const owner = {};
    const r0 = await firstTurn(bridge, owner);
    const plan = await bridge.plan(owner, [r0], {
      messages: [...task, echoed(r0), { role: 'tool', content: 'x' }, { role: 'user', content: 'Stop.' }],
      tools,
      kwargs: undefined,
    });
    assert.equal(plan.info.kind, 'full');
    assert.equal(plan.info.new_root_reason, 'template_drops_reasoning');
    assert.match(plan.findings[0]!, /^\[INFO\] bridge_new_root: template_drops_reasoning/);
    // Without reasoning in the anchor, a user turn bridges.
    const r0b = turnRecord(0, task, { content: 'Hello.' }, r0.prompt_token_ids!);
    const plain = await bridge.plan({}, [r0b], {
      messages: [...task, echoed(r0b), { role: 'user', content: 'Again.' }],
      tools,
      kwargs: undefined,
    });
    assert.equal(plain.info.kind, 'bridge');
  });

  test('cases that cannot be proven start a new root that says why', async () => {
    const bridge = new Bridge(new InThreadRenderer(renderer), { fullRenderCheck: 'always' });
    const owner = {};
    const r0 = await firstTurn(bridge, owner);
    const tool = { role: 'tool', content: 'notes.txt' };
    const reason = async (messages: ChatMessage[], t: ChatTool[] | undefined = tools) => {
      const p = await bridge.plan(owner, [r0], { messages, tools: t, kwargs: undefined });
      assert.equal(p.info.kind, 'full');
      assert.ok(p.findings.length === 1 && p.findings[0]!.includes(`bridge_new_root: ${p.info.new_root_reason}`));
      return p.info.new_root_reason;
    };
    assert.equal(await reason([{ ...task[0]!, content: 'Edited system.' }, task[1]!, echoed(r0), tool]), 'system_prompt_changed');
    assert.equal(await reason([task[0]!, { role: 'user', content: 'Edited task.' }, echoed(r0), tool]), 'history_edited');
    assert.equal(await reason([...task, { ...echoed(r0), content: 'Rewritten by the harness.' }, tool]), 'assistant_rewritten');
    assert.equal(await reason([...task, echoed(r0), tool], []), 'tools_changed');
    assert.equal(await reason([...task, echoed(r0), tool, { role: 'assistant', content: 'made up' }, tool]), 'assistant_in_tail');
    assert.equal(await reason([...task, { ...echoed(r0), reasoning_content: 'Something else entirely.' }, tool]), 'reasoning_edited');
    assert.equal(await reason([...task, echoed(r0)]), 'nothing_new');
    assert.equal(await reason(task), 'retry');
    assert.equal(await reason([{ role: 'user', content: 'A subagent task.' }]), 'different_conversation');
  });

  test('an anchor cut by max_tokens: the turn close is bridge context, not a sampled token', async () => {
    const bridge = new Bridge(new InThreadRenderer(renderer), { fullRenderCheck: 'always' });
    const owner = {};
    const plan0 = await bridge.plan(owner, [], { messages: task, tools, kwargs: undefined });
    const r0 = turnRecord(0, task, { content: 'A long answer that was cut' }, plan0.promptIds, { stop: false });
    const p = await bridge.plan(owner, [r0], {
      messages: [...task, echoed(r0), { role: 'user', content: 'Go on.' }],
      tools,
      kwargs: undefined,
    });
    assert.equal(p.info.kind, 'bridge');
    assert.equal(p.info.synthesized_close, true);
    const end = [...r0.prompt_token_ids!, ...r0.completion_token_ids!];
    assert.equal(p.promptIds[end.length], IM_END);
    assert.ok(p.findings.some((f) => f.startsWith('[INFO] bridge_synthesized_close')));
  });
});
