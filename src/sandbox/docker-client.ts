// One place that opens the Docker Engine API and turns "cannot connect" into an error that says what
// to do. dockerode honours DOCKER_HOST; Docker contexts are not read (vscode-extension.md 6.1).
import Docker from 'dockerode';

export class DockerUnavailableError extends Error {}

export const LABEL = {
  kind: 'harness-lab.kind',
  session: 'harness-lab.session',
  task: 'harness-lab.task',
  harness: 'harness-lab.harness',
  owner: 'harness-lab.owner',
  batch: 'harness-lab.batch',
  group: 'harness-lab.group',
  rollout: 'harness-lab.rollout',
} as const;

export function dockerEndpoint(env: NodeJS.ProcessEnv = process.env): string {
  return env.DOCKER_HOST || 'unix:///var/run/docker.sock';
}

/** A connected client, or DockerUnavailableError naming the endpoint and how to start Docker. */
export async function connectDocker(env: NodeJS.ProcessEnv = process.env): Promise<Docker> {
  const docker = new Docker();
  try {
    await Promise.race([
      docker.ping(),
      new Promise((_r, reject) => setTimeout(() => reject(new Error('no answer within 5 s')), 5000).unref()),
    ]);
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    throw new DockerUnavailableError(
      `Docker is not reachable at ${dockerEndpoint(env)} (${why}). Start the Docker daemon (e.g. \`nohup dockerd > /tmp/dockerd.log 2>&1 &\`, then check \`docker info\`), ` +
        'set DOCKER_HOST to its socket, or run with --sandbox local.',
    );
  }
  return docker;
}

/** Waits for a build/import progress stream; rejects with the daemon's error line. */
export function followProgress(docker: Docker, stream: NodeJS.ReadableStream, onLine?: (line: string) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    docker.modem.followProgress(
      stream,
      (err: Error | null, output: { error?: string; errorDetail?: { message?: string } }[]) => {
        if (err) return reject(err);
        const failed = output.find((o) => o.error || o.errorDetail);
        if (failed) return reject(new Error(failed.errorDetail?.message ?? failed.error));
        resolve();
      },
      (event: { stream?: string; status?: string }) => {
        const line = (event.stream ?? event.status ?? '').trimEnd();
        if (line && onLine) onLine(line);
      },
    );
  });
}

export async function imageExists(docker: Docker, tag: string): Promise<boolean> {
  try {
    await docker.getImage(tag).inspect();
    return true;
  } catch {
    return false;
  }
}
