// Pod Security admission as the API server runs it for a namespace labelled
// `pod-security.kubernetes.io/enforce: baseline|restricted`: the checks of the Pod Security Standards
// the lab's pods touch (host namespaces, privileged, capabilities, hostPath and other volume types,
// host ports, seccomp, privilege escalation, non-root), each failure worded as the real admission
// plugin words it, joined into one `violates PodSecurity "<level>:latest": ...` message.

export type PodSecurityLevel = 'privileged' | 'baseline' | 'restricted';

interface SecurityContext {
  privileged?: boolean;
  allowPrivilegeEscalation?: boolean;
  runAsNonRoot?: boolean;
  runAsUser?: number;
  seccompProfile?: { type?: string };
  capabilities?: { add?: string[]; drop?: string[] };
  procMount?: string;
}
interface Container {
  name: string;
  securityContext?: SecurityContext;
  ports?: { hostPort?: number }[];
}
interface PodSpec {
  hostNetwork?: boolean;
  hostPID?: boolean;
  hostIPC?: boolean;
  securityContext?: SecurityContext & { sysctls?: { name: string }[] };
  containers?: Container[];
  initContainers?: Container[];
  ephemeralContainers?: Container[];
  volumes?: Record<string, unknown>[];
}

/** The capabilities "baseline" lets a container add (the container runtimes' defaults, minus NET_RAW). */
const BASELINE_CAPS = new Set([
  'AUDIT_WRITE',
  'CHOWN',
  'DAC_OVERRIDE',
  'FOWNER',
  'FSETID',
  'KILL',
  'MKNOD',
  'NET_BIND_SERVICE',
  'SETFCAP',
  'SETGID',
  'SETPCAP',
  'SETUID',
  'SYS_CHROOT',
]);
const RESTRICTED_VOLUMES = new Set([
  'configMap',
  'csi',
  'downwardAPI',
  'emptyDir',
  'ephemeral',
  'persistentVolumeClaim',
  'projected',
  'secret',
]);
const SAFE_SYSCTLS = new Set([
  'kernel.shm_rmid_forced',
  'net.ipv4.ip_local_port_range',
  'net.ipv4.ip_unprivileged_port_start',
  'net.ipv4.tcp_syncookies',
  'net.ipv4.ping_group_range',
  'net.ipv4.ip_local_reserved_ports',
  'net.ipv4.tcp_keepalive_time',
  'net.ipv4.tcp_fin_timeout',
  'net.ipv4.tcp_keepalive_intvl',
  'net.ipv4.tcp_keepalive_probes',
]);

const q = (s: string) => `"${s}"`;
const list = (xs: string[]) => xs.map(q).join(', ');
const plural = (n: number, one: string, many: string) => (n === 1 ? one : many);

function containersOf(spec: PodSpec): Container[] {
  return [...(spec.initContainers ?? []), ...(spec.containers ?? []), ...(spec.ephemeralContainers ?? [])];
}

/** Every check the level fails, in the admission plugin's words; empty when the pod is admitted. */
export function podSecurityViolations(spec: PodSpec | undefined, level: PodSecurityLevel): string[] {
  if (!spec || level === 'privileged') return [];
  const out: string[] = [];
  const cs = containersOf(spec);
  const pod = spec.securityContext ?? {};
  const host = (['hostNetwork', 'hostPID', 'hostIPC'] as const).filter((k) => spec[k]);
  if (host.length) out.push(`host namespaces (${host.map((k) => `${k}=true`).join(', ')})`);
  const priv = cs.filter((c) => c.securityContext?.privileged).map((c) => c.name);
  if (priv.length)
    out.push(`privileged (${plural(priv.length, 'container', 'containers')} ${list(priv)} must not set securityContext.privileged=true)`);
  const addsBeyond = cs.flatMap((c) =>
    (c.securityContext?.capabilities?.add ?? []).filter((a) => !BASELINE_CAPS.has(a)).map((a) => [c.name, a] as const),
  );
  if (addsBeyond.length)
    out.push(
      `non-default capabilities (${plural(new Set(addsBeyond.map((x) => x[0])).size, 'container', 'containers')} ${list([...new Set(addsBeyond.map((x) => x[0]))])} must not include ${list([...new Set(addsBeyond.map((x) => x[1]))])} in securityContext.capabilities.add)`,
    );
  const hostPaths = (spec.volumes ?? []).filter((v) => v.hostPath).map((v) => String(v.name));
  if (hostPaths.length) out.push(`hostPath volumes (${plural(hostPaths.length, 'volume', 'volumes')} ${list(hostPaths)})`);
  const hostPorts = cs.flatMap((c) => (c.ports ?? []).filter((p) => p.hostPort).map((p) => [c.name, p.hostPort!] as const));
  if (hostPorts.length)
    out.push(
      `hostPort (${plural(new Set(hostPorts.map((x) => x[0])).size, 'container', 'containers')} ${list([...new Set(hostPorts.map((x) => x[0]))])} ${plural(hostPorts.length, 'uses hostPort', 'use hostPorts')} ${hostPorts.map((x) => x[1]).join(', ')})`,
    );
  const unconfinedPod = pod.seccompProfile?.type === 'Unconfined';
  const unconfined = cs.filter((c) => c.securityContext?.seccompProfile?.type === 'Unconfined').map((c) => c.name);
  if (unconfinedPod || unconfined.length)
    out.push(
      `seccompProfile (${[unconfinedPod ? 'pod' : '', unconfined.length ? `${plural(unconfined.length, 'container', 'containers')} ${list(unconfined)}` : ''].filter(Boolean).join(' and ')} must not set securityContext.seccompProfile.type to "Unconfined")`,
    );
  const procMount = cs.filter((c) => c.securityContext?.procMount && c.securityContext.procMount !== 'Default').map((c) => c.name);
  if (procMount.length)
    out.push(
      `procMount (${plural(procMount.length, 'container', 'containers')} ${list(procMount)} must not set securityContext.procMount to "Unmasked")`,
    );
  const sysctls = (pod.sysctls ?? []).map((s) => s.name).filter((n) => !SAFE_SYSCTLS.has(n));
  if (sysctls.length) out.push(`forbidden sysctls (${sysctls.join(', ')})`);
  if (level === 'baseline') return out;

  const restrictedVolumes = (spec.volumes ?? []).flatMap((v) => {
    const type = Object.keys(v).find((k) => k !== 'name');
    return type && !RESTRICTED_VOLUMES.has(type) ? [[String(v.name), type] as const] : [];
  });
  if (restrictedVolumes.length)
    out.push(
      `restricted volume types (${plural(restrictedVolumes.length, 'volume', 'volumes')} ${list(restrictedVolumes.map((x) => x[0]))} ${plural(restrictedVolumes.length, 'uses', 'use')} restricted volume ${plural(new Set(restrictedVolumes.map((x) => x[1])).size, 'type', 'types')} ${list([...new Set(restrictedVolumes.map((x) => x[1]))])})`,
    );
  const escalating = cs.filter((c) => c.securityContext?.allowPrivilegeEscalation !== false).map((c) => c.name);
  if (escalating.length)
    out.push(
      `allowPrivilegeEscalation != false (${plural(escalating.length, 'container', 'containers')} ${list(escalating)} must set securityContext.allowPrivilegeEscalation=false)`,
    );
  const capsNotDropped = cs.filter((c) => !(c.securityContext?.capabilities?.drop ?? []).includes('ALL')).map((c) => c.name);
  const capsAdded = cs.filter((c) => (c.securityContext?.capabilities?.add ?? []).some((a) => a !== 'NET_BIND_SERVICE'));
  if (capsNotDropped.length || capsAdded.length) {
    const parts = [
      capsNotDropped.length
        ? `${plural(capsNotDropped.length, 'container', 'containers')} ${list(capsNotDropped)} must set securityContext.capabilities.drop=["ALL"]`
        : '',
      capsAdded.length
        ? `${plural(capsAdded.length, 'container', 'containers')} ${list(capsAdded.map((c) => c.name))} must not include ${list([...new Set(capsAdded.flatMap((c) => (c.securityContext?.capabilities?.add ?? []).filter((a) => a !== 'NET_BIND_SERVICE')))])} in securityContext.capabilities.add`
        : '',
    ].filter(Boolean);
    out.push(`unrestricted capabilities (${parts.join('; ')})`);
  }
  const nonRootPod = pod.runAsNonRoot === true;
  const notNonRoot = cs
    .filter((c) => c.securityContext?.runAsNonRoot !== true && !(nonRootPod && c.securityContext?.runAsNonRoot !== false))
    .map((c) => c.name);
  if (notNonRoot.length)
    out.push(
      `runAsNonRoot != true (pod or ${plural(notNonRoot.length, 'container', 'containers')} ${list(notNonRoot)} must set securityContext.runAsNonRoot=true)`,
    );
  const rootUser = cs.filter((c) => (c.securityContext?.runAsUser ?? pod.runAsUser) === 0).map((c) => c.name);
  if (rootUser.length)
    out.push(`runAsUser=0 (${plural(rootUser.length, 'container', 'containers')} ${list(rootUser)} must not set runAsUser=0)`);
  const podSeccomp = pod.seccompProfile?.type;
  const noSeccomp = cs
    .filter((c) => !['RuntimeDefault', 'Localhost'].includes(c.securityContext?.seccompProfile?.type ?? podSeccomp ?? ''))
    .map((c) => c.name);
  if (noSeccomp.length)
    out.push(
      `seccompProfile (pod or ${plural(noSeccomp.length, 'container', 'containers')} ${list(noSeccomp)} must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")`,
    );
  return out;
}

/** The namespace's enforced level, from its `pod-security.kubernetes.io/enforce` label. */
export function enforcedLevel(labels: Record<string, string> | undefined): PodSecurityLevel | undefined {
  const v = labels?.['pod-security.kubernetes.io/enforce'];
  return v === 'privileged' || v === 'baseline' || v === 'restricted' ? v : undefined;
}

/** The admission error's message for a pod, or undefined when it is admitted. */
export function podSecurityDenial(podName: string, spec: PodSpec | undefined, level: PodSecurityLevel | undefined): string | undefined {
  if (!level) return undefined;
  const v = podSecurityViolations(spec, level);
  return v.length ? `pods ${q(podName)} is forbidden: violates PodSecurity ${q(`${level}:latest`)}: ${v.join(', ')}` : undefined;
}
