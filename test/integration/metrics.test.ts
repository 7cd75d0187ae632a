// `GET /metrics` in Prometheus text on the capture proxy and the embedded engine's HTTP front: what a
// scrape during a run reports is what the run did (calls by dialect and outcome, tokens, sessions,
// errors by class, requests by route), and the proxy's needs its admin key when it has one.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { METRICS_CONTENT_TYPE, MetricsText } from '../../src/capture/metrics.js';
import type { EmbeddedEngine } from '../../src/engine/embedded-engine.js';
import { chat, post, startTestEngine } from './engine-fixture.js';
import { createSession, startLab, type Lab } from './helpers.js';

/** `name{labels} value` lines of an exposition, as a map from the series to its value. */
export function parseMetrics(text: string): Map<string, number> {
  const series = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$/.exec(line);
    assert.ok(m, `not an exposition line: ${line}`);
    series.set(m[1]!, Number(m[2]));
  }
  return series;
}

test('the exposition format: HELP and TYPE once per metric, labels escaped, special values spelled', () => {
  const out = new MetricsText()
    .metric('x_total', 'counter', 'a\nb', [
      [{ a: 'q"uote\\back\nline' }, 1],
      [{ a: 'two' }, Infinity],
    ])
    .metric('x_total', 'counter', 'ignored', [[{ a: 'three' }, NaN]])
    .toString();
  assert.equal(
    out,
    '# HELP x_total a b\n# TYPE x_total counter\nx_total{a="q\\"uote\\\\back\\nline"} 1\nx_total{a="two"} +Inf\nx_total{a="three"} NaN\n',
  );
});

describe('the proxy reports what it recorded', () => {
  let lab: Lab;
  before(async () => {
    lab = await startLab({}, { adminKey: 'metrics-admin-key' });
  });
  after(() => lab.close());

  test('calls, tokens, errors and sessions; 401 without the admin key', async () => {
    const admin = { authorization: 'Bearer metrics-admin-key' };
    assert.equal((await fetch(`${lab.proxy.url}/metrics`)).status, 401);
    const created = await fetch(`${lab.proxy.url}/sessions`, {
      method: 'POST',
      headers: { ...admin, 'content-type': 'application/json' },
      body: JSON.stringify({ mint_key: true }),
    });
    const { api_key } = (await created.json()) as { api_key: string };
    const call = (body: unknown) =>
      fetch(`${lab.proxy.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${api_key}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    for (let i = 0; i < 3; i++) assert.equal((await call({ model: 'm', messages: [{ role: 'user', content: `hello ${i}` }] })).status, 200);
    assert.equal((await call({ model: 'm', messages: 'not a list' })).status, 400);
    const res = await fetch(`${lab.proxy.url}/metrics`, { headers: admin });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), METRICS_CONTENT_TYPE);
    const m = parseMetrics(await res.text());
    assert.equal(m.get('harness_lab_proxy_calls_total{dialect="openai_chat",stream="false",outcome="ok"}'), 3);
    const sessionCalls = lab.proxy.sessions.rollout(String(lab.proxy.sessions.list()[0]!.session_id))!.calls;
    const promptIds = sessionCalls.filter((c) => !c.error).reduce((n, c) => n + (c.prompt_token_ids?.length ?? 0), 0);
    assert.ok(promptIds > 0);
    assert.equal(m.get('harness_lab_proxy_tokens_total{kind="prompt"}'), promptIds);
    assert.ok((m.get('harness_lab_proxy_tokens_total{kind="completion"}') ?? 0) > 0);
    assert.equal(m.get('harness_lab_proxy_calls_in_flight'), 0);
    assert.equal(m.get('harness_lab_proxy_sessions{state="held"}'), 1);
    assert.equal(m.get('harness_lab_proxy_call_latency_seconds_count'), sessionCalls.length);
    const errors = [...m.entries()].filter(([k]) => k.startsWith('harness_lab_proxy_call_errors_total'));
    assert.equal(
      errors.reduce((n, [, v]) => n + v, 0),
      sessionCalls.filter((c) => c.error).length,
    );
    assert.ok(m.has('harness_lab_proxy_event_loop_lag_seconds{quantile="0.99"}'));
  });

  test('a session created later shows in the gauge', async () => {
    await createSession(lab.proxy, {}, { authorization: 'Bearer metrics-admin-key' });
    const m = parseMetrics(await (await fetch(`${lab.proxy.url}/metrics`, { headers: { 'x-admin-key': 'metrics-admin-key' } })).text());
    assert.equal(m.get('harness_lab_proxy_sessions{state="held"}'), 2);
  });
});

describe('the embedded engine reports its requests', () => {
  let engine: EmbeddedEngine;
  before(async () => {
    engine = await startTestEngine();
  });
  after(() => engine.close());

  test('requests by route and status, none in flight once answered', async () => {
    await chat(engine.url, { messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    assert.equal((await post(engine.url, '/v1/chat/completions', { messages: 'no' })).status, 400);
    assert.equal((await fetch(`${engine.url}/nowhere`)).status, 404);
    const res = await fetch(`${engine.url}/metrics`);
    assert.equal(res.headers.get('content-type'), METRICS_CONTENT_TYPE);
    const m = parseMetrics(await res.text());
    assert.equal(m.get('harness_lab_engine_requests_total{route="/v1/chat/completions",status="200"}'), 1);
    assert.equal(m.get('harness_lab_engine_requests_total{route="/v1/chat/completions",status="400"}'), 1);
    assert.equal(m.get('harness_lab_engine_requests_total{route="other",status="404"}'), 1);
    assert.equal(m.get('harness_lab_engine_requests_in_flight'), 0);
    assert.ok(m.has('harness_lab_engine_event_loop_lag_seconds{quantile="0.5"}'));
  });
});
