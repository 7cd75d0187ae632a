// Base images built offline (sandbox-images.md): a minimal Debian from debootstrap imported into
// Docker, and a variant with the host's Node binary for tasks that need node inside the image.
// Harness CLIs are not baked in: they are bind-mounted read-only from the host's harness cache.
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import type Docker from 'dockerode';
import { LABEL, followProgress, imageExists } from './docker-client.js';

export const BASE_IMAGE = 'harness-lab/base:bookworm';
export const NODE_IMAGE = 'harness-lab/base-node:bookworm';
const SUITE = 'bookworm';
const PATH_ENV = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export interface ImagesOptions {
  /** Debian mirror for debootstrap; default: the host's apt source. */
  mirror?: string;
  cacheDir?: string;
  /** Rebuild even when the tag exists. */
  force?: boolean;
  log?: (line: string) => void;
}

export interface ImageResult {
  tag: string;
  action: 'present' | 'imported' | 'built';
  ms: number;
}

export function imageCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  return join(env.XDG_CACHE_HOME || join(env.HOME || homedir(), '.cache'), 'harness-lab', 'images');
}

/** The first `URIs:` of the host's Debian apt source (deb822 or the one-line format). */
export function hostDebianMirror(): string {
  const deb822 = '/etc/apt/sources.list.d/debian.sources';
  if (existsSync(deb822)) {
    const m = /^URIs:\s*(\S+)/m.exec(readFileSync(deb822, 'utf8'));
    if (m) return m[1]!;
  }
  if (existsSync('/etc/apt/sources.list')) {
    const m = /^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+bookworm\s/m.exec(readFileSync('/etc/apt/sources.list', 'utf8'));
    if (m) return m[1]!;
  }
  return 'http://deb.debian.org/debian';
}

function run(cmd: string, args: string[], log?: (line: string) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let tail = '';
    const onData = (b: Buffer) => {
      tail = (tail + b.toString('utf8')).slice(-4000);
      for (const line of b.toString('utf8').split('\n')) if (line.trim()) log?.(line.trimEnd());
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('error', (err) => reject(new Error(`${cmd}: ${err.message}`)));
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`${cmd} ${args.join(' ')} exited with ${code}:\n${tail}`))));
  });
}

/** A tar stream of a directory's contents (GNU tar, always present where Docker is). */
export function tarDirectory(dir: string): NodeJS.ReadableStream {
  const child = spawn('tar', ['-C', dir, '-c', '.'], { stdio: ['ignore', 'pipe', 'inherit'] });
  return child.stdout;
}

/** The cached root filesystem tarball, when an earlier build left one (then no debootstrap, no root). */
export function cachedRootfs(cacheDir = imageCacheDir()): string | undefined {
  const tarball = join(cacheDir, `${SUITE}-minbase.tar`);
  return existsSync(tarball) && statSync(tarball).size > 0 ? tarball : undefined;
}

/** debootstrap once, then keep the root filesystem as a tarball so later imports take seconds. */
async function rootfsTarball(opts: ImagesOptions): Promise<string> {
  const cache = opts.cacheDir ?? imageCacheDir();
  const tarball = join(cache, `${SUITE}-minbase.tar`);
  if (cachedRootfs(cache) && !opts.force) return tarball;
  if (spawnSync('which', ['debootstrap']).status !== 0) {
    throw new Error(
      'debootstrap is not installed; install it with `apt-get install -y debootstrap` (the base image is built from Debian packages, no registry is needed)',
    );
  }
  if (process.getuid?.() !== 0)
    throw new Error(
      'building the base root filesystem needs root (debootstrap); run `harness-lab images` as root once, later runs reuse the cached tarball',
    );
  mkdirSync(cache, { recursive: true });
  const work = mkdtempSync(join(tmpdir(), 'harness-lab-rootfs-'));
  const rootfs = join(work, 'rootfs');
  try {
    const mirror = opts.mirror ?? hostDebianMirror();
    opts.log?.(`debootstrap --variant=minbase ${SUITE} from ${mirror} (about a minute on a good mirror)`);
    await run('debootstrap', ['--variant=minbase', SUITE, rootfs, mirror], opts.log);
    // apt lists and caches are rebuilt on demand; they only make the image bigger.
    rmSync(join(rootfs, 'var/cache/apt/archives'), { recursive: true, force: true });
    mkdirSync(join(rootfs, 'var/cache/apt/archives/partial'), { recursive: true });
    await run('tar', ['-C', rootfs, '-cf', `${tarball}.part`, '.']);
    renameSync(`${tarball}.part`, tarball);
    return tarball;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

export async function ensureBaseImage(docker: Docker, opts: ImagesOptions = {}): Promise<ImageResult> {
  const t0 = Date.now();
  if (!opts.force && (await imageExists(docker, BASE_IMAGE))) return { tag: BASE_IMAGE, action: 'present', ms: Date.now() - t0 };
  const tarball = await rootfsTarball(opts);
  opts.log?.(`importing ${tarball} as ${BASE_IMAGE}`);
  const [repo, tag] = BASE_IMAGE.split(':') as [string, string];
  const { createReadStream } = await import('node:fs');
  const stream = await docker.importImage(createReadStream(tarball), {
    repo,
    tag,
    changes: [`ENV ${PATH_ENV}`, `LABEL ${LABEL.kind}=base`, 'CMD ["bash"]'],
  } as object);
  await followProgress(docker, stream, opts.log);
  return { tag: BASE_IMAGE, action: 'imported', ms: Date.now() - t0 };
}

/** Whether the node image exists and carries this machine's node. */
async function nodeImageCurrent(docker: Docker): Promise<boolean> {
  if (!(await imageExists(docker, NODE_IMAGE))) return false;
  const info = await docker.getImage(NODE_IMAGE).inspect();
  return info.Config?.Labels?.['harness-lab.node'] === process.version;
}

/** Whether ensureBaseImages would leave both images alone (nothing to build). */
export async function baseImagesReady(docker: Docker): Promise<boolean> {
  return (await imageExists(docker, BASE_IMAGE)) && (await nodeImageCurrent(docker));
}

/** Base + the host's node binary (Debian 12 glibc node runs unchanged in the bookworm base). */
export async function ensureNodeImage(docker: Docker, opts: ImagesOptions = {}): Promise<ImageResult> {
  const t0 = Date.now();
  const version = process.version;
  if (!opts.force && (await nodeImageCurrent(docker))) return { tag: NODE_IMAGE, action: 'present', ms: Date.now() - t0 };
  const ctx = mkdtempSync(join(tmpdir(), 'harness-lab-node-image-'));
  try {
    copyFileSync(process.execPath, join(ctx, 'node'));
    writeFileSync(
      join(ctx, 'Dockerfile'),
      [
        `FROM ${BASE_IMAGE}`,
        'COPY node /usr/local/bin/node',
        `LABEL ${LABEL.kind}=base harness-lab.node=${version}`,
        'RUN node --version',
        '',
      ].join('\n'),
    );
    const stream = await docker.buildImage(tarDirectory(ctx), { t: NODE_IMAGE, rm: true, forcerm: true });
    await followProgress(docker, stream, opts.log);
  } finally {
    rmSync(ctx, { recursive: true, force: true });
  }
  return { tag: NODE_IMAGE, action: 'built', ms: Date.now() - t0 };
}

export async function ensureBaseImages(docker: Docker, opts: ImagesOptions = {}): Promise<ImageResult[]> {
  const base = await ensureBaseImage(docker, opts);
  const node = await ensureNodeImage(docker, { ...opts, force: opts.force || base.action !== 'present' });
  return [base, node];
}

/** Images the lab created for tasks (kind=task); base and lab images are kept unless `all`. */
export async function labImages(docker: Docker, all: boolean): Promise<{ id: string; tags: string[] }[]> {
  const kinds = all ? ['task', 'base', 'lab'] : ['task'];
  const out: { id: string; tags: string[] }[] = [];
  for (const kind of kinds) {
    const list = await docker.listImages({ filters: JSON.stringify({ label: [`${LABEL.kind}=${kind}`] }) });
    for (const img of list) out.push({ id: img.Id, tags: img.RepoTags ?? [] });
  }
  return out;
}
