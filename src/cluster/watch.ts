// One list + watch per batch and kind (Jobs, their pods, Events about Jobs), never a poll per Job: list with the
// batch's label selector, watch from the list's resourceVersion with bookmarks, resume from the last
// seen resourceVersion when the stream ends, and re-list when the server says 410 Gone.
import * as k8s from '@kubernetes/client-node';
import type { Cluster } from './kube.js';
import { clusterError } from './kube.js';

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED';

export interface WatchStats {
  lists: number;
  watches: number;
  expired: number;
  bookmarks: number;
}

/** What a watch lists and watches: one kind's collection path and its list call. */
export interface WatchKind<T> {
  path: (ns: string) => string;
  /** Which selector the watch's selector is (Events carry no labels: they are selected by field). */
  selectorParam?: 'labelSelector' | 'fieldSelector';
  list: (cluster: Cluster, ns: string, selector: string) => Promise<{ items: T[]; metadata?: { resourceVersion?: string } }>;
}

export const JOBS: WatchKind<k8s.V1Job> = {
  path: (ns) => `/apis/batch/v1/namespaces/${ns}/jobs`,
  list: (c, ns, labelSelector) => c.batch.listNamespacedJob({ namespace: ns, labelSelector }),
};
export const PODS: WatchKind<k8s.V1Pod> = {
  path: (ns) => `/api/v1/namespaces/${ns}/pods`,
  list: (c, ns, labelSelector) => c.core.listNamespacedPod({ namespace: ns, labelSelector }),
};

/** The namespace's Events about Jobs (the Job controller's FailedCreate says why a Job has no pod). */
export const JOB_EVENTS: WatchKind<k8s.CoreV1Event> = {
  path: (ns) => `/api/v1/namespaces/${ns}/events`,
  selectorParam: 'fieldSelector',
  list: (c, ns, fieldSelector) => c.core.listNamespacedEvent({ namespace: ns, fieldSelector }),
};

/** A cache of one kind's objects under one selector, kept current by a single watch. */
export class ObjectWatch<T extends k8s.KubernetesObject> {
  readonly objects = new Map<string, T>();
  readonly stats: WatchStats = { lists: 0, watches: 0, expired: 0, bookmarks: 0 };
  private resourceVersion = '';
  private controller: AbortController | undefined;
  private stopped = false;
  private retry: NodeJS.Timeout | undefined;
  private readonly listeners = new Set<(type: WatchEventType, obj: T) => void>();
  private readonly errorListeners = new Set<(err: Error) => void>();
  private readonly watch: k8s.Watch;

  constructor(
    private readonly cluster: Cluster,
    private readonly kind: WatchKind<T>,
    private readonly selector: string,
  ) {
    this.watch = new k8s.Watch(cluster.kc);
  }

  on(listener: (type: WatchEventType, obj: T) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  onError(listener: (err: Error) => void): () => void {
    this.errorListeners.add(listener);
    return () => this.errorListeners.delete(listener);
  }

  async start(): Promise<void> {
    await this.relist();
    await this.connect();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.retry);
    this.controller?.abort();
  }

  private emit(type: WatchEventType, obj: T): void {
    for (const l of [...this.listeners]) l(type, obj);
  }

  private async relist(): Promise<void> {
    const list = await this.kind.list(this.cluster, this.cluster.namespace, this.selector);
    this.stats.lists++;
    const seen = new Set<string>();
    for (const item of list.items) {
      const name = item.metadata!.name!;
      seen.add(name);
      const had = this.objects.has(name);
      this.objects.set(name, item);
      this.emit(had ? 'MODIFIED' : 'ADDED', item);
    }
    for (const [name, obj] of [...this.objects]) {
      if (seen.has(name)) continue;
      this.objects.delete(name);
      this.emit('DELETED', obj);
    }
    this.resourceVersion = list.metadata?.resourceVersion ?? '';
  }

  private async connect(): Promise<void> {
    if (this.stopped) return;
    this.stats.watches++;
    this.controller = await this.watch.watch(
      this.kind.path(this.cluster.namespace),
      { [this.kind.selectorParam ?? 'labelSelector']: this.selector, allowWatchBookmarks: true, resourceVersion: this.resourceVersion },
      (type: string, obj: T & { code?: number }) => {
        if (type === 'ERROR') {
          if (obj.code === 410) {
            this.stats.expired++;
            this.resourceVersion = '';
          }
          return;
        }
        const rv = obj.metadata?.resourceVersion;
        if (rv) this.resourceVersion = rv;
        if (type === 'BOOKMARK') return void this.stats.bookmarks++;
        const name = obj.metadata!.name!;
        if (type === 'DELETED') this.objects.delete(name);
        else this.objects.set(name, obj);
        this.emit(type as WatchEventType, obj);
      },
      (err: unknown) => void this.done(err),
    );
  }

  private async done(err: unknown): Promise<void> {
    if (this.stopped) return;
    const code = (err as { statusCode?: number; code?: number } | null)?.statusCode ?? (err as { code?: number } | null)?.code;
    if (code === 410) {
      this.stats.expired++;
      this.resourceVersion = '';
    }
    // Resume from the last resourceVersion; re-list when it expired. Errors back off and retry.
    const again = async () => {
      if (this.stopped) return;
      try {
        if (!this.resourceVersion) await this.relist();
        await this.connect();
      } catch (e) {
        const error = clusterError(this.cluster, `watching ${this.kind.path(this.cluster.namespace)}`, e);
        for (const l of [...this.errorListeners]) l(error);
        this.retry = setTimeout(() => void again(), 1000);
      }
    };
    if (err && code !== 410) {
      const error = clusterError(this.cluster, `watching ${this.kind.path(this.cluster.namespace)}`, err);
      for (const l of [...this.errorListeners]) l(error);
      this.retry = setTimeout(() => void again(), 500);
      return;
    }
    await again();
  }
}

/** The batch's Jobs and pods, each through one watch, and the namespace's Events about Jobs. */
export class BatchWatch {
  readonly jobs: ObjectWatch<k8s.V1Job>;
  readonly pods: ObjectWatch<k8s.V1Pod>;
  readonly jobEvents: ObjectWatch<k8s.CoreV1Event>;

  constructor(cluster: Cluster, selector: string) {
    this.jobs = new ObjectWatch(cluster, JOBS, selector);
    this.pods = new ObjectWatch(cluster, PODS, selector);
    this.jobEvents = new ObjectWatch(cluster, JOB_EVENTS, 'involvedObject.kind=Job');
  }

  async start(): Promise<void> {
    await Promise.all([this.jobs.start(), this.pods.start(), this.jobEvents.start()]);
  }

  stop(): void {
    this.jobs.stop();
    this.pods.stop();
    this.jobEvents.stop();
  }

  podsOfJob(jobName: string): k8s.V1Pod[] {
    return [...this.pods.objects.values()].filter(
      (p) => p.metadata?.labels?.['batch.kubernetes.io/job-name'] === jobName || p.metadata?.labels?.['job-name'] === jobName,
    );
  }
}
