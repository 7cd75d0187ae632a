// Submit Rollout Batch's "Enter the engine URL the cluster's pods reach…" entry without vscode: what the
// input box refuses as typed (not a URL, not http(s), this machine's loopback), where an entered URL's
// models are listed from (the URL itself, or harnessLab.engineUrl for a Service name, or nowhere), what
// the box says about it, and the probe on Enter against real local HTTP servers (models, or a reason
// saying what was tried and what to enter instead).
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { after, before, test } from 'node:test';
import {
  clusterEngineUrlProblem,
  ENTER_CLUSTER_ENGINE,
  EngineCheckError,
  engineChoices,
  enginePick,
  enteredClusterEngine,
  enteredEnginePrompt,
  probeEnteredEngine,
} from '../../src/extension/batch-wizard.js';

let server: Server;
let base = '';
let body = '{"object":"list","data":[{"id":"policy-model","object":"model"}]}';
const seen: string[] = [];

before(async () => {
  server = createServer((req, res) => {
    seen.push(`${req.method} ${req.url}`);
    res.writeHead(200, { 'content-type': 'application/json' }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}/v1`;
});
after(() => server.close());

async function closedPortUrl(): Promise<string> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return `http://127.0.0.1:${port}/v1`;
}

test('the entry is labelled as the issue names it', () => {
  assert.equal(ENTER_CLUSTER_ENGINE, "Enter the engine URL the cluster's pods reach…");
});

test('the engine step: with the defaults a k8s batch meets the entry first (no dead end); docker never has it', () => {
  // The defaults a new user has: the engine on this machine's loopback, no cluster URL.
  const defaults = { engineUrl: 'http://127.0.0.1:8000/v1', clusterEngineUrl: '' };
  const k = engineChoices('k8s', defaults);
  const p = enginePick('k8s', k.choices, k.refused);
  assert.equal(p.show, true);
  assert.deepEqual(
    p.rows.map((r) => [r.kind, r.label]),
    [
      ['enter', `$(edit) ${ENTER_CLUSTER_ENGINE}`],
      ['separator', 'Not offered'],
      ['refused', '$(circle-slash) Embedded engine'],
      ['refused', '$(circle-slash) http://127.0.0.1:8000/v1'],
    ],
  );
  assert.match(p.placeHolder, /No engine the cluster reaches is set: enter its URL/);
  assert.match(p.rows[0]!.kind === 'enter' ? p.rows[0]!.detail : '', /remembered in harnessLab\.clusterEngineUrl/);
  // Nothing set at all: still the entry, never a refusal to go on.
  const none = engineChoices('k8s', { engineUrl: '', clusterEngineUrl: '' });
  assert.deepEqual(
    enginePick('k8s', none.choices, none.refused).rows.map((r) => r.kind),
    ['enter', 'separator', 'refused'],
  );
  // A cluster URL set: offered first, the entry after it for another engine.
  const set = engineChoices('k8s', { ...defaults, clusterEngineUrl: 'http://vllm.ml.svc:8000/v1' });
  const q = enginePick('k8s', set.choices, set.refused);
  assert.deepEqual(
    q.rows.slice(0, 2).map((r) => [r.kind, r.label]),
    [
      ['choice', 'http://vllm.ml.svc:8000/v1'],
      ['enter', `$(edit) ${ENTER_CLUSTER_ENGINE}`],
    ],
  );
  assert.match(q.placeHolder, /in-cluster proxy calls/);
  // Docker: no entry; one engine and nothing refused is taken without asking.
  const d = engineChoices('docker', { engineUrl: '', clusterEngineUrl: '' });
  const dp = enginePick('docker', d.choices, d.refused);
  assert.deepEqual([dp.show, dp.rows.map((r) => r.kind)], [false, ['choice']]);
  const d2 = engineChoices('docker', defaults);
  assert.deepEqual(
    [enginePick('docker', d2.choices, d2.refused).show, enginePick('docker', d2.choices, d2.refused).rows.map((r) => r.kind)],
    [true, ['choice', 'choice']],
  );
});

test('as typed: a URL, http(s), not loopback (inside a pod that is the pod); Service names, cluster IPs and hosts pass', () => {
  assert.match(clusterEngineUrlProblem('')!, /as the cluster reaches it/);
  assert.match(clusterEngineUrlProblem('   ')!, /as the cluster reaches it/);
  assert.match(clusterEngineUrlProblem('vllm.ml.svc:8000')!, /http:\/\/ or https:\/\//);
  assert.match(clusterEngineUrlProblem('engine here')!, /Not a URL/);
  assert.match(clusterEngineUrlProblem('ftp://vllm.ml.svc/v1')!, /not ftp:\/\//);
  for (const u of ['http://127.0.0.1:8000/v1', 'http://localhost:8000', 'http://[::1]:8000/v1', 'http://0.0.0.0:9'])
    assert.match(clusterEngineUrlProblem(u)!, /loopback address: inside a pod it is the pod itself.*Service name/, u);
  for (const u of [
    'http://vllm.ml.svc:8000/v1',
    'http://hl-engine.default.svc.cluster.local:8000',
    'http://vllm:8000/v1',
    'http://10.96.0.12:8000/v1',
    'https://engine.example.com/v1',
    '  http://vllm.ml.svc:8000/v1  ',
  ])
    assert.equal(clusterEngineUrlProblem(u), undefined, u);
});

test("an entered URL's models are listed at the URL, through harnessLab.engineUrl for a Service name, or nowhere", () => {
  const svc = enteredClusterEngine(' http://vllm.ml.svc:8000/v1/ ', { engineUrl: 'http://127.0.0.1:8000/v1' });
  assert.deepEqual(svc, {
    url: 'http://vllm.ml.svc:8000/v1',
    label: 'http://vllm.ml.svc:8000/v1',
    description: 'entered: resolves inside the cluster',
    checkUrl: 'http://127.0.0.1:8000/v1',
  });
  assert.equal(enteredClusterEngine('http://vllm.ml.svc:8000/v1', { engineUrl: '' }).checkUrl, null);
  assert.equal(
    enteredClusterEngine('http://vllm.ml.svc:8000/v1', { engineUrl: 'http://other.ml.svc:8000/v1' }).checkUrl,
    null,
    'an engine URL that is cluster-internal too cannot list them here',
  );
  const direct = enteredClusterEngine('http://10.96.0.12:8000/v1', { engineUrl: 'http://127.0.0.1:8000/v1' });
  assert.deepEqual(
    [direct.url, direct.checkUrl, direct.description],
    ['http://10.96.0.12:8000/v1', 'http://10.96.0.12:8000/v1', 'entered'],
  );

  const s = { engineUrl: 'http://127.0.0.1:8000/v1' };
  assert.doesNotMatch(enteredEnginePrompt('', s), /listed/);
  assert.match(enteredEnginePrompt('http://10.96.0.12:8000/v1', s), /listed from this machine \(GET \/v1\/models\)/);
  assert.match(
    enteredEnginePrompt('http://vllm.ml.svc:8000/v1', s),
    /resolves only inside the cluster: its models are listed through harnessLab\.engineUrl \(http:\/\/127\.0\.0\.1:8000\/v1\)/,
  );
  assert.match(enteredEnginePrompt('http://vllm.ml.svc:8000/v1', { engineUrl: '' }), /you name the model next/);
});

test('the probe on Enter: the models, null when nothing here reaches it, else a reason with what to enter instead', async () => {
  // A Service name: listed through the engine URL this machine reaches.
  const svc = enteredClusterEngine('http://hl-engine.default.svc:8000/v1', { engineUrl: base });
  body = '{"object":"list","data":[{"id":"policy-model","object":"model"}]}';
  const before = seen.length;
  assert.deepEqual(await probeEnteredEngine(svc), ['policy-model']);
  assert.deepEqual(seen.slice(before), ['GET /v1/models'], 'one GET /v1/models');
  assert.equal(await probeEnteredEngine(enteredClusterEngine('http://hl-engine.default.svc:8000/v1', { engineUrl: '' })), null);

  body = '{"object":"list","data":[]}';
  await assert.rejects(probeEnteredEngine(svc), /lists no models at \/v1\/models/);

  const closed = await closedPortUrl();
  await assert.rejects(
    probeEnteredEngine(enteredClusterEngine('http://hl-engine.default.svc:8000/v1', { engineUrl: closed })),
    (e: Error) =>
      e instanceof EngineCheckError &&
      /^http:\/\/hl-engine\.default\.svc:8000\/v1 resolves only inside the cluster, so its models are listed through harnessLab\.engineUrl, but the engine at .* cannot be reached from this machine .*ECONNREFUSED.*Start that engine or correct harnessLab\.engineUrl$/.test(
        e.message,
      ),
  );
  // A URL probed as itself (built by hand: the entry refuses loopback, and only loopback servers run here).
  await assert.rejects(
    probeEnteredEngine({ url: closed, label: closed, description: 'entered', checkUrl: closed }),
    (e: Error) =>
      e instanceof EngineCheckError &&
      /cannot be reached from this machine .*ECONNREFUSED.*Enter a URL both this machine and the cluster's pods reach, or the engine's Service name/.test(
        e.message,
      ),
  );
});
