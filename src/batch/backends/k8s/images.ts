// The images a cluster batch runs: the in-cluster proxy's image, where a pod finds its harness (baked
// into the image, or mounted from the node), and the task images a rollout server was given. Task
// image tags, registry names and the lab's image are src/cluster/images.ts's (re-exported here).
import { z } from 'zod';
import { defaultLabImage, type ProxyImage } from '../../../cluster/images.js';
import { ClusterError } from '../../../cluster/kube.js';
import type { HarnessSource } from '../../../cluster/manifests.js';
import { harnessCacheRoot } from '../../../harness/run-local.js';
import { ensureReactScript } from '../../../sandbox/react-script.js';
import type { BatchManifest } from '../../state.js';

// Shared with the rollout server a training run deploys (src/training), so they live in src/cluster.
export { clusterImage, defaultLabImage, pushedProxy, readyLabImage, taskImageTags, type ProxyImage } from '../../../cluster/images.js';

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
