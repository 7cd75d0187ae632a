import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { clearTokenTextCache, fetchTokenTexts } from '../../src/capture/token-text.js';

const VOCAB: Record<number, string> = { 1: 'Hello', 2: ',', 3: ' world', 4: '\n', 5: '<|im_end|>' };

async function body(req: IncomingMessage): Promise<Record<string, unknown>> {
  let s = '';
  for await (const c of req) s += c;
  return JSON.parse(s) as Record<string, unknown>;
}

/** A stub engine: vLLM-style (`{prompt}`), llama.cpp-style (`{content}` + /tokenize pieces) or neither. */
async function engine(kind: 'vllm' | 'llama' | 'none'): Promise<{ url: string; server: Server; calls: string[] }> {
  const calls: string[] = [];
  const server = createServer(async (req, res) => {
    const b = await body(req);
    calls.push(`${req.url} ${JSON.stringify(b.tokens ?? b.content)}`);
    const send = (status: number, v: unknown) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(v));
    if (kind === 'none') return send(404, { detail: 'Not Found' });
    if (req.url === '/detokenize') {
      const text = (b.tokens as number[]).map((id) => VOCAB[id] ?? '').join('');
      return send(200, kind === 'vllm' ? { prompt: text } : { content: text });
    }
    if (req.url === '/tokenize' && kind === 'llama') {
      // Greedy re-tokenisation of the text into the vocabulary, with pieces; 4 comes back as bytes.
      const text = b.content as string;
      const out: { id: number; piece: string | number[] }[] = [];
      let i = 0;
      while (i < text.length) {
        const hit = Object.entries(VOCAB).find(([, v]) => text.startsWith(v, i))!;
        out.push({ id: Number(hit[0]), piece: hit[0] === '4' ? [10] : hit[1] });
        i += hit[1].length;
      }
      return send(200, { tokens: out });
    }
    send(404, {});
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, server, calls };
}

test('vLLM: one /detokenize per id, then served from the per-engine cache', async () => {
  clearTokenTextCache();
  const e = await engine('vllm');
  try {
    const r = await fetchTokenTexts(e.url, [1, 2, 3, 3, 99], { model: 'm' });
    assert.deepEqual(r.texts, { 1: 'Hello', 2: ',', 3: ' world', 99: '' });
    assert.equal(r.problem, null);
    assert.equal(e.calls.length, 4);
    const again = await fetchTokenTexts(e.url, [1, 3]);
    assert.deepEqual(again.texts, { 1: 'Hello', 3: ' world' });
    assert.equal(e.calls.length, 4, 'cached ids are not fetched again');
  } finally {
    e.server.close();
  }
});

test('llama.cpp: pieces from /tokenize name many ids in one call', async () => {
  clearTokenTextCache();
  const e = await engine('llama');
  try {
    const r = await fetchTokenTexts(e.url, [1, 2, 3, 4, 5]);
    assert.deepEqual(r.texts, { 1: 'Hello', 2: ',', 3: ' world', 4: '\n', 5: '<|im_end|>' });
    assert.ok(e.calls.some((c) => c.startsWith('/tokenize')));
    assert.equal(e.calls.filter((c) => c.startsWith('/detokenize')).length, 2, 'one probe plus one bulk detokenize');
  } finally {
    e.server.close();
  }
});

test('an engine without /detokenize: ids stay ids, with the reason', async () => {
  clearTokenTextCache();
  const e = await engine('none');
  try {
    const r = await fetchTokenTexts(e.url, [1, 2]);
    assert.deepEqual(r.texts, {});
    assert.deepEqual(r.missing, [1, 2]);
    assert.match(r.problem!, /has no \/detokenize route/);
    await fetchTokenTexts(e.url, [3]);
    assert.equal(e.calls.length, 1, 'the missing route is remembered');
  } finally {
    e.server.close();
  }
});
