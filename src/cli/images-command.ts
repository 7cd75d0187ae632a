// `harness-lab images`: builds the sandbox base images offline (debootstrap + docker import, then a
// Node variant), or removes the images the lab created.
import { connectDocker } from '../sandbox/docker-client.js';
import { BASE_IMAGE, NODE_IMAGE, ensureBaseImages, labImages } from '../sandbox/images.js';
import { LAB_IMAGE, ensureLabImage } from '../cluster/lab-image.js';
import { pushImages } from '../cluster/registry-push.js';
import { UsageError, defineCommand } from './args.js';

const USAGE = `usage: harness-lab images [--mirror URL] [--force] [--verbose]
       harness-lab images --lab [--registry REG] [--force]
       harness-lab images --prune [--all]

Builds ${BASE_IMAGE} (Debian minbase from debootstrap, imported into Docker; the root filesystem is
cached, so later builds take seconds) and ${NODE_IMAGE} (the base plus this machine's node binary).
Task Dockerfiles start FROM one of them; no image is ever pulled.

  --mirror URL   Debian mirror for debootstrap (default: the host's apt source)
  --force        rebuild even when the images exist
  --lab          build the lab's own image, ${LAB_IMAGE} (the node image + this CLI's bundle):
                 what a cluster batch's capture proxy and a training run's rollout server run
  --registry REG with --lab: push it as REG/${LAB_IMAGE} (auth from your Docker config)
  --prune        remove task images the lab built (--all: the base and lab images too)`;

export const imagesCommand = defineCommand({
  name: 'images',
  summary: 'build the offline sandbox base images (or --prune the lab images)',
  usage: USAGE,
  flags: {
    mirror: { type: 'string' },
    force: { type: 'boolean' },
    verbose: { type: 'boolean', short: 'v' },
    prune: { type: 'boolean' },
    lab: { type: 'boolean' },
    registry: { type: 'string' },
    all: { type: 'boolean' },
  },
  run: async ({ flags }) => {
    const docker = await connectDocker();
    if (flags.prune) {
      const images = await labImages(docker, flags.all);
      for (const img of images) {
        await docker
          .getImage(img.id)
          .remove({ force: true })
          .catch((err: unknown) => process.stderr.write(`could not remove ${img.tags.join(',') || img.id}: ${String(err)}\n`));
        process.stdout.write(`removed ${img.tags.join(', ') || img.id}\n`);
      }
      if (!images.length) process.stdout.write('no lab images to remove\n');
      return 0;
    }
    if (flags.registry && !flags.lab) throw new UsageError('--registry goes with --lab (the lab image is the one pushed)');
    if (flags.lab) {
      const log = flags.verbose ? (line: string) => process.stderr.write(`  ${line}\n`) : undefined;
      const t0 = Date.now();
      const lab = await ensureLabImage(docker, { force: flags.force, ...(log ? { log } : {}) });
      process.stdout.write(`${lab.image}: ${lab.action} (bundle ${lab.digest}, ${((Date.now() - t0) / 1000).toFixed(1)}s)\n`);
      if (flags.registry) {
        const pushed = await pushImages(docker, [lab.image], flags.registry, { log: log ?? (() => {}) });
        process.stdout.write(`pushed ${pushed.get(lab.image)}\n`);
      }
      return 0;
    }
    const results = await ensureBaseImages(docker, {
      mirror: flags.mirror,
      force: flags.force,
      log: flags.verbose ? (line) => process.stderr.write(`  ${line}\n`) : undefined,
    });
    for (const r of results) process.stdout.write(`${r.tag}: ${r.action} (${(r.ms / 1000).toFixed(1)}s)\n`);
    return 0;
  },
});
