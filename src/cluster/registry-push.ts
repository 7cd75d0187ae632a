// Pushing the task images of a cluster batch to `--registry REG` through the Docker daemon
// (dockerode), so the cluster's nodes pull `REG/<name>:<tag>`. Credentials come from the user's
// Docker config (`$DOCKER_CONFIG/config.json` or `~/.docker/config.json`, `auths` entries); a
// credential helper (credsStore / credHelpers) is not run here, so the daemon then pushes without
// auth and the registry's 401 is reported.
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type Docker from 'dockerode';
import { z } from 'zod';
import { followProgress } from '../sandbox/docker-client.js';
import { ClusterError } from './kube.js';

export interface RegistryAuth {
  username?: string;
  password?: string;
  identitytoken?: string;
  serveraddress: string;
}

const DockerConfigSchema = z.object({
  auths: z
    .record(
      z.string(),
      z.object({
        auth: z.string().optional(),
        identitytoken: z.string().optional(),
        username: z.string().optional(),
        password: z.string().optional(),
      }),
    )
    .optional(),
  credsStore: z.string().optional(),
  credHelpers: z.record(z.string(), z.string()).optional(),
});

export function dockerConfigFile(env: NodeJS.ProcessEnv = process.env): string {
  return join(env.DOCKER_CONFIG || join(env.HOME || homedir(), '.docker'), 'config.json');
}

/** The registry host of `REG` (`host:port/some/prefix` -> `host:port`). */
export function registryHost(registry: string): string {
  return registry.replace(/^[a-z]+:\/\//i, '').split('/')[0]!;
}

/** The auth for a registry from the Docker config, if it has an `auths` entry for that host. */
export function registryAuth(
  registry: string,
  env: NodeJS.ProcessEnv = process.env,
  log?: (line: string) => void,
): RegistryAuth | undefined {
  const file = dockerConfigFile(env);
  if (!existsSync(file)) return undefined;
  let parsed: z.infer<typeof DockerConfigSchema>;
  try {
    parsed = DockerConfigSchema.parse(JSON.parse(readFileSync(file, 'utf8')));
  } catch (err) {
    throw new ClusterError(
      `${file}: not a Docker config file (${err instanceof z.ZodError ? err.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ') : (err as Error).message})`,
    );
  }
  const host = registryHost(registry);
  const entry = Object.entries(parsed.auths ?? {}).find(([k]) => registryHost(k) === host)?.[1];
  if (!entry) {
    if (parsed.credHelpers?.[host] || parsed.credsStore)
      log?.(`${file}: credentials for ${host} are in a credential helper, which the lab does not run; pushing without auth`);
    return undefined;
  }
  if (entry.identitytoken) return { identitytoken: entry.identitytoken, serveraddress: host };
  if (entry.auth) {
    const plain = Buffer.from(entry.auth, 'base64').toString('utf8');
    const colon = plain.indexOf(':');
    if (colon < 0) throw new ClusterError(`${file}: auths["${host}"].auth is not base64 of "user:password"`);
    return { username: plain.slice(0, colon), password: plain.slice(colon + 1), serveraddress: host };
  }
  if (entry.username && entry.password) return { username: entry.username, password: entry.password, serveraddress: host };
  return undefined;
}

/** `REG/<name>:<tag>` for a local tag (no tag: `latest`). */
export function registryTag(localTag: string, registry: string): { repo: string; tag: string; full: string } {
  const slash = localTag.lastIndexOf('/');
  const colon = localTag.lastIndexOf(':');
  const [name, tag] = colon > slash ? [localTag.slice(0, colon), localTag.slice(colon + 1)] : [localTag, 'latest'];
  const repo = `${registry.replace(/^[a-z]+:\/\//i, '').replace(/\/+$/, '')}/${name}`;
  return { repo, tag, full: `${repo}:${tag}` };
}

/**
 * Tags each local image as `REG/<name>:<tag>` and pushes it, following the daemon's progress; the
 * first failure names the image and the registry. Returns local tag -> pushed reference.
 */
export async function pushImages(
  docker: Docker,
  localTags: string[],
  registry: string,
  opts: { env?: NodeJS.ProcessEnv; log?: (line: string) => void } = {},
): Promise<Map<string, string>> {
  const auth = registryAuth(registry, opts.env, opts.log);
  const out = new Map<string, string>();
  for (const local of [...new Set(localTags)]) {
    const { repo, tag, full } = registryTag(local, registry);
    try {
      await docker.getImage(local).tag({ repo, tag });
      const stream = (await docker.getImage(repo).push({ tag, ...(auth ? { authconfig: auth } : {}) })) as NodeJS.ReadableStream;
      let last = '';
      await followProgress(docker, stream, (line) => {
        // Per-layer byte counts repeat many times a second; log each status change once.
        if (line !== last) opts.log?.(`push ${full}: ${line}`);
        last = line;
      });
    } catch (err) {
      throw new ClusterError(`pushing image ${local} as ${full} to registry ${registry} failed: ${(err as Error).message}`);
    }
    opts.log?.(`pushed ${full}`);
    out.set(local, full);
  }
  return out;
}
