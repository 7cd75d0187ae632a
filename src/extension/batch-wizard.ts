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
          : `harnessLab.engineUrl is on this machine's loopback (${host}): a cluster's pods cannot reach it. Enter the URL ` +
            `the cluster reaches the engine at (e.g. http://vllm.ml.svc:8000/v1); it can be kept in harnessLab.clusterEngineUrl`,
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

/** The engine pick's entry for typing the engine's URL as the cluster's pods reach it (every k8s batch has it). */
export const ENTER_CLUSTER_ENGINE = "Enter the engine URL the cluster's pods reach…";

/**
 * Why `text` cannot be the URL a cluster's pods call the engine at, or undefined when it can. Only the
 * form is judged here (an http(s) URL, not this machine's loopback); whether the engine answers is probed on accept.
 */
export function clusterEngineUrlProblem(text: string): string | undefined {
  const v = text.trim();
  if (!v) return 'The engine URL as the cluster reaches it, e.g. http://vllm.ml.svc:8000/v1';
  let url: URL;
  try {
    url = new URL(v);
  } catch {
    return `Not a URL: an http:// or https:// URL, e.g. http://vllm.ml.svc:8000/v1`;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return `An http:// or https:// URL (not ${url.protocol}//)`;
  if (!url.hostname) return 'The URL names no host';
  if (isLoopbackUrl(v))
    return (
      `${url.hostname} is a loopback address: inside a pod it is the pod itself, not this machine. Enter the engine's ` +
      `Service name (http://vllm.ml.svc:8000/v1), or an address or host name the cluster's pods reach`
    );
  return undefined;
}

/**
 * The engine choice for a URL entered in the wizard: its models are listed at the URL itself, or, when
 * it resolves only inside the cluster (a Service name), through harnessLab.engineUrl unless that is
 * cluster-internal too (then nothing here can list them and the model is asked for).
 */
export function enteredClusterEngine(text: string, s: { engineUrl: string }): EngineChoice {
  const url = text.trim().replace(/\/+$/, '');
  const internal = isClusterInternalUrl(url);
  const hostCheck = s.engineUrl && !isClusterInternalUrl(s.engineUrl) ? s.engineUrl : null;
  return {
    url,
    label: url,
    description: internal ? 'entered: resolves inside the cluster' : 'entered',
    checkUrl: internal ? hostCheck : url,
  };
}

/** What the entry's input box says under the URL being typed: where its models will be listed from. */
export function enteredEnginePrompt(text: string, s: { engineUrl: string }): string {
  const base = "The engine's OpenAI-compatible URL as the cluster's pods reach it (a Service name, a cluster IP, a host name)";
  if (clusterEngineUrlProblem(text)) return base;
  const c = enteredClusterEngine(text, s);
  if (c.checkUrl === c.url) return `${base}. Its models are listed from this machine (GET /v1/models).`;
  if (c.checkUrl)
    return `${base}. ${c.url} resolves only inside the cluster: its models are listed through harnessLab.engineUrl (${c.checkUrl}).`;
  return `${base}. ${c.url} resolves only inside the cluster and harnessLab.engineUrl is not set: you name the model next.`;
}

/**
 * Probes an entered engine where this machine reaches it (GET /v1/models): its models, or null when
 * nothing here can reach it (cluster-internal, no engine URL). Unreachable: an EngineCheckError saying
 * what was tried and what to enter instead.
 */
export async function probeEnteredEngine(
  choice: EngineChoice,
  opts: { apiKey?: string; timeoutMs?: number; signal?: AbortSignal } = {},
): Promise<string[] | null> {
  if (!choice.checkUrl) return null;
  let models: string[];
  try {
    models = await listEngineModels(choice.checkUrl, opts);
  } catch (err) {
    if (!(err instanceof EngineCheckError)) throw err;
    throw new EngineCheckError(
      choice.checkUrl === choice.url
        ? `${err.message.charAt(0).toUpperCase()}${err.message.slice(1)}. Enter a URL both this machine and the cluster's pods reach, or the engine's Service name ` +
            `(its models are then listed through harnessLab.engineUrl)`
        : `${choice.url} resolves only inside the cluster, so its models are listed through harnessLab.engineUrl, but ${err.message}. ` +
            `Start that engine or correct harnessLab.engineUrl`,
    );
  }
  if (!models.length) throw new EngineCheckError(`the engine at ${choice.checkUrl} lists no models at /v1/models`);
  return models;
}

export type EnginePickRow =
  | { kind: 'choice'; label: string; description: string; choice: EngineChoice }
  | { kind: 'enter'; label: string; description: string; detail: string }
  | { kind: 'separator'; label: string }
  | { kind: 'refused'; label: string; description: string };

/**
 * The engine step's rows: the offered engines, for k8s the entry to type the URL the cluster reaches
 * (first when nothing is offered, so a new user with the defaults meets it), then the refused ones with
 * their reasons. `show` false: one engine and nothing to say, taken without asking.
 */
export function enginePick(
  backend: 'docker' | 'k8s',
  choices: EngineChoice[],
  refused: RefusedEngine[],
): { rows: EnginePickRow[]; show: boolean; placeHolder: string } {
  const canEnter = backend === 'k8s';
  const rows: EnginePickRow[] = choices.map((c) => ({ kind: 'choice', label: c.label, description: c.description, choice: c }));
  if (canEnter)
    rows.push({
      kind: 'enter',
      label: `$(edit) ${ENTER_CLUSTER_ENGINE}`,
      description: choices.length ? 'another engine' : 'no setting names one the cluster reaches (harnessLab.clusterEngineUrl)',
      detail: 'Checked here (GET /v1/models, which also fills the model); it can be remembered in harnessLab.clusterEngineUrl',
    });
  if (refused.length) rows.push({ kind: 'separator', label: 'Not offered' });
  for (const r of refused) rows.push({ kind: 'refused', label: `$(circle-slash) ${r.label}`, description: r.why });
  const placeHolder = !canEnter
    ? 'The engine the batch calls'
    : choices.length
      ? 'The engine the in-cluster proxy calls (pods cannot reach this machine)'
      : "No engine the cluster reaches is set: enter its URL (pods cannot reach this machine's loopback)";
  return { rows, show: choices.length > 1 || refused.length > 0 || canEnter, placeHolder };
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
