// One call to get a running embedded engine: model (the tiny default, built and cached on first use,
// or a GGUF file), policy, HTTP server. Used by `harness-lab engine`, the demo, tests and the bench.
import { basename } from 'node:path';
import { EngineServer } from './engine-server.js';
import { LlamaEngine, type LogprobsMode } from './llama-engine.js';
import { getCpuLlama, LlamaRuntime } from './llama-runtime.js';
import { ScriptedPolicy } from './policy.js';
import { ensureTinyModel, TINY_MODEL_NAME } from './tiny-model.js';

export interface EmbeddedEngineOptions {
  host?: string;
  port?: number;
  /** Names clients reach the engine by besides loopback and the bound address (request-guard.ts). */
  allowedHosts?: readonly string[];
  /** A GGUF file; default: the tiny Qwen3 model for `seed`. */
  modelPath?: string;
  /** Served model name; default the tiny model's name or the GGUF file name. */
  modelName?: string;
  /** Tiny-model seed and the sampler seed of requests without one. Default 0. */
  seed?: number;
  /** A policy file, a shipped policy name, or a parsed policy. */
  policy?: string | ScriptedPolicy | null;
  logprobsMode?: LogprobsMode;
  contextSize?: number;
  threads?: number;
  /** Where the tiny model is cached; default HARNESS_LAB_DATA_DIR or ~/.harness-lab. */
  dataDir?: string;
}

export interface EmbeddedEngine {
  url: string;
  engine: LlamaEngine;
  /** The loaded model (shared by every LlamaEngine built on it; one request at a time). */
  runtime: LlamaRuntime;
  modelPath: string;
  /** Milliseconds spent building the tiny model (0 when cached or a file was given) and loading it. */
  timings: { buildMs: number; loadMs: number };
  close(): Promise<void>;
}

export async function startEmbeddedEngine(opts: EmbeddedEngineOptions = {}): Promise<EmbeddedEngine> {
  const seed = opts.seed ?? 0;
  const policy = typeof opts.policy === 'string' ? ScriptedPolicy.load(opts.policy) : (opts.policy ?? null);
  // Loading llama.cpp (node-llama-cpp first checks the binary in a child process) overlaps the build.
  getCpuLlama().catch(() => undefined);
  let modelPath = opts.modelPath;
  let buildMs = 0;
  if (!modelPath) {
    const tiny = await ensureTinyModel({ seed, ...(opts.dataDir ? { dataDir: opts.dataDir } : {}) });
    modelPath = tiny.path;
    buildMs = tiny.buildMs;
  }
  const loadStart = performance.now();
  const runtime = await LlamaRuntime.load({
    modelPath,
    ...(opts.contextSize ? { contextSize: opts.contextSize } : {}),
    ...(opts.threads ? { threads: opts.threads } : {}),
  });
  const loadMs = performance.now() - loadStart;
  const modelName = opts.modelName ?? (opts.modelPath ? basename(opts.modelPath).replace(/\.gguf$/i, '') : TINY_MODEL_NAME);
  const engine = new LlamaEngine({ runtime, modelName, policy, seed, logprobsMode: opts.logprobsMode ?? 'processed' });
  const server = new EngineServer(engine);
  let url: string;
  try {
    url = await server.listen({
      ...(opts.host ? { host: opts.host } : {}),
      ...(opts.allowedHosts ? { allowedHosts: opts.allowedHosts } : {}),
      ...(opts.port !== undefined ? { port: opts.port } : {}),
    });
  } catch (err) {
    await runtime.dispose();
    throw err;
  }
  return {
    url,
    engine,
    runtime,
    modelPath,
    timings: { buildMs, loadMs },
    close: async () => {
      await server.close();
      await runtime.dispose();
    },
  };
}
