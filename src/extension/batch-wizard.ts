// What Submit Rollout Batch checks before anything is written or created, without vscode: which
// engines a backend can use (a cluster's pods cannot reach the embedded engine or this machine's
// loopback), the model the engine serves (from its /v1/models, so the empty Model setting works),
// and the kube context's namespace. Every refusal says why in the user's terms.
import { z } from 'zod';

export interface EngineChoice {
  /** The engine URL the batch's proxy calls; null: the embedded engine (docker only). */
  url: string | null;
  label: string;
  description: string;
  /** A URL this machine reaches the same engine at, to list its models (the cluster URL may be cluster-internal). */
  checkUrl: string | null;
}

export interface RefusedEngine {
  label: string;
  why: string;
}

const LOOPBACK_HOSTS = new Set(['localhost', '0.0.0.0', '::1', '[::1]', '::', '[::]']);

/** An http(s) URL whose host is this machine's loopback (127.0.0.0/8, localhost, ::1): only this machine reaches it. */
export function isLoopbackUrl(url: string): boolean {
  let host: string;
  try {
    host = new URL(url).hostname.toLowerCase();
  } catch {
    return false;
  }
  return LOOPBACK_HOSTS.has(host) || host.endsWith('.localhost') || /^127(\.\d{1,3}){3}$/.test(host);
}

/** A cluster-internal Service name (`svc`, `svc.cluster.local`, or a bare name): resolvable inside the cluster only. */
export function isClusterInternalUrl(url: string): boolean {
  let host: string;
  try {
    host = new URL(url).hostname.toLowerCase();
  } catch {
    return false;
  }
  return /\.svc(\.cluster\.local)?$/.test(host) || (!host.includes('.') && !host.includes(':') && !LOOPBACK_HOSTS.has(host));
}

/**
 * The engines a batch on `backend` can use, and the ones it cannot with the reason. Docker: the
 * configured URL and the embedded engine. k8s: harnessLab.clusterEngineUrl (the engine as the cluster
 * reaches it), and harnessLab.engineUrl unless it is this machine's loopback; never the embedded engine.
 */
export function engineChoices(
  backend: 'docker' | 'k8s',
  s: { engineUrl: string; clusterEngineUrl: string },
): { choices: EngineChoice[]; refused: RefusedEngine[] } {
  const choices: EngineChoice[] = [];
  const refused: RefusedEngine[] = [];
  if (backend === 'docker') {
    if (s.engineUrl) choices.push({ url: s.engineUrl, label: s.engineUrl, description: 'harnessLab.engineUrl', checkUrl: s.engineUrl });
    choices.push({ url: null, label: 'Embedded engine', description: "answers with each task's policy.json", checkUrl: null });
    return { choices, refused };
  }
  refused.push({ label: 'Embedded engine', why: "it runs inside this editor's lab on this machine; a cluster's pods cannot call it" });
  const hostCheck = s.engineUrl && !isClusterInternalUrl(s.engineUrl) ? s.engineUrl : null;
  if (s.clusterEngineUrl) {
    if (isLoopbackUrl(s.clusterEngineUrl))
      refused.push({
        label: s.clusterEngineUrl,
        why: `harnessLab.clusterEngineUrl is a loopback address: inside a pod, ${new URL(s.clusterEngineUrl).hostname} is the pod itself, not this machine`,
      });
    else
      choices.push({
        url: s.clusterEngineUrl,
        label: s.clusterEngineUrl,
        description: 'harnessLab.clusterEngineUrl: the engine as the cluster reaches it',
        checkUrl: isClusterInternalUrl(s.clusterEngineUrl) ? hostCheck : s.clusterEngineUrl,
      });
  }
  if (s.engineUrl && s.engineUrl !== s.clusterEngineUrl) {
    if (isLoopbackUrl(s.engineUrl)) {
      const host = new URL(s.engineUrl).hostname;
      refused.push({
        label: s.engineUrl,
        why: s.clusterEngineUrl
          ? `harnessLab.engineUrl is on this machine's loopback (${host}): pods cannot reach it (it only lists the models here)`
          : `harnessLab.engineUrl is on this machine's loopback (${host}): a cluster's pods cannot reach it. Set ` +
            `harnessLab.clusterEngineUrl to the URL the cluster reaches the engine at (e.g. http://vllm.ml.svc:8000/v1)`,
      });
    } else
      choices.push({
        url: s.engineUrl,
        label: s.engineUrl,
        description: 'harnessLab.engineUrl',
        checkUrl: isClusterInternalUrl(s.engineUrl) ? null : s.engineUrl,
      });
  }
  return { choices, refused };
}

/** Why no engine could be offered, as one message. */
export function noEngineMessage(backend: 'docker' | 'k8s', refused: RefusedEngine[]): string {
  const reasons = refused.map((r) => `${r.label}: ${r.why}`).join('; ');
  return `No engine a ${backend} batch can use${reasons ? ` (${reasons})` : ''}. Set harnessLab.${backend === 'k8s' ? 'clusterEngineUrl (or a non-loopback harnessLab.engineUrl)' : 'engineUrl'}.`;
}

const ModelsSchema = z.object({ data: z.array(z.object({ id: z.string() }).loose()) }).loose();

export class EngineCheckError extends Error {}

/** The models an OpenAI-compatible engine lists at GET <base>/v1/models (`url` with or without /v1). */
export async function listEngineModels(
  url: string,
  opts: { apiKey?: string; timeoutMs?: number; signal?: AbortSignal } = {},
): Promise<string[]> {
  const base = url.replace(/\/+$/, '').replace(/\/v1$/, '');
  const target = `${base}/v1/models`;
  let res: Response;
  try {
    const timeout = AbortSignal.timeout(opts.timeoutMs ?? 10_000);
    res = await fetch(target, {
      headers: opts.apiKey ? { authorization: `Bearer ${opts.apiKey}` } : {},
      signal: opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout,
    });
  } catch (err) {
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    const why = cause?.code ?? cause?.message ?? (err as Error).message;
    throw new EngineCheckError(`the engine at ${url} cannot be reached from this machine (${target}: ${why})`);
  }
  const text = await res.text();
  if (!res.ok)
    throw new EngineCheckError(
      `the engine at ${url} answered ${target} with HTTP ${res.status}${res.status === 401 || res.status === 403 ? ' (it wants an API key)' : ''}: ${text.slice(0, 200)}`,
    );
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new EngineCheckError(`the engine at ${url} answered ${target} with something that is not JSON: ${text.slice(0, 120)}`);
  }
  const parsed = ModelsSchema.safeParse(body);
  if (!parsed.success) throw new EngineCheckError(`the engine at ${url} answered ${target} without a list of models (data[].id)`);
  return parsed.data.data.map((m) => m.id);
}

/**
 * The model a batch asks for: the Model setting when the engine serves it, else the engine's only
 * model; `pick` when it serves several (the user chooses); an error naming what it serves otherwise.
 */
export async function resolveBatchModel(
  setting: string,
  served: string[],
  url: string,
  pick: (models: string[]) => Promise<string | undefined>,
): Promise<string | undefined> {
  if (!served.length) throw new EngineCheckError(`the engine at ${url} lists no models at /v1/models`);
  if (setting) {
    if (served.includes(setting)) return setting;
    throw new EngineCheckError(
      `harnessLab.model is "${setting}", but the engine at ${url} serves ${served.join(', ')}; clear the setting or name one of those`,
    );
  }
  if (served.length === 1) return served[0];
  return pick(served);
}

/** The namespace a batch in `context` goes to: the context's own, else "default" (kubectl's rule). */
export function contextNamespace(contexts: { name: string; namespace: string | null }[], context: string): string {
  const c = contexts.find((x) => x.name === context);
  if (!c)
    throw new Error(`kube context "${context}" is not in the kubeconfig (contexts: ${contexts.map((x) => x.name).join(', ') || 'none'})`);
  return c.namespace || 'default';
}

/** The lab's exit, in the user's terms: finished, cancelled (only when asked), or failed with its reason. */
export function labOutcome(
  exitCode: number | null,
  cancelAsked: boolean,
  output: string,
): { kind: 'finished' } | { kind: 'cancelled' } | { kind: 'failed'; reason: string } {
  if (exitCode === 0) return { kind: 'finished' };
  if (cancelAsked && (exitCode === 1 || exitCode === 130)) return { kind: 'cancelled' };
  return { kind: 'failed', reason: failureReason(output, exitCode) };
}

/** The line that says why a lab failed: its `harness-lab ...:` error line, else the last lines it printed. */
export function failureReason(output: string, exitCode: number | null): string {
  const lines = output
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);
  const err = [...lines]
    .reverse()
    .find((l) => /^harness-lab( [a-z-]+)*: /.test(l) || /^(Error|ClusterError|[A-Z][A-Za-z]+Error): /.test(l));
  const text = err ? err.replace(/^harness-lab( [a-z-]+)*: /, '') : lines.slice(-3).join(' ');
  return text || `the lab exited with ${exitCode ?? 'an error'} and printed nothing`;
}
