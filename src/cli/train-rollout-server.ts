// `train submit` with `data: {source: rollout-server, serve: ...}`: the rollout server's manifests
// planned here (task images built and pushed first, as `batch submit --backend k8s` does), then
// deployed before the trainer; `train status` and `train cancel` follow and remove it with the run.
import type * as k8s from '@kubernetes/client-node';
import type { Cluster } from '../cluster/kube.js';
import type { ServeSpec } from '../training/trainer-jobs.js';

export interface PlannedServer {
  objects: (k8s.KubernetesObject & Record<string, unknown>)[];
  record: { name: string; url: string; splits: string[] };
}

/**
 * The server's objects for run `name`. `build`: build the task images with Docker and push them (and
 * a lab image that exists only here) to the spec's registry; otherwise (--dry-run) the tags a build
 * would give, and the admin key shown as a placeholder.
 */
export async function planRolloutServer(
  spec: ServeSpec,
  configFile: string,
  name: string,
  namespace: string,
  opts: { build: boolean; log: (line: string) => void },
): Promise<PlannedServer> {
  const rs = await import('../training/rollout-server.js');
  const images = await import('../batch/backends/k8s/images.js');
  const splits = rs.loadSplits(spec, configFile);
  const tasks = splits.flatMap((s) => s.tasks);
  let taskImages = await images.taskImageTags(tasks, opts.build, opts.log);
  // The lab's image: the spec's, else HARNESS_LAB_K8S_PROXY_IMAGE, else built from this CLI (and pushed).
  const imageEnv = spec.image ? { ...process.env, HARNESS_LAB_K8S_PROXY_IMAGE: spec.image } : process.env;
  const registry = spec.registry ?? null;
  const image = opts.build ? await images.readyLabImage(registry, opts.log, imageEnv) : images.defaultLabImage(registry, imageEnv);
  if (registry) {
    if (opts.build) {
      const { connectDocker } = await import('../sandbox/docker-client.js');
      const { pushImages } = await import('../cluster/registry-push.js');
      const pushed = await pushImages(await connectDocker(), [...taskImages.values()], registry, { log: opts.log });
      taskImages = new Map([...taskImages].map(([t, local]) => [t, pushed.get(local) ?? local]));
    } else taskImages = new Map([...taskImages].map(([t, local]) => [t, images.clusterImage(local, registry)]));
  }
  const objects = rs.rolloutServerManifests({
    run: name,
    namespace,
    spec,
    splits,
    image,
    taskImages,
    adminKey: opts.build ? rs.newAdminKey() : '<generated at submit>',
  });
  return { objects, record: { name: rs.serveName(name), url: rs.rolloutServerUrl(name, namespace), splits: splits.map((s) => s.name) } };
}

/** One line on the run's rollout server: its health and, once ready, what it has done. */
export async function describeRolloutServer(cluster: Cluster, run: string): Promise<{ line: string; json: Record<string, unknown> }> {
  const rs = await import('../training/rollout-server.js');
  const health = await rs.rolloutServerHealth(cluster, run);
  let progress: Awaited<ReturnType<typeof rs.rolloutServerProgress>> | undefined;
  let error: string | undefined;
  if (health.state === 'Ready' && health.pod)
    progress = await rs.rolloutServerProgress(cluster, run, health.pod).catch((err: unknown) => {
      error = (err as Error).message;
      return undefined;
    });
  const parts = [`rollout server ${rs.serveName(run)}: ${health.state} (${health.detail})`];
  if (progress) {
    const classes = Object.entries(progress.rollouts)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ');
    const causes = Object.entries(progress.causes)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ');
    parts.push(
      `${progress.done} rollout(s) done${classes ? ` (${classes})` : ''}, ${progress.running} running`,
      `infra-failed ${(progress.infraFailedRate * 100).toFixed(1)}%${causes ? ` (${causes})` : ''}`,
      progress.rewardMean === null ? 'no reward yet' : `reward mean ${progress.rewardMean.toFixed(3)} over ${progress.scored}`,
      `breaker ${progress.breaker}`,
    );
  } else if (error) parts.push(`its /metrics could not be read: ${error}`);
  return { line: parts.join('; '), json: { ...health, ...(progress ? { progress } : {}), ...(error ? { error } : {}) } };
}
