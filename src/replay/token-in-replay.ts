// Setting up the replay of a token-in capture: the renderer the capture used (the model's tokenizer and
// chat template, found as the capture proxy finds them, or given), and for a fork the live engine's
// token route, probed as the capture proxy probes it.
import type { EngineClient } from '../capture/engine-client.js';
import { findModelFiles } from '../capture/render/mode.js';
import { Renderer } from '../capture/render/renderer.js';
import { probeTokenIn, type TokenRoute } from '../capture/render/token-engine.js';
import { ensureTinyModel, TINY_MODEL_NAME } from '../engine/tiny-model.js';
import { ReplayError } from './errors.js';
import type { ForkTarget } from './recorded-engine.js';
import { RecordedTokenEngine, ReplayTokenInEngine } from './recorded-token-engine.js';
import type { ReplaySource } from './source.js';

export interface TokenInReplaySetup {
  recorded: RecordedTokenEngine;
  engine: ReplayTokenInEngine;
  route: TokenRoute;
  modelFiles: string;
}

/**
 * The model files of a token-in capture: the given ones, else the recorded model's (a local folder or
 * the Hugging Face cache, as `--render auto` finds them), else the embedded tiny model's GGUF (every
 * seed shares its tokenizer and chat template).
 */
export async function tokenInModelFiles(source: ReplaySource, given?: string): Promise<string> {
  if (given) return given;
  const found = source.model ? findModelFiles(source.model) : null;
  if (found) return found;
  if (source.model === TINY_MODEL_NAME) return (await ensureTinyModel()).path;
  throw new ReplayError(
    `${source.path} was captured in token-in mode (the proxy rendered the prompts with the tokenizer and chat template of ` +
      `${source.model ?? 'its model'}), and those files are not on this machine; pass --render-model DIR_OR_GGUF`,
  );
}

export async function replayTokenIn(
  source: ReplaySource,
  opts: { renderModel?: string; fork?: ForkTarget; live?: EngineClient; model: string },
): Promise<TokenInReplaySetup> {
  const modelFiles = await tokenInModelFiles(source, opts.renderModel);
  let renderer: Renderer;
  try {
    renderer = await Renderer.load(modelFiles);
  } catch (err) {
    throw new ReplayError(`could not load the tokenizer and chat template from ${modelFiles}: ${(err as Error).message}`);
  }
  if (!renderer.family.supported)
    throw new ReplayError(`${modelFiles} is a ${renderer.family.name} model, which the token-in renderer does not parse`);
  let route: TokenRoute = source.token_route ?? '/v1/completions';
  let maxModelLen: number | null = null;
  if (opts.live) {
    // The fork's turns on go to its engine token in, from the same context the record gives.
    const probeIds = renderer.encode(renderer.renderText([{ role: 'user', content: 'Reply with the single word: ok' }]));
    const probe = await probeTokenIn(opts.live, opts.model, probeIds);
    if (!probe.route)
      throw new ReplayError(
        `the rollout was captured token in, and a fork continues it token in, but ${opts.live.baseUrl} does not take token ids: ${probe.problem}`,
      );
    route = probe.route;
    maxModelLen = probe.maxModelLen;
  }
  const recorded = new RecordedTokenEngine(source, renderer, opts.fork);
  const engine = new ReplayTokenInEngine(recorded, renderer, { route, maxModelLen });
  return { recorded, engine, route, modelFiles };
}
