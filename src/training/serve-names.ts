// The names of a training run's rollout server (rollout-server.ts), shared with the trainer's
// manifest (trainer-jobs.ts), which points the trainer at the server and its key.
import { dnsLabel } from '../cluster/manifests.js';

export const SERVE_PORT = 8000;
/** The Deployment, Service, Secret, ServiceAccount, Role and RoleBinding of the run's server. */
export const serveName = (run: string): string => dnsLabel(`${run}-serve`);
/** The server's URL as the trainer's pods see it (cluster DNS). */
export const rolloutServerUrl = (run: string, namespace: string): string => `http://${serveName(run)}.${namespace}.svc:${SERVE_PORT}`;
/** The Secret and key the admin key is read from, by the server and by the trainer (secretKeyRef). */
export const serveKeyRef = (run: string): { secret: string; key: string } => ({ secret: serveName(run), key: 'admin-key' });
