// The lab's own image (src/cluster/lab-image.ts), built as `harness-lab images --lab` builds it and as a
// cluster batch or a training run builds it when no image is named: the node image plus this CLI's
// bundle, `harness-lab` on PATH inside; kept when it already holds the same bundle; pushed to a
// registry (the Registry API v2 double) as REG/harness-lab/harness-lab:latest with `--registry`.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type Docker from 'dockerode';
import { readyLabImage } from '../../src/batch/backends/k8s/index.js';
import { LAB_IMAGE, bundleDigest, labBundleDir } from '../../src/cluster/lab-image.js';
import { startRegistryDouble, type RegistryDouble } from '../registry-double/index.js';
import { cli, dockerReady } from './sandbox-fixtures.js';

describe('the lab image', { timeout: 600_000 }, () => {
  let docker: Docker;
  let registry: RegistryDouble | undefined;
  const pushed: string[] = [];

  before(async () => {
    docker = await dockerReady();
  });

  after(async () => {
    for (const t of pushed)
      await docker
        .getImage(t)
        .remove({ force: true })
        .catch(() => undefined);
    await registry?.close();
  });

  it('images --lab builds it from the CLI bundle; harness-lab runs inside; a second run keeps it', async () => {
    const first = await cli(['images', '--lab']);
    assert.equal(first.code, 0, first.stderr);
    const digest = bundleDigest(labBundleDir());
    assert.match(first.stdout, new RegExp(`^${LAB_IMAGE}: (built|present) \\(bundle ${digest}, `));
    const info = await docker.getImage(LAB_IMAGE).inspect();
    assert.equal(info.Config?.Labels?.['harness-lab.bundle'], digest);
    assert.equal(info.Config?.Labels?.['harness-lab.kind'], 'lab');
    const run = await docker.run(LAB_IMAGE, ['harness-lab', '--help'], process.stdout, { HostConfig: { AutoRemove: true } });
    assert.equal((run[0] as { StatusCode: number }).StatusCode, 0);
    const again = await cli(['images', '--lab']);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, new RegExp(`^${LAB_IMAGE}: present \\(bundle ${digest}, `));
  });

  it('--registry pushes it as REG/harness-lab/harness-lab:latest; --registry alone is a usage error', async () => {
    registry = await startRegistryDouble();
    const home = { HOME: mkdtempSync(join(tmpdir(), 'hl-home-')) };
    const r = await cli(['images', '--lab', '--registry', registry.host], { env: home });
    assert.equal(r.code, 0, r.stderr);
    const full = `${registry.host}/${LAB_IMAGE}`;
    pushed.push(full);
    assert.match(r.stdout, new RegExp(`^pushed ${full.replace(/[.]/g, '\\.')}$`, 'm'));
    const manifest = registry.manifest('harness-lab/harness-lab', 'latest');
    assert.ok(manifest, 'the registry holds the manifest');
    const doc = JSON.parse(manifest.body.toString('utf8')) as { config: { digest: string } };
    assert.equal(doc.config.digest, (await docker.getImage(LAB_IMAGE).inspect()).Id, 'the pushed config is the local lab image');
    const alone = await cli(['images', '--registry', registry.host]);
    assert.equal(alone.code, 2);
    assert.match(alone.stderr, /--registry goes with --lab/);
  });

  it('what a cluster batch uses: the lab image unless HARNESS_LAB_K8S_PROXY_IMAGE names one; pushed under a registry', async () => {
    const log: string[] = [];
    assert.equal(await readyLabImage(null, (l) => log.push(l), {}), LAB_IMAGE);
    assert.equal(await readyLabImage(null, (l) => log.push(l), { HARNESS_LAB_K8S_PROXY_IMAGE: 'example/own:1' }), 'example/own:1');
    const home = mkdtempSync(join(tmpdir(), 'hl-home-'));
    const prev = process.env.HOME;
    process.env.HOME = home;
    try {
      assert.equal(await readyLabImage(registry!.host, (l) => log.push(l), {}), `${registry!.host}/${LAB_IMAGE}`);
    } finally {
      process.env.HOME = prev;
    }
  });
});
