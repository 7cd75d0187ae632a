// The tokenizer thread (see render-workers.ts): loads the model's tokenizer and chat template once,
// then renders, tokenizes and parses for the proxy's main thread, which never builds the vocabulary
// and never tokenizes a long conversation on its event loop. Messages: {id, op, args} in,
// {id, ok, value | message} out; id lists travel as transferred Int32Arrays.
import { parentPort, workerData } from 'node:worker_threads';
import type { ChatMessage, ChatTool } from '../types.js';
import { Renderer, type RenderTextOptions } from './renderer.js';

export type WorkerRequest =
  | { id: number; op: 'encode'; text: string }
  | { id: number; op: 'renderIds'; messages: ChatMessage[]; opts: RenderTextOptions }
  | { id: number; op: 'compareRender'; messages: ChatMessage[]; opts: RenderTextOptions; ids: Int32Array }
  | { id: number; op: 'parse'; ids: Int32Array; tools: ChatTool[] | undefined; parseToolCalls: boolean }
  | { id: number; op: 'stats' };

export type WorkerReply = { id: number; ok: true; value: unknown } | { id: number; ok: false; message: string };

function serve(renderer: Renderer): void {
  const port = parentPort!;
  port.on('message', (req: WorkerRequest) => {
    try {
      if (req.op === 'encode' || req.op === 'renderIds') {
        const ids = req.op === 'encode' ? renderer.encodeIds(req.text) : renderer.renderIdsTyped(req.messages, req.opts);
        port.postMessage({ id: req.id, ok: true, value: ids } satisfies WorkerReply, [ids.buffer]);
      } else if (req.op === 'compareRender') {
        const value = renderer.compareRender(req.messages, req.opts, req.ids);
        port.postMessage({ id: req.id, ok: true, value } satisfies WorkerReply);
      } else if (req.op === 'parse') {
        const value = renderer.parseAnswer(Array.from(req.ids), { tools: req.tools, parseToolCalls: req.parseToolCalls });
        port.postMessage({ id: req.id, ok: true, value } satisfies WorkerReply);
      } else port.postMessage({ id: req.id, ok: true, value: renderer.cacheStats } satisfies WorkerReply);
    } catch (err) {
      port.postMessage({ id: req.id, ok: false, message: err instanceof Error ? err.message : String(err) } satisfies WorkerReply);
    }
  });
}

if (parentPort) {
  const { path } = workerData as { path: string };
  Renderer.load(path).then(
    (renderer) => {
      serve(renderer);
      parentPort!.postMessage({ t: 'ready', description: renderer.describe() });
    },
    (err: unknown) => parentPort!.postMessage({ t: 'error', message: err instanceof Error ? err.message : String(err) }),
  );
}
