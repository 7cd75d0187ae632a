// The lab's own container image, `harness-lab/harness-lab`: the offline node image
// (harness-lab/base-node, this machine's node on Debian bookworm) plus this CLI's bundle, with
// `harness-lab` on PATH. A cluster batch's capture proxy and the rollout server a training run deploys
// run it (`harness-lab proxy …`, `harness-lab serve …`). Built here, never pulled: the bundle's files
// are hashed, and an image already labelled with that hash is kept, so a submit that builds it costs
// one `docker image inspect` when nothing changed (a build is about 5 s, the bundle about 10 MB).
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type Docker from 'dockerode';
import { LABEL, followProgress } from '../sandbox/docker-client.js';
import { NODE_IMAGE, ensureBaseImages, tarDirectory } from '../sandbox/images.js';

export const LAB_IMAGE_REPO = 'harness-lab/harness-lab';
/** The tag a cluster batch and a training run use unless HARNESS_LAB_K8S_PROXY_IMAGE says otherwise. */
export const LAB_IMAGE = `${LAB_IMAGE_REPO}:latest`;
const BUNDLE_LABEL = 'harness-lab.bundle';

/** The bundle's files the image holds: the CLI, and what it starts from its own folder. */
const BUNDLE_FILES = ['cli.js', 'tokenizer-worker.js', 'react-harness.js'] as const;

export class LabImageError extends Error {}

/**
 * The folder holding this CLI's bundle: the running bundle's own (dist/), or, run from source (tsx),
 * the repository's dist/ that `npm run build` writes.
 */
export function labBundleDir(): string {
  const own = __filename.endsWith('.ts') ? resolve(__dirname, '..', '..', 'dist') : __dirname;
  if (!existsSync(join(own, 'cli.js')))
    throw new LabImageError(`the lab image is built from the CLI bundle, and ${join(own, 'cli.js')} does not exist: run \`npm run build\``);
  return own;
}

/** A short digest of the bundle's files (what makes two lab images the same). */
export function bundleDigest(dir: string): string {
  const h = createHash('sha256');
  for (const f of BUNDLE_FILES) {
    const p = join(dir, f);
    h.update(`${f}\0`);
    if (existsSync(p)) h.update(readFileSync(p));
  }
  h.update(`node ${process.version}`);
  return h.digest('hex').slice(0, 16);
}

export interface LabImageResult {
  /** The tag built or found (LAB_IMAGE unless asked for another). */
  image: string;
  action: 'present' | 'built';
  digest: string;
}

/**
 * Builds the lab image from `bundleDir` (default: this CLI's) as `tag` (default LAB_IMAGE), unless an
 * image with that tag already holds the same bundle. The node base image is built first when missing.
 */
export async function ensureLabImage(
  docker: Docker,
  opts: { tag?: string; bundleDir?: string; force?: boolean; log?: (line: string) => void } = {},
): Promise<LabImageResult> {
  const tag = opts.tag ?? LAB_IMAGE;
  const dir = opts.bundleDir ?? labBundleDir();
  const digest = bundleDigest(dir);
  const current = await docker
    .getImage(tag)
    .inspect()
    .then(
      (i) => i.Config?.Labels?.[BUNDLE_LABEL],
      () => undefined,
    );
  if (!opts.force && current === digest) return { image: tag, action: 'present', digest };
  await ensureBaseImages(docker, { ...(opts.log ? { log: opts.log } : {}) });
  const ctx = mkdtempSync(join(tmpdir(), 'harness-lab-lab-image-'));
  try {
    const files = BUNDLE_FILES.filter((f) => existsSync(join(dir, f)));
    for (const f of files) copyFileSync(join(dir, f), join(ctx, f));
    writeFileSync(join(ctx, 'harness-lab'), '#!/bin/sh\nexec node /opt/harness-lab/dist/cli.js "$@"\n', { mode: 0o755 });
    writeFileSync(
      join(ctx, 'Dockerfile'),
      [
        `FROM ${NODE_IMAGE}`,
        ...files.map((f) => `COPY ${f} /opt/harness-lab/dist/${f}`),
        'COPY harness-lab /usr/local/bin/harness-lab',
        `LABEL ${LABEL.kind}=lab ${BUNDLE_LABEL}=${digest}`,
        // No USER: the lab's pods set runAsUser themselves (Pod Security "restricted").
        'RUN harness-lab --help >/dev/null',
        '',
      ].join('\n'),
    );
    opts.log?.(`building ${tag} from ${dir} (bundle ${digest})`);
    await followProgress(docker, await docker.buildImage(tarDirectory(ctx), { t: tag, rm: true, forcerm: true }), opts.log);
  } catch (err) {
    throw new LabImageError(`could not build the lab image ${tag}: ${err instanceof Error ? err.message : String(err)}`);
  } finally {
    rmSync(ctx, { recursive: true, force: true });
  }
  return { image: tag, action: 'built', digest };
}
