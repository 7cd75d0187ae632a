// A fast vLLM-shaped engine for the token-in bench, in its own process: the tiny Qwen3 model's real
// tokenizer and chat template (the GGUF the embedded engine builds), no model. It answers every call
// with the same tool call, on both routes the capture proxy uses:
//   POST /v1/completions with a token-id prompt (token in): the call's sampled ids, logprobs, the prompt echoed;
//   POST /v1/chat/completions (the engine renders): the prompt rendered and tokenized (extending the
//     previous call's ids when the rendered text extends it, so a 128k-token context stays cheap here),
//     the message, token ids and logprobs.
// GET /v1/models names the GGUF as `root`, so a proxy finds the tokenizer and template. Prints one JSON
// line `{"url", "model", "gguf"}` once listening; exits when stdin closes or on SIGTERM/SIGINT.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Renderer } from '../src/capture/render/renderer.js';
import type { ChatMessage, ChatTool } from '../src/capture/types.js';
import { ensureTinyModel, TINY_MODEL_NAME } from '../src/engine/tiny-model.js';

const MAX_MODEL_LEN = 262_144;
/** `--think-ms MIN,MAX`: each answer waits this long first (uniform), as a model would (default 0: at once). */
const THINK_MS = (() => {
  const at = process.argv.indexOf('--think-ms');
  const [min = 0, max = min] = at > 0 ? process.argv[at + 1]!.split(',').map(Number) : [0];
  if (!(min >= 0 && max >= min)) throw new Error(`--think-ms must be MIN[,MAX] in ms, got '${process.argv[at + 1]}'`);
  return { min, max };
})();
const ANSWER_TEXT = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call>';

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

async function main(): Promise<void> {
  const tiny = await ensureTinyModel({});
  const renderer = await Renderer.load(tiny.path);
  const imEnd = renderer.tokenId('<|im_end|>')!;
  const answerIds = [...renderer.encode(ANSWER_TEXT), imEnd];
  const logprobs = answerIds.map((_, i) => -0.05 - (i % 7) * 0.01);
  // Chat route: the last rendered text and its ids, to tokenize only what a call adds.
  let lastText = '';
  let lastIds: number[] = [];
  const chatPromptIds = (messages: ChatMessage[], tools: ChatTool[] | undefined): number[] => {
    const text = renderer.renderText(messages, { tools });
    if (lastText && text.startsWith(lastText)) lastIds = [...lastIds, ...renderer.encode(text.slice(lastText.length))];
    else lastIds = renderer.encode(text);
    lastText = text;
    return lastIds;
  };
  let n = 0;
  const server = createServer((req, res) => {
    void (async () => {
      const url = req.url ?? '/';
      if (req.method === 'GET' && url.startsWith('/v1/models')) {
        return send(res, 200, {
          object: 'list',
          data: [{ id: TINY_MODEL_NAME, object: 'model', root: tiny.path, max_model_len: MAX_MODEL_LEN }],
        });
      }
      if (req.method === 'GET' && url === '/health') return send(res, 200, { status: 'ok' });
      if (req.method !== 'POST') return send(res, 404, { error: { message: `no route ${req.method} ${url}` } });
      const body = JSON.parse(await readBody(req)) as Record<string, unknown>;
      const id = `cmpl-${++n}`;
      if (THINK_MS.max > 0) await new Promise((r) => setTimeout(r, THINK_MS.min + Math.random() * (THINK_MS.max - THINK_MS.min)));
      if (url === '/v1/completions') {
        const prompt = body.prompt as number[];
        return send(res, 200, {
          id,
          object: 'text_completion',
          created: 0,
          model: TINY_MODEL_NAME,
          choices: [
            {
              index: 0,
              text: '',
              finish_reason: 'stop',
              stop_reason: null,
              prompt_token_ids: prompt,
              token_ids: answerIds,
              logprobs: {
                tokens: answerIds.map((t) => `token_id:${t}`),
                token_logprobs: logprobs,
                top_logprobs: answerIds.map((t, i) => ({ [`token_id:${t}`]: logprobs[i]! })),
                text_offset: answerIds.map(() => 0),
              },
            },
          ],
          usage: { prompt_tokens: prompt.length, completion_tokens: answerIds.length, total_tokens: prompt.length + answerIds.length },
        });
      }
      if (url === '/v1/chat/completions') {
        const promptIds = chatPromptIds(body.messages as ChatMessage[], body.tools as ChatTool[] | undefined);
        const message = {
          role: 'assistant',
          content: null,
          reasoning: null,
          tool_calls: [{ id: `chatcmpl-tool-${n}`, type: 'function', function: { name: 'bash', arguments: '{"command": "ls -la"}' } }],
        };
        return send(res, 200, {
          id,
          object: 'chat.completion',
          created: 0,
          model: TINY_MODEL_NAME,
          prompt_token_ids: promptIds,
          choices: [
            {
              index: 0,
              message,
              finish_reason: 'tool_calls',
              stop_reason: null,
              token_ids: answerIds,
              logprobs: {
                content: answerIds.map((t, i) => ({
                  token: `token_id:${t}`,
                  logprob: logprobs[i]!,
                  bytes: null,
                  top_logprobs: [{ token: `token_id:${t}`, logprob: logprobs[i]!, bytes: null }],
                })),
              },
            },
          ],
          usage: {
            prompt_tokens: promptIds.length,
            completion_tokens: answerIds.length,
            total_tokens: promptIds.length + answerIds.length,
          },
        });
      }
      return send(res, 404, { error: { message: `no route POST ${url}` } });
    })().catch((err: unknown) => send(res, 500, { error: { message: (err as Error).message } }));
  });
  // A proxy's pooled connection may sit idle while it renders a long first prompt: node's 5 s default
  // would close it under the proxy's next request ("other side closed").
  server.keepAliveTimeout = 600_000;
  server.headersTimeout = 601_000;
  server.listen(0, '127.0.0.1', () => {
    process.stdout.write(
      `${JSON.stringify({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, model: TINY_MODEL_NAME, gguf: tiny.path, pid: process.pid })}\n`,
    );
  });
  const stop = () => server.close(() => process.exit(0));
  process.stdin.on('end', stop);
  process.stdin.resume();
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((err: unknown) => {
  process.stderr.write(`token-engine: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
