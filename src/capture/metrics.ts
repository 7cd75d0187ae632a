// Prometheus text exposition (format 0.0.4) for the lab's servers: the capture proxy, `serve` and the
// embedded engine each answer `GET /metrics` with what days of running are watched by (calls, tokens,
// sessions by state, errors by class, event-loop lag, sandboxes by state). The format is a few lines
// of text per metric (# HELP, # TYPE, then `name{label="v"} value`); no client library is needed for
// the handful of counters and gauges here, and none of them is computed on the hot path: counters
// are bumped by events the servers already fire, gauges are read when scraped.
import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks';
import type { IDisposable } from './events.js';
import type { SessionRegistry } from './session-registry.js';
import type { CallRecord } from './types.js';

export const METRICS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

export type Labels = Record<string, string | number>;
export type MetricType = 'counter' | 'gauge' | 'summary';

const escapeLabel = (v: string) => v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');

function formatValue(v: number): string {
  if (Number.isNaN(v)) return 'NaN';
  if (v === Infinity) return '+Inf';
  if (v === -Infinity) return '-Inf';
  return String(v);
}

/** Builds one exposition: each metric's HELP and TYPE once, then its samples. */
export class MetricsText {
  private readonly lines: string[] = [];
  private readonly declared = new Set<string>();

  metric(name: string, type: MetricType, help: string, samples: readonly [Labels, number][] | number): this {
    if (!this.declared.has(name)) {
      this.declared.add(name);
      this.lines.push(`# HELP ${name} ${help.replace(/\n/g, ' ')}`, `# TYPE ${name} ${type}`);
    }
    const list = typeof samples === 'number' ? ([[{}, samples]] as [Labels, number][]) : samples;
    for (const [labels, value] of list) this.sample(name, labels, value);
    return this;
  }

  /** A sample of a declared metric under another name (a summary's `_sum` and `_count`). */
  sample(name: string, labels: Labels, value: number): this {
    const keys = Object.keys(labels);
    const l = keys.length ? `{${keys.map((k) => `${k}="${escapeLabel(String(labels[k]))}"`).join(',')}}` : '';
    this.lines.push(`${name}${l} ${formatValue(value)}`);
    return this;
  }

  toString(): string {
    return `${this.lines.join('\n')}\n`;
  }
}

/** A counter keyed by a label set (kept as its JSON), for `metric(...)`. */
export class LabelledCounter {
  private readonly values = new Map<string, [Labels, number]>();

  add(labels: Labels, by = 1): void {
    const key = JSON.stringify(labels);
    const cur = this.values.get(key);
    if (cur) cur[1] += by;
    else this.values.set(key, [labels, by]);
  }

  samples(): [Labels, number][] {
    return [...this.values.values()].map(([l, v]) => [l, v]);
  }
}

/** The process's event-loop delay (node's histogram, 20 ms resolution), reported as seconds. */
export class EventLoopLag implements IDisposable {
  private readonly histogram: IntervalHistogram = monitorEventLoopDelay({ resolution: 20 });

  constructor() {
    this.histogram.enable();
  }

  write(out: MetricsText, prefix: string): void {
    const h = this.histogram;
    const s = (ns: number) => (Number.isFinite(ns) ? ns / 1e9 : 0);
    out.metric(
      `${prefix}_event_loop_lag_seconds`,
      'gauge',
      'Event-loop delay of the process since it started (node perf_hooks), by quantile',
      [
        [{ quantile: '0.5' }, s(h.percentile(50))],
        [{ quantile: '0.99' }, s(h.percentile(99))],
        [{ quantile: '1' }, s(h.max)],
      ],
    );
  }

  dispose(): void {
    this.histogram.disable();
  }
}

/**
 * The capture proxy's metrics, fed by its session registry's events: calls by dialect and outcome,
 * tokens, latency, calls in flight and sessions by state.
 */
export class ProxyMetrics implements IDisposable {
  private readonly calls = new LabelledCounter();
  private readonly errors = new LabelledCounter();
  private readonly tokens = new LabelledCounter();
  private latencySum = 0;
  private latencyCount = 0;
  private inFlight = 0;
  private readonly lag = new EventLoopLag();
  private readonly subscriptions: IDisposable[] = [];

  constructor(private readonly sessions: SessionRegistry) {
    this.subscriptions.push(
      sessions.onDidRecordCall((r) => this.onCall(r)),
      sessions.onDidChangeCallActivity((a) => (this.inFlight = Math.max(0, this.inFlight + (a.state === 'started' ? 1 : -1)))),
    );
  }

  private onCall(r: CallRecord): void {
    this.calls.add({ dialect: r.dialect, stream: String(r.stream), outcome: r.error ? 'error' : 'ok' });
    if (r.error) this.errors.add({ kind: r.error.kind, status: r.error.status });
    this.tokens.add({ kind: 'prompt' }, r.prompt_token_ids?.length ?? r.usage?.prompt_tokens ?? 0);
    this.tokens.add({ kind: 'completion' }, r.completion_token_ids?.length ?? r.usage?.completion_tokens ?? 0);
    this.latencySum += r.latency_ms / 1000;
    this.latencyCount++;
  }

  render(): string {
    const out = new MetricsText();
    out.metric('harness_lab_proxy_calls_total', 'counter', 'Model calls recorded, by dialect, stream and outcome', this.calls.samples());
    out.metric(
      'harness_lab_proxy_call_errors_total',
      'counter',
      'Model calls answered with an error, by kind (client, engine, internal) and HTTP status',
      this.errors.samples(),
    );
    out.metric(
      'harness_lab_proxy_tokens_total',
      'counter',
      'Tokens of recorded calls: prompt ids the engine saw and sampled ids',
      this.tokens.samples(),
    );
    out.metric('harness_lab_proxy_call_latency_seconds', 'summary', 'Wall time of recorded calls, request to answer', []);
    out.sample('harness_lab_proxy_call_latency_seconds_sum', {}, this.latencySum);
    out.sample('harness_lab_proxy_call_latency_seconds_count', {}, this.latencyCount);
    out.metric('harness_lab_proxy_calls_in_flight', 'gauge', 'Model calls started and not yet answered', this.inFlight);
    const held = this.sessions.knownCount;
    out.metric(
      'harness_lab_proxy_sessions',
      'gauge',
      'Capture sessions by state: held in memory, or dormant (on disk, found again by key)',
      [
        [{ state: 'held' }, held],
        [{ state: 'dormant' }, Math.max(0, this.sessions.size - held)],
      ],
    );
    this.lag.write(out, 'harness_lab_proxy');
    return out.toString();
  }

  dispose(): void {
    for (const s of this.subscriptions) s.dispose();
    this.lag.dispose();
  }
}
