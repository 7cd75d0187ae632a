// The reference ReAct harness as one JavaScript file the sandbox can run with plain node: the
// bundle next to the built CLI (dist/react-harness.js), or, in a source checkout, a fresh esbuild
// bundle of src/harness/react-harness.ts cached by content hash.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';

function sourceFile(): string | undefined {
  let dir = __dirname;
  for (let i = 0; i < 6; i++) {
    const candidate = join(dir, 'src', 'harness', 'react-harness.ts');
    if (existsSync(candidate)) return candidate;
    dir = dirname(dir);
  }
  return undefined;
}

export async function ensureReactScript(): Promise<string> {
  const src = sourceFile();
  if (src) {
    const hash = createHash('sha256').update(readFileSync(src)).digest('hex').slice(0, 12);
    const out = join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'harness-lab', `react-harness-${hash}.js`);
    if (existsSync(out)) return out;
    mkdirSync(dirname(out), { recursive: true });
    try {
      // A computed specifier keeps the bundler from pulling esbuild (a dev tool) into dist/.
      const specifier = 'esbuild';
      const esbuild = (await import(specifier)) as typeof import('esbuild');
      await esbuild.build({
        entryPoints: [src],
        outfile: out,
        bundle: true,
        platform: 'node',
        format: 'cjs',
        target: 'node20',
        logLevel: 'error',
      });
      return out;
    } catch (err) {
      const bundled = join(__dirname, 'react-harness.js');
      if (existsSync(bundled)) return bundled;
      throw new Error(`could not bundle the reference harness from ${src}: ${(err as Error).message}`);
    }
  }
  const bundled = join(__dirname, 'react-harness.js');
  if (existsSync(bundled)) return bundled;
  throw new Error(`the reference harness bundle ${bundled} is missing; run \`npm run build\``);
}
