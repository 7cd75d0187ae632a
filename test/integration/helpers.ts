// Shared fixtures for integration tests: a fake engine + a capture proxy, torn down together.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CaptureProxy, type ProxyOptions } from '../../src/capture/proxy.js';
import { startFakeEngine, type FakeEngine, type FakeEngineOptions } from '../../src/engine/fake-engine.js';

export interface Lab {
  engine: FakeEngine;
  proxy: CaptureProxy;
  dataDir: string;
  close(): Promise<void>;
}

export async function startLab(engineOptions: FakeEngineOptions = {}, proxyOptions: Partial<ProxyOptions> = {}): Promise<Lab> {
  const engine = await startFakeEngine(engineOptions);
  const dataDir = mkdtempSync(join(tmpdir(), 'hl-test-'));
  const proxy = await CaptureProxy.start({ engineUrl: engine.url, model: engine.model, dataDir, ...proxyOptions });
  return {
    engine,
    proxy,
    dataDir,
    async close() {
      await proxy.close();
      await engine.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export async function createSession(
  proxy: CaptureProxy | string,
  body: Record<string, unknown> = {},
  headers: Record<string, string> = {},
): Promise<{ session_id: string; base_url: string }> {
  const url = typeof proxy === 'string' ? proxy : proxy.url;
  const res = await fetch(`${url}/sessions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  if (res.status !== 201) throw new Error(`POST /sessions answered ${res.status}: ${await res.text()}`);
  return (await res.json()) as { session_id: string; base_url: string };
}

export const bashTool = {
  type: 'function' as const,
  function: {
    name: 'bash',
    description: 'Run a shell command',
    parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
  },
};

/** Reads a raw SSE body into its frames (comments included, as lines starting with ':'). */
export function sseFrames(text: string): string[] {
  return text.split('\n\n').filter((f) => f.trim() !== '');
}
