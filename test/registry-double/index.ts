// A registry test double: the Docker Registry HTTP API v2 on 127.0.0.1 (plain HTTP, which the
// daemon allows for 127.0.0.0/8), enough for `docker push`: the /v2/ ping, blob uploads
// (POST, chunked PATCH, PUT with the digest checked), HEAD/GET blobs, PUT/GET/HEAD manifests (every
// blob a manifest names must have been uploaded). Optional Basic auth answers 401 with a challenge.
import { createHash, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RegistryDoubleOptions {
  /** Require HTTP Basic auth with these credentials. */
  basicAuth?: { username: string; password: string };
}

export interface StoredManifest {
  repo: string;
  reference: string;
  mediaType: string;
  digest: string;
  body: Buffer;
}

export class RegistryDouble {
  readonly blobs = new Map<string, Buffer>();
  readonly manifests: StoredManifest[] = [];
  readonly requests: { method: string; path: string; authorized: boolean }[] = [];
  private readonly uploads = new Map<string, Buffer[]>();
  private server: Server | undefined;
  host = '';

  constructor(private readonly opts: RegistryDoubleOptions = {}) {}

  async listen(): Promise<string> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        try {
          this.handle(req, res, Buffer.concat(chunks));
        } catch (err) {
          this.error(res, 500, 'UNKNOWN', (err as Error).message);
        }
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.host = `127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this.host;
  }

  async close(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  manifest(repo: string, reference: string): StoredManifest | undefined {
    return this.manifests.filter((m) => m.repo === repo && (m.reference === reference || m.digest === reference)).at(-1);
  }

  private error(res: ServerResponse, status: number, code: string, message: string, headers: Record<string, string> = {}): void {
    res.writeHead(status, { 'Content-Type': 'application/json', 'Docker-Distribution-API-Version': 'registry/2.0', ...headers });
    res.end(JSON.stringify({ errors: [{ code, message }] }));
  }

  private authorized(req: IncomingMessage): boolean {
    const want = this.opts.basicAuth;
    if (!want) return true;
    const m = /^Basic\s+(\S+)$/i.exec(req.headers.authorization ?? '');
    return Boolean(m && Buffer.from(m[1]!, 'base64').toString('utf8') === `${want.username}:${want.password}`);
  }

  private handle(req: IncomingMessage, res: ServerResponse, body: Buffer): void {
    const url = new URL(req.url ?? '/', `http://${this.host}`);
    const path = url.pathname;
    const method = req.method ?? 'GET';
    const ok = this.authorized(req);
    this.requests.push({ method, path, authorized: ok });
    const v2 = { 'Docker-Distribution-API-Version': 'registry/2.0' };
    if (!ok)
      return this.error(res, 401, 'UNAUTHORIZED', 'authentication required', { 'WWW-Authenticate': 'Basic realm="registry-double"' });
    if (path === '/v2/' || path === '/v2') {
      res.writeHead(200, { ...v2, 'Content-Type': 'application/json' });
      return void res.end('{}');
    }
    let m = /^\/v2\/(.+)\/blobs\/uploads\/([^/]*)$/.exec(path);
    if (m) {
      const [, repo, id] = m as unknown as [string, string, string];
      if (method === 'POST' && !id) {
        const digest = url.searchParams.get('digest');
        if (digest) return this.finish(res, repo, digest, [body]);
        const uuid = randomUUID();
        this.uploads.set(uuid, []);
        res.writeHead(202, {
          ...v2,
          Location: `/v2/${repo}/blobs/uploads/${uuid}`,
          Range: '0-0',
          'Docker-Upload-UUID': uuid,
          'Content-Length': '0',
        });
        return void res.end();
      }
      const parts = this.uploads.get(id);
      if (!parts) return this.error(res, 404, 'BLOB_UPLOAD_UNKNOWN', `upload ${id} is unknown`);
      if (body.length) parts.push(body);
      if (method === 'PATCH') {
        const size = parts.reduce((n, b) => n + b.length, 0);
        res.writeHead(202, {
          ...v2,
          Location: `/v2/${repo}/blobs/uploads/${id}`,
          Range: `0-${Math.max(0, size - 1)}`,
          'Docker-Upload-UUID': id,
          'Content-Length': '0',
        });
        return void res.end();
      }
      if (method === 'PUT') {
        this.uploads.delete(id);
        return this.finish(res, repo, url.searchParams.get('digest') ?? '', parts);
      }
      if (method === 'DELETE') {
        this.uploads.delete(id);
        res.writeHead(204, v2);
        return void res.end();
      }
    }
    m = /^\/v2\/(.+)\/blobs\/(sha256:[a-f0-9]{64})$/.exec(path);
    if (m && (method === 'HEAD' || method === 'GET')) {
      const blob = this.blobs.get(m[2]!);
      if (!blob) return this.error(res, 404, 'BLOB_UNKNOWN', `blob ${m[2]} is unknown`);
      res.writeHead(200, {
        ...v2,
        'Content-Length': String(blob.length),
        'Docker-Content-Digest': m[2]!,
        'Content-Type': 'application/octet-stream',
      });
      return void res.end(method === 'GET' ? blob : undefined);
    }
    m = /^\/v2\/(.+)\/manifests\/([^/]+)$/.exec(path);
    if (m) {
      const [, repo, reference] = m as unknown as [string, string, string];
      if (method === 'PUT') return this.putManifest(res, repo, reference, String(req.headers['content-type'] ?? ''), body);
      if (method === 'GET' || method === 'HEAD') {
        const found = this.manifest(repo, reference);
        if (!found) return this.error(res, 404, 'MANIFEST_UNKNOWN', `manifest ${repo}:${reference} is unknown`);
        res.writeHead(200, {
          ...v2,
          'Content-Type': found.mediaType,
          'Content-Length': String(found.body.length),
          'Docker-Content-Digest': found.digest,
        });
        return void res.end(method === 'GET' ? found.body : undefined);
      }
    }
    this.error(res, 404, 'UNSUPPORTED', `${method} ${path} is not served by the registry double`);
  }

  private finish(res: ServerResponse, repo: string, digest: string, parts: Buffer[]): void {
    const data = Buffer.concat(parts);
    const actual = `sha256:${createHash('sha256').update(data).digest('hex')}`;
    if (digest !== actual)
      return this.error(res, 400, 'DIGEST_INVALID', `provided digest ${digest || '(none)'} does not match the uploaded content ${actual}`);
    this.blobs.set(actual, data);
    res.writeHead(201, {
      'Docker-Distribution-API-Version': 'registry/2.0',
      Location: `/v2/${repo}/blobs/${actual}`,
      'Docker-Content-Digest': actual,
      'Content-Length': '0',
    });
    res.end();
  }

  private putManifest(res: ServerResponse, repo: string, reference: string, mediaType: string, body: Buffer): void {
    let doc: { config?: { digest?: string }; layers?: { digest?: string }[]; manifests?: { digest?: string }[] };
    try {
      doc = JSON.parse(body.toString('utf8')) as typeof doc;
    } catch {
      return this.error(res, 400, 'MANIFEST_INVALID', 'the manifest is not JSON');
    }
    const refs = [doc.config?.digest, ...(doc.layers ?? []).map((l) => l.digest)].filter((d): d is string => Boolean(d));
    const missing = refs.filter((d) => !this.blobs.has(d));
    if (missing.length) return this.error(res, 400, 'MANIFEST_BLOB_UNKNOWN', `blobs not uploaded: ${missing.join(', ')}`);
    const digest = `sha256:${createHash('sha256').update(body).digest('hex')}`;
    this.manifests.push({ repo, reference, mediaType, digest, body });
    res.writeHead(201, {
      'Docker-Distribution-API-Version': 'registry/2.0',
      Location: `/v2/${repo}/manifests/${digest}`,
      'Docker-Content-Digest': digest,
      'Content-Length': '0',
    });
    res.end();
  }
}

export async function startRegistryDouble(opts: RegistryDoubleOptions = {}): Promise<RegistryDouble> {
  const r = new RegistryDouble(opts);
  await r.listen();
  return r;
}
