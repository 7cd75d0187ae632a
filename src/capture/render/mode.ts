// Which way a proxy renders: `proxy` (token in, token out: the proxy owns the chat template), `engine`
// (chat completions: the engine renders), or `auto` (proxy where the model's tokenizer and chat
// template are on this machine, the family is one the proxy parses, and the engine takes token ids;
// otherwise engine, saying why). Resolved once per proxy, on first contact with the engine.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { EngineClient } from '../engine-client.js';
import type { FullRenderCheck } from './bridge.js';
import { UnsupportedFamilyError } from './families.js';
import { acquireRenderWorkers, type RendererLease } from './render-workers.js';
import { probeTokenIn, TokenInEngine } from './token-engine.js';

export type RenderMode = 'auto' | 'proxy' | 'engine';

/** Token-in mode was asked for (`--render proxy`) and cannot be had; every call is refused with this. */
export class TokenInUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TokenInUnavailableError';
  }
}
export const RENDER_MODES: readonly RenderMode[] = ['auto', 'proxy', 'engine'];

export interface RenderModeReport {
  /** What was asked for. */
  requested: RenderMode;
  /** What calls use: `proxy` (token in) or `engine` (chat completions). */
  mode: 'proxy' | 'engine';
  /** Where the tokenizer and template came from (proxy mode). */
  model_files: string | null;
  family: string | null;
  route: string | null;
  max_model_len: number | null;
  /** Why the proxy does not render (auto fell back) or cannot (proxy asked for, not possible). */
  problem: string | null;
}

/** `<HF_HUB_CACHE>` or `<HF_HOME>/hub` or `~/.cache/huggingface/hub` (huggingface_hub's own order). */
export function huggingFaceHubCache(env: NodeJS.ProcessEnv = process.env): string {
  if (env.HF_HUB_CACHE) return env.HF_HUB_CACHE;
  const home = env.HF_HOME || join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'huggingface');
  return join(home, 'hub');
}

const isModelDir = (dir: string) => existsSync(join(dir, 'tokenizer.json')) && existsSync(join(dir, 'tokenizer_config.json'));

/** A model name or path -> a local model folder or GGUF file holding its tokenizer and chat template. */
export function findModelFiles(name: string, env: NodeJS.ProcessEnv = process.env): string | null {
  if (!name) return null;
  if (name.toLowerCase().endsWith('.gguf') && existsSync(name) && statSync(name).isFile()) return name;
  if (name.startsWith('/') && isModelDir(name)) return name;
  if (!/^[\w.-]+\/[\w.-]+$/.test(name)) return null;
  const snapshots = join(huggingFaceHubCache(env), `models--${name.replace('/', '--')}`, 'snapshots');
  if (!existsSync(snapshots)) return null;
  const found = readdirSync(snapshots)
    .map((rev) => join(snapshots, rev))
    .filter(isModelDir)
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  return found[0] ?? null;
}

export interface ResolveOptions {
  requested: RenderMode;
  model: string;
  /** A model folder or GGUF given by the user (`--render-model`). */
  modelFiles?: string;
  fullRenderCheck?: FullRenderCheck;
  /** Tokenizer threads (default 1). */
  renderThreads?: number;
}

/** Decides the proxy's render mode against a live engine; never throws (the report says what failed). */
export async function resolveRenderMode(
  client: EngineClient,
  opts: ResolveOptions,
): Promise<{ report: RenderModeReport; engine: TokenInEngine | null; transient: boolean }> {
  const report: RenderModeReport = {
    requested: opts.requested,
    mode: 'engine',
    model_files: null,
    family: null,
    route: null,
    max_model_len: null,
    problem: null,
  };
  if (opts.requested === 'engine') return { report, engine: null, transient: false };
  let path = opts.modelFiles ?? null;
  let unreachable = false;
  if (!path) {
    // vLLM (and the embedded engine) name the served model's path in /v1/models `root`.
    let root: string | null = null;
    try {
      const reply = await client.get('/v1/models');
      const data = (reply.body as { data?: unknown } | null)?.data;
      if (Array.isArray(data)) {
        const entry = (data.find((m: { id?: unknown } | null) => m?.id === opts.model) ?? data[0]) as { root?: unknown } | undefined;
        if (typeof entry?.root === 'string') root = entry.root;
      }
    } catch {
      // unreachable for now: the model name is all there is, and the answer is not final
      unreachable = true;
    }
    path = (root ? findModelFiles(root) : null) ?? findModelFiles(opts.model);
  }
  if (!path) {
    report.problem = `no tokenizer.json + tokenizer_config.json (or GGUF) for ${opts.model} on this machine; give --render-model DIR_OR_GGUF`;
    return { report, engine: null, transient: unreachable };
  }
  // The tokenizer threads of this model, shared by the proxies of this process (render-workers.ts).
  let lease: RendererLease;
  try {
    lease = await acquireRenderWorkers(path, { size: opts.renderThreads });
  } catch (err) {
    report.problem = `could not load the tokenizer and chat template from ${path}: ${(err as Error).message}`;
    return { report, engine: null, transient: false };
  }
  const renderer = lease.renderer;
  report.model_files = path;
  report.family = renderer.family.name;
  if (!renderer.family.supported) {
    report.problem = new UnsupportedFamilyError(renderer.family, opts.model).message;
    await lease.release();
    return { report, engine: null, transient: false };
  }
  let probe;
  try {
    const probeIds = await renderer.renderIds([{ role: 'user', content: 'Reply with the single word: ok' }]);
    probe = await probeTokenIn(client, opts.model, probeIds);
  } catch (err) {
    await lease.release();
    report.problem = `could not render with ${path}: ${(err as Error).message}`;
    return { report, engine: null, transient: false };
  }
  report.max_model_len = probe.maxModelLen;
  if (!probe.route) {
    report.problem = `the engine does not take token-id prompts: ${probe.problem ?? 'unknown'}`;
    await lease.release();
    return { report, engine: null, transient: probe.unreachable === true };
  }
  report.route = probe.route;
  report.mode = 'proxy';
  return {
    report,
    engine: new TokenInEngine(
      client,
      renderer,
      { route: probe.route, maxModelLen: probe.maxModelLen, fullRenderCheck: opts.fullRenderCheck },
      () => lease.release(),
    ),
    transient: false,
  };
}
