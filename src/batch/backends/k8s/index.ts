// The Kubernetes backend (`--backend k8s`), loaded lazily by ../index.ts: what the batch runner opens,
// cleans up, preflights and dry-runs. The pieces: job.ts (Job manifests and reading how a Job ended),
// images.ts (task and proxy images, pushes), proxy.ts + mirror.ts (the in-cluster capture proxy and
// the mirror of its sessions into the batch directory), backend.ts (K8sBackend, one attempt = one Job).
import { ClusterError, assertPermissions, checkReachable, loadCluster } from '../../../cluster/kube.js';
import { formatManifests } from '../../../cluster/manifests.js';
import type { BackendModule } from '../../backend.js';
import { K8S_PERMISSIONS, K8sBackend, deleteBatchJobs, k8sDryRunManifests, reapStaleJobs, teardownBatch } from './backend.js';
import { defaultProxy, harnessFromEnv, readyClusterImages, taskImageTags, taskImagesFromEnv } from './images.js';
import { target } from './job.js';

export {
  LAB_INSTANCE,
  OWNER_LABEL,
  reapStaleJobs,
  K8S_PERMISSIONS,
  K8sBackend,
  deleteBatchJobs,
  k8sDryRunManifests,
  teardownBatch,
  type K8sBackendOptions,
} from './backend.js';
export {
  clusterImage,
  defaultLabImage,
  defaultProxy,
  harnessFromEnv,
  pushedProxy,
  readyClusterImages,
  readyLabImage,
  taskImageTags,
  type ProxyImage,
} from './images.js';
export { K8sCapture } from './proxy.js';

/** What src/batch/backends/index.ts loads for `--backend k8s`. */
export const k8sBackendModule: BackendModule = {
  async open(ctx) {
    // A server a training run deployed is given its task images (built and pushed by the lab that deployed it).
    const given = taskImagesFromEnv();
    const images = given ?? (await taskImageTags(ctx.manifest.tasks, true, ctx.log));
    const reg = ctx.manifest.k8s?.registry;
    // Built and pushed before anything is created in the cluster: a failed push fails the batch with no Job made.
    let proxy = defaultProxy(ctx.manifest);
    // The Jobs name each task image under the registry themselves (job.ts: clusterImage).
    if (!given) proxy = { ...proxy, image: (await readyClusterImages(images.values(), reg ?? null, ctx.log)).labImage };
    const backend = await K8sBackend.open({
      manifest: ctx.manifest,
      batchDir: ctx.batchDir,
      taskImage: (t) => {
        const image = images.get(t.name);
        if (!image) throw new ClusterError(`task ${t.name} has no image in HARNESS_LAB_K8S_TASK_IMAGES (the run deployed other tasks)`);
        return image;
      },
      proxy,
      ...(await harnessFromEnv()),
      ...(ctx.engineApiKey ? { engineApiKey: ctx.engineApiKey } : {}),
      log: ctx.log,
    });
    return { backend, capture: backend.capture };
  },
  async cleanup(manifest, log, opts) {
    const cluster = loadCluster(target(manifest));
    await checkReachable(cluster);
    const removed = await deleteBatchJobs(cluster, cluster.namespace, manifest.batch_id);
    if (removed.length)
      log(
        `deleted ${removed.length} Job(s) of batch ${manifest.batch_id} in ${cluster.namespace} (propagationPolicy Background): ${removed.join(', ')}`,
      );
    // A finished batch needs its proxy no more (its sessions were mirrored into the batch directory);
    // an unfinished one keeps it, so a resume finds its sessions and admin key.
    if (opts?.finished) {
      await teardownBatch(cluster, manifest.batch_id);
      log(`removed the capture proxy and ConfigMaps of finished batch ${manifest.batch_id} in ${cluster.namespace}`);
    }
    return removed;
  },
  async reapStale(manifest) {
    const cluster = loadCluster(target(manifest));
    return reapStaleJobs(cluster, manifest.batch_id);
  },
  async preflight(k8s) {
    const cluster = loadCluster({ context: k8s?.context ?? null, namespace: k8s?.namespace ?? 'default' });
    await checkReachable(cluster);
    await assertPermissions(cluster, K8S_PERMISSIONS);
  },
  async dryRun(plan, format) {
    const images = await taskImageTags(plan.manifest.tasks, false);
    const objs = await k8sDryRunManifests({
      manifest: plan.manifest,
      taskImage: (t) => images.get(t.name)!,
      proxy: defaultProxy(plan.manifest),
    });
    return formatManifests(objs, format);
  },
};
