// The batch's capture proxy in the cluster as the lab reaches it: its input to the manifests, waiting
// for its pod and its /health through the port-forward, and K8sCapture, the runner's view of it (each
// attempt's session created with a minted key, followed by the mirror while it runs, its facts read
// at the end).
import type * as k8s from '@kubernetes/client-node';
import { z } from 'zod';
import { ClusterError, type Cluster } from '../../../cluster/kube.js';
import { LABELS, proxyName, type ProxyInput } from '../../../cluster/manifests.js';
import type { BatchWatch } from '../../../cluster/watch.js';
import type { AttemptSessionRequest, BatchCapture } from '../../backend.js';
import { batchPaths, type BatchManifest } from '../../state.js';
import type { ProxyImage } from './images.js';
import { engineAndModel } from './job.js';
import { SessionMirror } from './mirror.js';

export function proxyInput(
  opts: { proxy: ProxyImage; manifest: BatchManifest; engineApiKey?: string },
  namespace: string,
  adminKey: string,
): ProxyInput {
  return {
    ...opts.proxy,
    ...engineAndModel(opts.manifest),
    namespace,
    batchId: opts.manifest.batch_id,
    adminKey,
    ...(opts.engineApiKey ? { engineApiKey: opts.engineApiKey } : {}),
  };
}

export async function waitForProxyPod(cluster: Cluster, watch: BatchWatch, batchId: string, timeoutMs: number): Promise<string> {
  const isReady = (p: k8s.V1Pod) =>
    p.metadata?.labels?.[LABELS.role] === 'proxy' &&
    !p.metadata?.deletionTimestamp &&
    (p.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
  const ready = () => [...watch.pods.objects.values()].find(isReady)?.metadata?.name;
  const now = ready();
  if (now) return now;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      off();
      const pods = [...watch.pods.objects.values()].filter((p) => p.metadata?.labels?.[LABELS.role] === 'proxy');
      const state = pods
        .map(
          (p) =>
            `${p.metadata?.name}: ${p.status?.phase ?? '?'}${(p.status?.containerStatuses ?? []).map((c) => (c.state?.waiting?.reason ? ` ${c.state.waiting.reason}` : '')).join('')}`,
        )
        .join('; ');
      reject(
        new ClusterError(
          `the capture proxy of batch ${batchId} (Deployment ${cluster.namespace}/${proxyName(batchId)}) did not ` +
            `become ready within ${Math.round(timeoutMs / 1000)} s${state ? `: ${state}` : ': no pod'}`,
        ),
      );
    }, timeoutMs);
    const off = watch.pods.on(() => {
      const name = ready();
      if (!name) return;
      clearTimeout(timer);
      off();
      resolve(name);
    });
  });
}

export async function waitForHealth(url: string, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < end) {
    try {
      const res = await fetch(`${url}/health`, { signal: AbortSignal.timeout(5000) });
      if (res.ok) return;
      last = `HTTP ${res.status}`;
    } catch (err) {
      last = (err as Error).message;
    }
    await new Promise((r) => setTimeout(r, 300));
  }
  throw new ClusterError(`the capture proxy did not answer /health through the port-forward ${url} (${last})`);
}

const RolloutDocSchema = z
  .object({ calls: z.array(z.unknown()), trainable: z.boolean(), validation: z.array(z.string()).default([]) })
  .loose();
const CreatedSchema = z.object({ api_key: z.string().min(1) }).loose();

/** Why a request never got an HTTP answer (the port-forward dropped, the proxy pod went away, a timeout). */
function transportReason(err: unknown): { refused: boolean; text: string } {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  const code = cause?.code ?? (err as NodeJS.ErrnoException).code;
  return { refused: code === 'ECONNREFUSED', text: [code, cause?.message ?? (err as Error).message].filter(Boolean).join(': ') };
}

/**
 * The in-cluster proxy as the runner sees it, through the port-forward. Each attempt's session is
 * followed while it runs (mirror.ts): its calls land in `<batch>/capture` as they happen. A
 * request that gets no answer (the port-forward dropped) is retried, then the port-forward is made
 * again (`reconnect`) and the mirror resumes from its last mirrored call.
 */
export class K8sCapture implements BatchCapture {
  /** Makes the port-forward again and returns its URL (set by the backend). */
  reconnect: (() => Promise<string>) | undefined;
  readonly mirror: SessionMirror;

  constructor(
    public url: string,
    private readonly adminKey: string,
    batchDir: string,
    engineUrl: string,
    private readonly log: (line: string) => void = () => {},
  ) {
    this.mirror = new SessionMirror(batchPaths(batchDir).capture, (path) => this.call('GET', path), engineUrl, log);
  }

  /** Follows running sessions every `intervalMs` (0: only at each attempt's end). */
  startFollowing(intervalMs: number): void {
    if (intervalMs > 0) this.mirror.start(intervalMs);
  }

  private async call(method: string, path: string, body?: unknown): Promise<unknown> {
    for (let attempt = 0; ; attempt++) {
      let res: Response;
      let text: string;
      try {
        res = await fetch(`${this.url}${path}`, {
          method,
          headers: { authorization: `Bearer ${this.adminKey}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
          ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
          signal: AbortSignal.timeout(30_000),
        });
        text = await res.text();
      } catch (err) {
        const why = transportReason(err);
        // A POST is repeated only when it never left (connection refused): it is not idempotent.
        if (attempt >= 3 || (method !== 'GET' && !why.refused))
          throw new Error(
            `the in-cluster capture proxy did not answer ${method} ${path} through the port-forward ${this.url} (${why.text})`,
          );
        // First a plain retry (a dropped stream heals on the next connection), then a new port-forward.
        if (attempt === 0 || !this.reconnect) await new Promise((r) => setTimeout(r, 300));
        else {
          this.log(`the port-forward to the capture proxy dropped (${why.text}); forwarding again`);
          this.url = await this.reconnect();
        }
        continue;
      }
      if (!res.ok) throw new Error(`the in-cluster capture proxy answered ${method} ${path} with ${res.status}: ${text.slice(0, 300)}`);
      return text ? JSON.parse(text) : undefined;
    }
  }

  /** Minted keys of this lab's sessions, in memory only: a record, export or log carries the session id, never the key. */
  private readonly keys = new Map<string, string>();

  async createSession(req: AttemptSessionRequest): Promise<void> {
    const created = CreatedSchema.parse(
      await this.call('POST', '/sessions', {
        session_id: req.sessionId,
        max_model_calls: req.maxModelCalls,
        metadata: req.metadata,
        sampling: req.sampling,
        mint_key: true,
      }),
    );
    this.keys.set(req.sessionId, created.api_key);
    this.mirror.follow(req.sessionId);
  }

  /** The key the attempt's harness presents (the session id only for a session this lab did not create). */
  keyOf(sessionId: string): string {
    return this.keys.get(sessionId) ?? sessionId;
  }

  async sessionFacts(sessionId: string): Promise<{ nCalls: number; trainable: boolean; findings: string[] }> {
    const doc = RolloutDocSchema.parse(await this.call('GET', `/sessions/${encodeURIComponent(sessionId)}/rollout`));
    // The last sync: whatever the polling had not fetched yet; ids already mirrored are skipped.
    let mirrored = -1;
    let failure = '';
    try {
      mirrored = await this.mirror.sync(sessionId);
    } catch (err) {
      failure = err instanceof Error ? err.message : String(err);
      this.log(`mirroring session ${sessionId} into the batch directory: ${failure}`);
    }
    await this.mirror.unfollow(sessionId);
    // What trains is what the batch directory holds: a copy short of the proxy's calls is never trainable.
    if (failure || mirrored < doc.calls.length) {
      const short = `[FATAL mirror] ${failure ? `the final mirror failed (${failure})` : `${mirrored} of the proxy's ${doc.calls.length} call(s)`} in ${this.mirror.fileOf(sessionId)}`;
      return { nCalls: doc.calls.length, trainable: false, findings: [short, ...doc.validation] };
    }
    return { nCalls: doc.calls.length, trainable: doc.trainable, findings: doc.validation };
  }

  /** Mirrors a session into `<batch>/capture/sessions/<id>.jsonl` now (the capture store's format); returns the file. */
  async mirrorNow(sessionId: string): Promise<string> {
    await this.mirror.sync(sessionId);
    return this.mirror.fileOf(sessionId);
  }

  async close(): Promise<void> {
    await this.mirror.close();
  }
}
