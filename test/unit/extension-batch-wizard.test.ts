// Submit Rollout Batch's checks without vscode: which engines a backend is offered (never the embedded
// engine or a loopback URL for k8s, each refusal with its reason), the model from /v1/models of a real
// local HTTP server, the context's namespace, and how a lab's end is named (a failure is never "cancelled").
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { after, before, test } from 'node:test';
import {
  contextNamespace,
  engineChoices,
  EngineCheckError,
  failureReason,
  isClusterInternalUrl,
  isLoopbackUrl,
  labOutcome,
  listEngineModels,
  noEngineMessage,
  resolveBatchModel,
} from '../../src/extension/batch-wizard.js';

let server: Server;
let base = '';
let answer: { status: number; body: string } = { status: 200, body: '{"data":[{"id":"qwen3-8b"}]}' };
const seen: string[] = [];

before(async () => {
  server = createServer((req, res) => {
    seen.push(`${req.method} ${req.url} ${req.headers.authorization ?? ''}`);
    res.writeHead(answer.status, { 'content-type': 'application/json' }).end(answer.body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
after(() => server.close());

test('loopback and cluster-internal URLs are told apart', () => {
  for (const u of [
    'http://127.0.0.1:8000/v1',
    'http://localhost:8000',
    'http://[::1]:8000/v1',
    'http://127.1.2.3/v1',
    'http://0.0.0.0:9',
    'http://app.localhost/v1',
  ])
    assert.ok(isLoopbackUrl(u), u);
  for (const u of ['http://10.0.0.5:8000/v1', 'https://engine.example.com/v1', 'http://vllm.ml.svc:8000/v1', 'not a url'])
    assert.ok(!isLoopbackUrl(u), u);
  for (const u of ['http://vllm.ml.svc:8000/v1', 'http://vllm.ml.svc.cluster.local:8000', 'http://vllm:8000/v1'])
    assert.ok(isClusterInternalUrl(u), u);
  for (const u of ['https://engine.example.com/v1', 'http://10.0.0.5:8000', 'http://localhost:8000'])
    assert.ok(!isClusterInternalUrl(u), u);
});

test('docker: the configured engine and the embedded engine; k8s: never the embedded engine nor a loopback URL, each with its reason', () => {
  const docker = engineChoices('docker', { engineUrl: 'http://127.0.0.1:8000/v1', clusterEngineUrl: '' });
  assert.deepEqual(
    docker.choices.map((c) => c.url),
    ['http://127.0.0.1:8000/v1', null],
  );
  assert.deepEqual(docker.refused, []);
  assert.deepEqual(
    engineChoices('docker', { engineUrl: '', clusterEngineUrl: '' }).choices.map((c) => c.label),
    ['Embedded engine'],
  );

  // The defaults a new user has: a loopback engine URL (the embedded engine's) and no cluster URL.
  const k = engineChoices('k8s', { engineUrl: 'http://127.0.0.1:8000/v1', clusterEngineUrl: '' });
  assert.deepEqual(k.choices, []);
  assert.deepEqual(
    k.refused.map((r) => r.label),
    ['Embedded engine', 'http://127.0.0.1:8000/v1'],
  );
  assert.match(k.refused[0]!.why, /a cluster's pods cannot call it/);
  assert.match(k.refused[1]!.why, /loopback .*cannot reach it.*harnessLab\.clusterEngineUrl/);
  assert.match(
    noEngineMessage('k8s', k.refused),
    /No engine a k8s batch can use .*Embedded engine: .*127\.0\.0\.1.*Set harnessLab\.clusterEngineUrl/,
  );

  // A cluster URL: offered; its models are listed through the loopback URL this machine reaches.
  const both = engineChoices('k8s', { engineUrl: 'http://127.0.0.1:8000/v1', clusterEngineUrl: 'http://vllm.ml.svc:8000/v1' });
  assert.deepEqual(
    both.choices.map((c) => [c.url, c.checkUrl]),
    [['http://vllm.ml.svc:8000/v1', 'http://127.0.0.1:8000/v1']],
  );
  assert.deepEqual(
    both.refused.map((r) => r.label),
    ['Embedded engine', 'http://127.0.0.1:8000/v1'],
  );
  assert.match(both.refused[1]!.why, /pods cannot reach it \(it only lists the models here\)/);
  // A public engine URL serves both: offered and checked as is.
  const pub = engineChoices('k8s', { engineUrl: 'https://engine.example.com/v1', clusterEngineUrl: '' });
  assert.deepEqual(
    pub.choices.map((c) => [c.url, c.checkUrl]),
    [['https://engine.example.com/v1', 'https://engine.example.com/v1']],
  );
  // A loopback cluster URL is refused too (a pod's 127.0.0.1 is the pod).
  assert.match(
    engineChoices('k8s', { engineUrl: '', clusterEngineUrl: 'http://localhost:8000' }).refused[1]!.why,
    /loopback address: inside a pod/,
  );
});

test('the model comes from /v1/models: the setting when served, the only model, or a pick; a wrong setting names what is served', async () => {
  answer = { status: 200, body: '{"object":"list","data":[{"id":"qwen3-8b","object":"model"}]}' };
  assert.deepEqual(await listEngineModels(`${base}/v1`, { apiKey: 'k1' }), ['qwen3-8b']);
  assert.equal(seen.at(-1), 'GET /v1/models Bearer k1');
  assert.deepEqual(await listEngineModels(base), ['qwen3-8b'], 'a URL without /v1 works too');
  const noPick = async () => assert.fail('no pick for one model');
  assert.equal(await resolveBatchModel('', ['qwen3-8b'], base, noPick), 'qwen3-8b');
  assert.equal(await resolveBatchModel('b', ['a', 'b'], base, noPick), 'b');
  assert.equal(await resolveBatchModel('', ['a', 'b'], base, async (m) => m[1]), 'b');
  assert.equal(await resolveBatchModel('', ['a', 'b'], base, async () => undefined), undefined, 'backing out of the pick');
  await assert.rejects(resolveBatchModel('c', ['a', 'b'], base, noPick), /harnessLab\.model is "c", but the engine at .* serves a, b/);
  await assert.rejects(resolveBatchModel('', [], base, noPick), /lists no models/);

  answer = { status: 401, body: '{"error":"key"}' };
  await assert.rejects(
    listEngineModels(base),
    (e: Error) => e instanceof EngineCheckError && /HTTP 401 \(it wants an API key\)/.test(e.message),
  );
  answer = { status: 200, body: '<html>' };
  await assert.rejects(listEngineModels(base), /not JSON/);
  answer = { status: 200, body: '{"models":[]}' };
  await assert.rejects(listEngineModels(base), /without a list of models/);
  const closed = createServer();
  await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
  const port = (closed.address() as { port: number }).port;
  await new Promise<void>((r) => closed.close(() => r()));
  await assert.rejects(listEngineModels(`http://127.0.0.1:${port}/v1`), /cannot be reached from this machine .*ECONNREFUSED/);
});

test("the batch goes to the context's namespace (default when it names none); an unknown context is named", () => {
  const contexts = [
    { name: 'double', namespace: null },
    { name: 'gpu', namespace: 'rl' },
  ];
  assert.equal(contextNamespace(contexts, 'gpu'), 'rl');
  assert.equal(contextNamespace(contexts, 'double'), 'default');
  assert.throws(() => contextNamespace(contexts, 'x'), /kube context "x" is not in the kubeconfig \(contexts: double, gpu\)/);
});

test('a lab that fails is "failed" with its reason, never "cancelled"; cancelled only when someone asked', () => {
  const out =
    'batch b1: 2 of 2 rollout(s) to run\nharness-lab batch resume: a cluster batch needs --model: the model name the in-cluster proxy serves\n';
  assert.deepEqual(labOutcome(1, false, out), {
    kind: 'failed',
    reason: 'a cluster batch needs --model: the model name the in-cluster proxy serves',
  });
  assert.deepEqual(labOutcome(1, true, 'cancelled; ...'), { kind: 'cancelled' });
  assert.deepEqual(labOutcome(0, false, ''), { kind: 'finished' });
  assert.equal(labOutcome(null, false, '').kind, 'failed');
  assert.equal(failureReason('line one\nline two\nline three\nline four', 3), 'line two line three line four');
  assert.equal(failureReason('', 3), 'the lab exited with 3 and printed nothing');
  assert.equal(failureReason('x\nharness-lab: ClusterError-free message\n', 1), 'ClusterError-free message');
});
