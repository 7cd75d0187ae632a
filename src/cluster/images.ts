// The images a cluster runs, shared by a cluster batch (src/batch/backends/k8s) and the rollout
// server a training run deploys (src/training): each task's image tag as `harness-lab rollout` builds
// it, where the cluster pulls an image from (a registry, or this machine's tags for the test double),
// and the lab's own image (src/cluster/lab-image.ts) named, built or pushed for the cluster.
import { readFileSync } from 'node:fs';
import type Docker from 'dockerode';
import { connectDocker } from '../sandbox/docker-client.js';
import { DockerRuntime, dockerfileBases, taskImageTag } from '../sandbox/docker.js';
import { BASE_IMAGE } from '../sandbox/images.js';
import { loadTask } from '../tasks/task.js';
import { LAB_IMAGE, ensureLabImage } from './lab-image.js';
import type { ProxyInput } from './manifests.js';
import { pushImages } from './registry-push.js';

/** The in-cluster proxy's image and how to start harness-lab in it. */
export type ProxyImage = Pick<ProxyInput, 'image' | 'command' | 'volumes' | 'cpu' | 'memory'>;

/** `REG/harness-lab/task-x:hash` for a real cluster; the local tag for the test double (no registry). */
export function clusterImage(localTag: string, registry: string | null): string {
  return registry ? `${registry.replace(/\/+$/, '')}/${localTag}` : localTag;
}

/**
 * A proxy image that exists only in the local daemon (HARNESS_LAB_K8S_PROXY_IMAGE=a local tag) is
 * pushed to the registry too and referenced from there; one already under the registry, or unknown
 * locally, is referenced as given (the cluster pulls it).
 */
export async function pushedProxy(docker: Docker, proxy: ProxyImage, registry: string, log?: (line: string) => void): Promise<ProxyImage> {
  const underRegistry = proxy.image.startsWith(`${registry.replace(/\/+$/, '')}/`);
  const local = await docker
    .getImage(proxy.image)
    .inspect()
    .then(
      () => true,
      () => false,
    );
  if (underRegistry || !local) return proxy;
  const pushed = await pushImages(docker, [proxy.image], registry, { ...(log ? { log } : {}) });
  return { ...proxy, image: pushed.get(proxy.image)! };
}

/**
 * Each task's image tag as `harness-lab rollout` builds it (built here when Docker is reachable: it must
 * then be pushed to the registry); without Docker, the tag the build would have (base image ids unknown).
 */
export async function taskImageTags(
  tasks: readonly { dir: string }[],
  build: boolean,
  log?: (line: string) => void,
): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const runtime = await DockerRuntime.connect().catch(() => undefined);
  for (const ref of tasks) {
    const task = loadTask(ref.dir);
    if (runtime && build) out.set(task.name, await runtime.prepareImage(task, log));
    else if (!task.environment.dockerfile) out.set(task.name, task.environment.dockerImage ?? BASE_IMAGE);
    else {
      // The same tag prepareImage gives: the context hash over the local base images' ids, when Docker has them.
      const bases = dockerfileBases(readFileSync(task.environment.dockerfile, 'utf8')).filter((b) => !b.includes('$'));
      const ids = runtime
        ? await Promise.all(
            bases.map((b) =>
              runtime.docker
                .getImage(b)
                .inspect()
                .then(
                  (i) => i.Id,
                  () => undefined,
                ),
            ),
          )
        : [];
      const known = ids.filter((i): i is string => Boolean(i));
      out.set(task.name, taskImageTag(task.name, task.environment.contextDir, known.length === bases.length ? known : []));
    }
  }
  return out;
}

/** The lab's image as the cluster pulls it: HARNESS_LAB_K8S_PROXY_IMAGE, else LAB_IMAGE (under the registry, if any). */
export function defaultLabImage(registry: string | null, env: NodeJS.ProcessEnv = process.env): string {
  return env.HARNESS_LAB_K8S_PROXY_IMAGE || clusterImage(LAB_IMAGE, registry);
}

/**
 * The lab's image ready for the cluster, as a lab about to create objects needs it: one named by
 * HARNESS_LAB_K8S_PROXY_IMAGE is used as given (pushed when only the local daemon has it); otherwise
 * LAB_IMAGE is built from this CLI's bundle (kept when it holds the same bundle) and, with a registry,
 * pushed there. Without Docker the default name is used as it is (the cluster must have it).
 */
export async function readyLabImage(
  registry: string | null,
  log: (line: string) => void,
  env: NodeJS.ProcessEnv = process.env,
): Promise<string> {
  const named = env.HARNESS_LAB_K8S_PROXY_IMAGE;
  const docker = await connectDocker().catch(() => undefined);
  if (!docker) {
    log(`Docker is not reachable: the cluster must already have ${defaultLabImage(registry, env)}`);
    return defaultLabImage(registry, env);
  }
  const local = named || (await ensureLabImage(docker, { log })).image;
  if (!registry) return local;
  return (await pushedProxy(docker, { image: local, command: ['harness-lab'] }, registry, log)).image;
}
