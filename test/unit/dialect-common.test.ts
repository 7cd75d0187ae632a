import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { fillUsageDetails, normalizeChatRequest, parseDataUrl } from '../../src/capture/dialects/common.js';
import { DIALECTS, detectDialectName, dialectByName } from '../../src/capture/dialects/index.js';
import {
  anthropicSignature,
  decodeGeminiThoughtSignature,
  decryptReasoning,
  encryptReasoning,
  geminiThoughtSignature,
  readReasoningItem,
  verifyAnthropicSignature,
} from '../../src/capture/dialects/reasoning.js';
import { STOP_ANSWER_TEXT, isStopAnswerText, renderStopAnswer, stopAnswer } from '../../src/capture/dialects/stop-answer.js';
import { answerTokenCount, tokenCountRoute } from '../../src/capture/dialects/token-count.js';
import type { DialectContext, SseEvent } from '../../src/capture/types.js';

describe('normalizeChatRequest (§7.0)', () => {
  it('renames developer to system and merges every text system message at the top', () => {
    const out = normalizeChatRequest({
      model: 'm',
      _served_model: 'x',
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'system', content: 'A' },
        { role: 'developer', content: [{ type: 'text', text: 'B' }] },
        { role: 'assistant', content: 'ok' },
        { role: 'system', content: 'C' },
      ],
    });
    assert.deepEqual(out.messages, [
      { role: 'system', content: 'A\n\nB\n\nC' },
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: 'ok' },
    ]);
    assert.equal('_served_model' in out, false);
  });

  it('keeps a system message that is not reducible to text as its own message', () => {
    const image = { role: 'developer', content: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,AA' } }] };
    const out = normalizeChatRequest({ messages: [{ role: 'system', content: 'A' }, image, { role: 'user', content: 'u' }] });
    assert.deepEqual(out.messages, [
      { role: 'system', content: 'A' },
      { ...image, role: 'system' },
      { role: 'user', content: 'u' },
    ]);
  });

  it('defaults enable_thinking to false for Qwen3.5 only, without overriding a converter choice', () => {
    assert.deepEqual(normalizeChatRequest({ model: 'intercepted/Qwen3.5-4B', messages: [] }).chat_template_kwargs, {
      enable_thinking: false,
    });
    assert.equal(normalizeChatRequest({ model: 'Qwen3-4B', messages: [] }).chat_template_kwargs, undefined);
    assert.deepEqual(
      normalizeChatRequest({ model: 'Qwen3.5-4B', chat_template_kwargs: { enable_thinking: true, x: 1 }, messages: [] })
        .chat_template_kwargs,
      { enable_thinking: true, x: 1 },
    );
    // The served model wins over the name the harness used.
    assert.deepEqual(normalizeChatRequest({ model: 'gpt-x', messages: [] }, 'Qwen/Qwen3.5-4B').chat_template_kwargs, {
      enable_thinking: false,
    });
    assert.deepEqual(normalizeChatRequest({ model: 'gpt-x', _served_model: 'Qwen/Qwen3.5-9B', messages: [] }).chat_template_kwargs, {
      enable_thinking: false,
    });
  });

  it('does not mutate its input', () => {
    const input = { messages: [{ role: 'developer', content: 'A' }] };
    normalizeChatRequest(input);
    assert.deepEqual(input, { messages: [{ role: 'developer', content: 'A' }] });
  });
});

describe('fillUsageDetails', () => {
  it('replaces null details with zeroed objects and keeps known values', () => {
    const u = fillUsageDetails({
      prompt_tokens: 3,
      completion_tokens: 2,
      total_tokens: 5,
      prompt_tokens_details: null,
      completion_tokens_details: { reasoning_tokens: 1 },
    });
    assert.deepEqual(u.prompt_tokens_details, { cached_tokens: 0, audio_tokens: 0 });
    assert.deepEqual(u.completion_tokens_details, {
      reasoning_tokens: 1,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0,
    });
    assert.equal(fillUsageDetails(undefined).total_tokens, 0);
  });
});

describe('parseDataUrl', () => {
  it('splits media type and payload', () => {
    assert.deepEqual(parseDataUrl('data:image/png;base64,iVBOR'), { mediaType: 'image/png', data: 'iVBOR' });
    assert.equal(parseDataUrl('https://x/y.png'), null);
  });
});

describe('synthetic reasoning signatures (§7.5)', () => {
  it('Anthropic signature is sg_oe_ + unpadded url-safe sha256 and verifies only its own text', () => {
    const sig = anthropicSignature('List it.');
    assert.match(sig, /^sg_oe_[A-Za-z0-9_-]{43}$/);
    assert.equal(verifyAnthropicSignature('List it.', sig), true);
    assert.equal(verifyAnthropicSignature('List it!', sig), false);
    assert.equal(anthropicSignature(''), '');
  });

  it('Gemini thoughtSignature is standard base64 of the Anthropic marker and decodes back to it', () => {
    const sig = geminiThoughtSignature('Count lines next.');
    assert.equal(Buffer.from(sig, 'base64').toString('ascii'), anthropicSignature('Count lines next.'));
    assert.equal(decodeGeminiThoughtSignature(sig), anthropicSignature('Count lines next.'));
    assert.equal(decodeGeminiThoughtSignature('skip_thought_signature_validator'), null);
  });

  it('Responses encrypted_content decodes back to the text (reference example)', () => {
    assert.equal(encryptReasoning('List it.'), 'oe:TGlzdCBpdC4');
    assert.equal(decryptReasoning('oe:TGlzdCBpdC4'), 'List it.');
    assert.equal(decryptReasoning(encryptReasoning('ünïcode ✓ \n')), 'ünïcode ✓ \n');
    assert.equal(decryptReasoning('gAAAAABreal-openai-blob'), '');
  });

  it('reads a reasoning item from content, then summary, then encrypted_content', () => {
    assert.equal(readReasoningItem({ content: [{ type: 'reasoning_text', text: 'c' }], summary: [{ text: 's' }] }), 'c');
    assert.equal(readReasoningItem({ content: null, summary: [{ type: 'summary_text', text: 's' }] }), 's');
    assert.equal(readReasoningItem({ summary: [], encrypted_content: 'oe:TGlzdCBpdC4' }), 'List it.');
  });
});

describe('detectDialect (§6)', () => {
  it('follows the signal order of the reference table', () => {
    assert.equal(detectDialectName('/v1/messages?beta=true'), 'anthropic_messages');
    assert.equal(detectDialectName('/v1/chat/completions', { 'anthropic-version': '2023-06-01' }), 'openai_chat');
    assert.equal(detectDialectName('/v1/responses'), 'openai_responses');
    assert.equal(detectDialectName('/v1beta/models/q:streamGenerateContent?alt=sse'), 'google_gemini');
    assert.equal(detectDialectName('/v1beta/models/q:GENERATECONTENT'), 'google_gemini');
    assert.equal(detectDialectName('/x', { 'Anthropic-Version': '2023-06-01' }, { contents: [] }), 'anthropic_messages');
    assert.equal(detectDialectName('/x', {}, { contents: [] }), 'google_gemini');
    assert.equal(detectDialectName('/x', {}, { input: 'a', instructions: 'b' }), 'openai_responses');
    assert.equal(detectDialectName('/x', {}, { input: 'a' }), 'openai_chat');
    assert.equal(detectDialectName('/x'), 'openai_chat');
  });

  it('maps names to dialect objects', () => {
    for (const [name, dialect] of Object.entries(DIALECTS)) assert.equal(dialectByName(dialect.name), dialect, name);
  });
});

describe('token-count side routes (§8.5)', () => {
  it('recognises only the count routes, ignoring the query', () => {
    assert.equal(tokenCountRoute('/v1/messages/count_tokens?beta=true'), 'anthropic');
    assert.equal(tokenCountRoute('/v1beta/models/gemini:countTokens'), 'gemini');
    assert.equal(tokenCountRoute('/v1beta/models/gemini:COUNTTOKENS'), 'gemini');
    assert.equal(tokenCountRoute('/v1/messages'), null);
    assert.equal(answerTokenCount('/v1/messages', { messages: [] }), null);
  });

  it('answers Anthropic with input_tokens at ~4 chars per token over messages, system and tools', () => {
    const body = { system: 'x'.repeat(40), messages: [{ role: 'user', content: 'y'.repeat(40) }] };
    assert.deepEqual(answerTokenCount('/v1/messages/count_tokens', body), { status: 200, body: { input_tokens: 21 } });
    const withTools = answerTokenCount('/v1/messages/count_tokens', { ...body, tools: [{ name: 'Bash', input_schema: {} }] });
    assert.ok((withTools!.body as { input_tokens: number }).input_tokens > 21);
    assert.deepEqual(answerTokenCount('/v1/messages/count_tokens', {}), { status: 200, body: { input_tokens: 1 } });
  });

  it('answers Gemini in its shape, over contents and systemInstruction, skipping inline image data', () => {
    const body = {
      systemInstruction: { parts: [{ text: 'a'.repeat(16) }] },
      contents: [{ role: 'user', parts: [{ text: 'b'.repeat(16) }, { inlineData: { mimeType: 'image/png', data: 'Z'.repeat(4000) } }] }],
    };
    assert.deepEqual(answerTokenCount('/v1beta/models/m:countTokens', body), {
      status: 200,
      body: { totalTokens: 9, totalBillableCharacters: 36, promptTokensDetails: [{ modality: 'TEXT', tokenCount: 9 }] },
    });
    const wrapped = answerTokenCount('/v1beta/models/m:countTokens', { generateContentRequest: body });
    assert.equal((wrapped!.body as { totalTokens: number }).totalTokens, 9);
  });

  it('uses a given tokenizer function instead of the estimate', () => {
    const out = answerTokenCount(
      '/v1/messages/count_tokens',
      { messages: [{ role: 'user', content: 'one two three' }] },
      (t) => t.split(/\s+/).length,
    );
    assert.deepEqual(out!.body, { input_tokens: 3 });
  });
});

describe('stop answer (§8.6)', () => {
  const ctx = (path: string): DialectContext => ({ path, clientModel: 'agent-model', request: {} });

  it('is a non-empty stop with all-zero usage', () => {
    const answer = stopAnswer('m');
    assert.equal(answer.choices[0]!.message.content, STOP_ANSWER_TEXT);
    assert.equal(answer.choices[0]!.finish_reason, 'stop');
    assert.deepEqual([answer.usage!.prompt_tokens, answer.usage!.completion_tokens, answer.usage!.total_tokens], [0, 0, 0]);
    assert.ok(isStopAnswerText(' Step budget exhausted; stopping. '));
  });

  it('renders in every dialect with its own stop reason, as JSON and as SSE', () => {
    const chat = renderStopAnswer(DIALECTS.openai_chat, ctx('/v1/chat/completions'), false);
    assert.equal(chat.stream, false);
    const chatBody = (chat as { body: { choices: { message: { content: string }; finish_reason: string }[] } }).body;
    assert.equal(chatBody.choices[0]!.message.content, STOP_ANSWER_TEXT);

    const anthropic = renderStopAnswer(DIALECTS.anthropic_messages, ctx('/v1/messages'), false) as {
      body: { stop_reason: string; content: unknown[] };
    };
    assert.equal(anthropic.body.stop_reason, 'end_turn');
    assert.deepEqual(anthropic.body.content, [{ type: 'text', text: STOP_ANSWER_TEXT }]);

    const responses = renderStopAnswer(DIALECTS.openai_responses, ctx('/v1/responses'), false) as {
      body: { status: string; output: { content: { text: string }[] }[] };
    };
    assert.equal(responses.body.status, 'completed');
    assert.equal(responses.body.output[0]!.content[0]!.text, STOP_ANSWER_TEXT);

    const gemini = renderStopAnswer(DIALECTS.google_gemini, ctx('/v1beta/models/m:streamGenerateContent?alt=sse'), true) as {
      events: SseEvent[];
    };
    assert.equal(gemini.events.length, 1);
    const data = gemini.events[0]!.data as { candidates: { finishReason: string; content: { parts: { text: string }[] } }[] };
    assert.equal(data.candidates[0]!.finishReason, 'STOP');
    assert.equal(data.candidates[0]!.content.parts[0]!.text, STOP_ANSWER_TEXT);
  });
});
