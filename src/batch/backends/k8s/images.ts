// The images a cluster batch runs: each task's image tag as `harness-lab rollout` builds it, the
// in-cluster proxy's image, where a pod finds its harness (baked into the image, or mounted from the
// node), and pushing images that exist only in the local daemon to the batch's registry.
import { readFileSync } from 'node:fs';
import type Docker from 'dockerode';
import { z } from 'zod';
import { ClusterError } from '../../../cluster/kube.js';
import type { HarnessSource, ProxyInput } from '../../../cluster/manifests.js';
import { LAB_IMAGE, ensureLabImage } from '../../../cluster/lab-image.js';
import { pushImages } from '../../../cluster/registry-push.js';
import { connectDocker } from '../../../sandbox/docker-client.js';
import { harnessCacheRoot } from '../../../harness/run-local.js';
import { DockerRuntime, dockerfileBases, taskImageTag } from '../../../sandbox/docker.js';
import { BASE_IMAGE } from '../../../sandbox/images.js';
import { ensureReactScript } from '../../../sandbox/react-script.js';
import { loadTask } from '../../../tasks/task.js';
import type { BatchManifest } from '../../state.js';

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
 * HARNESS_LAB_K8S_HARNESS_FROM=hostPath: the pods mount this machine's node binary, harness cache and
 * reference harness from the node (the test double, or kind with extraMounts of the same paths);
 * otherwise the harness must be baked into the task image (real clusters).
 */
export async function harnessFromEnv(env: NodeJS.ProcessEnv = process.env): Promise<{ harnessFrom?: HarnessSource }> {
  const v = env.HARNESS_LAB_K8S_HARNESS_FROM;
  if (!v || v === 'image') return {};
  if (v !== 'hostPath') throw new ClusterError(`HARNESS_LAB_K8S_HARNESS_FROM=${v}: expected image or hostPath`);
  return {
    harnessFrom: {
      kind: 'hostPath',
      // A lab running in a pod (a run's rollout server) names the node's paths, not its own.
      nodeBinary: env.HARNESS_LAB_K8S_NODE_BINARY || process.execPath,
      harnessCache: env.HARNESS_LAB_K8S_HARNESS_CACHE || harnessCacheRoot(env),
      reactScript: env.HARNESS_LAB_K8S_REACT_SCRIPT || (await ensureReactScript()),
    },
  };
}

/** The proxy image of a cluster batch: HARNESS_LAB_K8S_PROXY_IMAGE, else the lab's image under the registry. */
export function defaultProxy(manifest: BatchManifest, env: NodeJS.ProcessEnv = process.env): ProxyImage {
  return { image: defaultLabImage(manifest.k8s?.registry ?? null, env), command: ['harness-lab'] };
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

const TaskImagesSchema = z.record(z.string().min(1), z.string().min(1));

/** HARNESS_LAB_K8S_TASK_IMAGES: `{"task": "image", ...}` as the cluster pulls them (set on a rollout server a run deploys). */
export function taskImagesFromEnv(env: NodeJS.ProcessEnv = process.env): Map<string, string> | undefined {
  const text = env.HARNESS_LAB_K8S_TASK_IMAGES;
  if (!text) return undefined;
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw new ClusterError('HARNESS_LAB_K8S_TASK_IMAGES is not JSON: expected {"task": "image", ...}');
  }
  const r = TaskImagesSchema.safeParse(raw);
  if (!r.success) throw new ClusterError('HARNESS_LAB_K8S_TASK_IMAGES: expected {"task": "image", ...} (strings)');
  return new Map(Object.entries(r.data));
}
