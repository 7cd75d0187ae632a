// The double's NetworkPolicy decisions (network.ts) on objects in its store, without Docker: no
// policy allows all; an ingress policy on the proxy admits only the batch's rollout pods on its
// port; the rollouts' egress policy lets them reach the proxy and cluster DNS but not an address
// outside the cluster, which an ipBlock rule would allow.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { proxyManifests } from '../../src/cluster/manifests.js';
import { KubeApiDouble } from '../k8s-double/api-server.js';
import { PodNetwork } from '../k8s-double/network.js';
import type { KObject } from '../k8s-double/objects.js';

describe('the double enforces NetworkPolicies as written', () => {
  const api = new KubeApiDouble();
  const store = api.store;
  const res = (g: string, p: string) => store.resource(g, p)!;
  store.create(res('', 'namespaces'), undefined, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'ns' } });
  const pod = (name: string, labels: Record<string, string>): KObject =>
    store.create(res('', 'pods'), 'ns', {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name, labels },
      spec: { containers: [{ name: 'c', image: 'i' }] },
    });
  const net = new PodNetwork(api, undefined as never, {});
  const proxy = pod('proxy', { 'app.kubernetes.io/name': 'harness-lab-proxy', 'harness-lab/batch': 'b1', 'harness-lab/role': 'proxy' });
  const rollout = pod('rollout', { 'harness-lab/batch': 'b1', 'harness-lab/role': 'rollout' });
  const other = pod('other', { 'harness-lab/batch': 'b2', 'harness-lab/role': 'rollout' });
  const stranger = pod('stranger', { app: 'x' });

  it('allows everything without a policy', () => {
    assert.equal(net.decide(stranger, { pod: proxy }, 8100).allowed, true);
    assert.equal(net.decide(rollout, { external: '127.0.0.1' }, 9000).allowed, true);
  });

  it("with the lab's policies: only the batch's rollouts reach the proxy, and rollouts reach nothing outside", () => {
    for (const o of proxyManifests({
      namespace: 'ns',
      batchId: 'b1',
      image: 'i',
      engineUrl: 'http://e/v1',
      model: 'm',
      adminKey: 'k',
    }).filter((x) => x.kind === 'NetworkPolicy'))
      store.create(res('networking.k8s.io', 'networkpolicies'), 'ns', o as KObject);
    assert.equal(net.decide(rollout, { pod: proxy }, 8100).allowed, true);
    assert.equal(net.decide(rollout, { pod: proxy }, 8101).allowed, false, 'another port');
    assert.match(net.decide(stranger, { pod: proxy }, 8100).why, /^ingress to pod ns\/proxy:8100 from pod ns\/stranger is not allowed/);
    assert.equal(net.decide(other, { pod: proxy }, 8100).allowed, false, "another batch's rollout");
    assert.match(net.decide(rollout, { external: '127.0.0.1' }, 9000).why, /^egress of pod ns\/rollout to 127.0.0.1:9000 is not allowed/);
    assert.equal(net.decide(rollout, { pod: stranger }, 80).allowed, false, 'rollouts reach no other pod');
    assert.equal(net.decide(proxy, { external: '127.0.0.1' }, 9000).allowed, true, 'the proxy reaches the engine');
  });

  it('an ipBlock egress rule lets a pod out to the addresses it covers', () => {
    store.create(res('networking.k8s.io', 'networkpolicies'), 'ns', {
      apiVersion: 'networking.k8s.io/v1',
      kind: 'NetworkPolicy',
      metadata: { name: 'out' },
      spec: {
        podSelector: { matchLabels: { app: 'x' } },
        policyTypes: ['Egress'],
        egress: [{ to: [{ ipBlock: { cidr: '127.0.0.0/8', except: ['127.0.0.2/32'] } }] }],
      },
    });
    assert.equal(net.decide(stranger, { external: '127.0.0.1' }, 9000).allowed, true);
    assert.equal(net.decide(stranger, { external: '127.0.0.2' }, 9000).allowed, false);
  });
});
