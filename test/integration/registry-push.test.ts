// `--registry REG`: task images pushed through the real Docker daemon to the registry double (the
// Registry HTTP API v2 on 127.0.0.1), with the auth from the user's Docker config, and a failed
// push that names image and registry before the cluster is asked for anything.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type Docker from 'dockerode';
import { k8sBackendModule, pushedProxy } from '../../src/batch/backends/k8s/index.js';
import { pushImages, registryAuth } from '../../src/cluster/registry-push.js';
import { followProgress } from '../../src/sandbox/docker-client.js';
import { tarDirectory } from '../../src/sandbox/images.js';
import { startRegistryDouble, type RegistryDouble } from '../registry-double/index.js';
import { manifestFor, taskCopy, testCluster } from './k8s-fixtures.js';
import { dockerReady } from './sandbox-fixtures.js';

const LOCAL = `harness-lab/push-test:${process.pid}`;

async function buildTiny(docker: Docker): Promise<string> {
  const ctx = mkdtempSync(join(tmpdir(), 'hl-push-ctx-'));
  try {
    // Two layers with content unique to this run, so the daemon has to upload them.
    writeFileSync(join(ctx, 'a.txt'), `layer a ${Date.now()} ${Math.random()}\n`);
    writeFileSync(join(ctx, 'b.bin'), Buffer.alloc(300_000, process.pid % 251));
    writeFileSync(
      join(ctx, 'Dockerfile'),
      ['FROM scratch', 'COPY a.txt /a.txt', 'COPY b.bin /b.bin', 'LABEL harness-lab.kind=test', ''].join('\n'),
    );
    await followProgress(docker, await docker.buildImage(tarDirectory(ctx), { t: LOCAL, rm: true, forcerm: true }));
  } finally {
    rmSync(ctx, { recursive: true, force: true });
  }
  return (await docker.getImage(LOCAL).inspect()).Id;
}

describe('pushing task images to --registry', { timeout: 300_000 }, () => {
  let docker: Docker;
  let imageId: string;
  const registries: RegistryDouble[] = [];
  const pushedTags: string[] = [];

  before(async () => {
    docker = await dockerReady();
    imageId = await buildTiny(docker);
  });

  after(async () => {
    for (const t of [...pushedTags, LOCAL])
      await docker
        .getImage(t)
        .remove({ force: true })
        .catch(() => undefined);
    for (const r of registries) await r.close();
  });

  it('tags REG/<name>:<tag> and pushes config, layers and manifest; the double checked every digest', async () => {
    const reg = await startRegistryDouble();
    registries.push(reg);
    const lines: string[] = [];
    const pushed = await pushImages(docker, [LOCAL], reg.host, {
      log: (l) => lines.push(l),
      env: { HOME: mkdtempSync(join(tmpdir(), 'hl-home-')) },
    });
    const full = `${reg.host}/${LOCAL}`;
    pushedTags.push(full);
    assert.deepEqual([...pushed], [[LOCAL, full]]);
    const m = reg.manifest('harness-lab/push-test', String(process.pid));
    assert.ok(m, `manifest received; requests: ${reg.requests.map((r) => `${r.method} ${r.path}`).join(', ')}`);
    const doc = JSON.parse(m.body.toString('utf8')) as { config: { digest: string }; layers: { digest: string; size: number }[] };
    assert.equal(doc.config.digest, imageId, 'the config blob is the local image');
    assert.equal(doc.layers.length, 2);
    for (const d of [doc.config.digest, ...doc.layers.map((l) => l.digest)]) {
      const blob = reg.blobs.get(d);
      assert.ok(blob, `blob ${d} uploaded`);
      assert.equal(`sha256:${createHash('sha256').update(blob).digest('hex')}`, d);
    }
    assert.ok(
      reg.requests.some((r) => r.method === 'GET' && r.path === '/v2/'),
      'the daemon pinged /v2/',
    );
    assert.ok(
      reg.requests.some((r) => r.method === 'HEAD' && /\/blobs\/sha256:/.test(r.path)),
      'the daemon asked which blobs exist',
    );
    assert.ok(lines.some((l) => l.includes(`pushed ${full}`)));
    assert.ok(
      lines.some((l) => /Pushed|digest: sha256:/.test(l)),
      `progress was followed: ${lines.join(' | ')}`,
    );
  });

  it('uses the auth of the Docker config; without it the 401 names image and registry', async () => {
    const reg = await startRegistryDouble({ basicAuth: { username: 'lab', password: 's3cret' } });
    registries.push(reg);
    const full = `${reg.host}/${LOCAL}`;
    pushedTags.push(full);
    const noAuth = { HOME: mkdtempSync(join(tmpdir(), 'hl-home-')) };
    await assert.rejects(pushImages(docker, [LOCAL], reg.host, { env: noAuth }), (err: Error) => {
      assert.match(
        err.message,
        new RegExp(`^pushing image ${LOCAL} as ${full.replace(/[.]/g, '\\.')} to registry ${reg.host.replace(/[.]/g, '\\.')} failed: `),
      );
      return true;
    });
    assert.equal(reg.manifests.length, 0);
    const cfg = mkdtempSync(join(tmpdir(), 'hl-dockercfg-'));
    mkdirSync(cfg, { recursive: true });
    writeFileSync(
      join(cfg, 'config.json'),
      JSON.stringify({ auths: { [reg.host]: { auth: Buffer.from('lab:s3cret').toString('base64') } } }),
    );
    const env = { DOCKER_CONFIG: cfg };
    assert.deepEqual(registryAuth(reg.host, env), { username: 'lab', password: 's3cret', serveraddress: reg.host });
    await pushImages(docker, [LOCAL], reg.host, { env });
    assert.ok(reg.manifest('harness-lab/push-test', String(process.pid)), 'pushed with the config auth');
    assert.ok(reg.requests.some((r) => r.authorized && r.method === 'PUT' && r.path.includes('/manifests/')));
  });

  it('a proxy image only the local daemon has is pushed too and referenced from the registry', async () => {
    const reg = await startRegistryDouble();
    registries.push(reg);
    const full = `${reg.host}/${LOCAL}`;
    pushedTags.push(full);
    const proxy = await pushedProxy(docker, { image: LOCAL, command: ['harness-lab'] }, reg.host);
    assert.deepEqual(proxy, { image: full, command: ['harness-lab'] });
    assert.ok(reg.manifest('harness-lab/push-test', String(process.pid)));
    // Already under the registry, or not a local image: referenced as given, nothing pushed.
    const n = reg.requests.length;
    assert.equal((await pushedProxy(docker, { image: full }, reg.host)).image, full);
    assert.equal((await pushedProxy(docker, { image: 'harness-lab/not-here:1' }, reg.host)).image, 'harness-lab/not-here:1');
    assert.equal(reg.requests.length, n);
  });

  it('batch open: a failed push fails before any Job (or anything else) is created in the cluster', async () => {
    const cluster = await testCluster();
    try {
      const task = taskCopy('hello-file', {});
      const m = manifestFor({
        batchId: 'b-push',
        namespace: 'default',
        tasks: [task],
        harness: 'react',
        engineUrl: 'http://127.0.0.1:9/v1',
        model: 'm',
        timeoutSec: 60,
      });
      // Port 1 on loopback: nothing listens, the push cannot succeed.
      m.k8s = { ...m.k8s!, registry: '127.0.0.1:1' };
      const prev = process.env.KUBECONFIG;
      process.env.KUBECONFIG = cluster.kubeconfig;
      try {
        await assert.rejects(
          k8sBackendModule.open({ manifest: m, batchDir: mkdtempSync(join(tmpdir(), 'hl-push-batch-')), log: () => {} }),
          (err: Error) =>
            /^pushing image harness-lab\/task-hello-file:[0-9a-f]+ as 127\.0\.0\.1:1\/harness-lab\/task-hello-file:[0-9a-f]+ to registry 127\.0\.0\.1:1 failed: /.test(
              err.message,
            ),
        );
      } finally {
        if (prev === undefined) delete process.env.KUBECONFIG;
        else process.env.KUBECONFIG = prev;
      }
      assert.equal(cluster.api.received.filter((r) => r.method !== 'GET').length, 0, 'nothing was created');
      const tags = (await docker.listImages({ filters: JSON.stringify({ reference: ['127.0.0.1:1/harness-lab/*'] }) })).flatMap(
        (i) => i.RepoTags ?? [],
      );
      pushedTags.push(...tags);
    } finally {
      await cluster.close();
    }
  });
});
