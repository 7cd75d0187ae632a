// The invariants of docs/architecture.md that a machine can check: no import circle among the source
// files, and no arrow from a lower folder to a higher one (the layer table below is the one in the
// doc). Static, dynamic and type-only imports all count: a type-only circle is still a circle to read.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { test } from 'node:test';

const ROOT = join(__dirname, '..', '..');
const SRC = join(ROOT, 'src');

/**
 * Each folder of src/ (and webview/) with its layer: a module may import only from its own folder
 * or from a folder of a lower layer. Folders on one layer do not import each other.
 */
const LAYERS: Record<string, number> = {
  capture: 0,
  engine: 1,
  harness: 1,
  tasks: 1,
  sandbox: 2,
  cluster: 3,
  batch: 4,
  training: 4,
  export: 5,
  serve: 5,
  protocol: 6,
  report: 7,
  replay: 7,
  cli: 8,
  extension: 8,
  webview: 9,
};

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...sourceFiles(p));
    else if (/\.tsx?$/.test(name)) out.push(p);
  }
  return out;
}

/** Every relative module a file imports: `import ... from`, `export ... from`, `import('...')`, `import '...'`. */
function importsOf(file: string, text: string): string[] {
  const out: string[] = [];
  const code = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');
  for (const m of code.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)['"](\.{1,2}\/[^'"]+)['"]/g)) {
    const spec = m[1]!;
    const base = resolve(dirname(file), spec);
    const candidates = [base.replace(/\.js$/, '.ts'), base, `${base}.ts`, join(base, 'index.ts')];
    const hit = candidates.find((c) => existsSync(c) && statSync(c).isFile());
    if (hit) out.push(hit);
  }
  return out;
}

function graph(): Map<string, string[]> {
  const files = [...sourceFiles(SRC), ...sourceFiles(join(ROOT, 'webview'))];
  return new Map(files.map((f) => [f, importsOf(f, readFileSync(f, 'utf8'))]));
}

const folderOf = (file: string): string => {
  const rel = relative(ROOT, file).split(/[\\/]/);
  return rel[0] === 'src' ? rel[1]! : rel[0]!;
};

/** The import circles of a graph (Tarjan's strongly connected components of more than one file, or a file importing itself). */
function circles(g: ReadonlyMap<string, readonly string[]>): string[][] {
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string) => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of g.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const scc: string[] = [];
      for (let w = stack.pop()!; ; w = stack.pop()!) {
        on.delete(w);
        scc.push(w);
        if (w === v) break;
      }
      if (scc.length > 1 || (g.get(v) ?? []).includes(v)) out.push(scc.sort());
    }
  };
  for (const v of g.keys()) if (!idx.has(v)) visit(v);
  return out;
}

test('the circle finder finds a circle and passes a tree (so the checks below can fail)', () => {
  assert.deepEqual(
    circles(
      new Map([
        ['a', ['b']],
        ['b', ['c']],
        ['c', ['a']],
        ['d', ['a']],
      ]),
    ),
    [['a', 'b', 'c']],
  );
  assert.deepEqual(
    circles(
      new Map([
        ['a', ['b', 'c']],
        ['b', ['c']],
        ['c', []],
      ]),
    ),
    [],
  );
  assert.deepEqual(
    importsOf(
      join(SRC, 'batch', 'x.ts'),
      "import type { A } from './backend.js';\nconst m = await import('./backends/index.js');\n// import './runner.js'",
    ),
    [join(SRC, 'batch', 'backend.ts'), join(SRC, 'batch', 'backends', 'index.ts')],
  );
});

test('no import circle among the source files', () => {
  const found = circles(graph()).map((c) => c.map((f) => relative(ROOT, f)).join(' <-> '));
  assert.deepEqual(found, [], `import circles:\n${found.join('\n')}`);
});

test('every folder of src/ has a layer, and no module imports from a higher or sibling layer', () => {
  const folders = readdirSync(SRC).filter((n) => statSync(join(SRC, n)).isDirectory());
  const unplaced = folders.filter((f) => !(f in LAYERS));
  assert.deepEqual(unplaced, [], `folders without a layer (add them to LAYERS here and to docs/architecture.md): ${unplaced.join(', ')}`);
  const upward: string[] = [];
  for (const [file, imports] of graph()) {
    const from = folderOf(file);
    for (const target of imports) {
      const to = folderOf(target);
      if (to !== from && LAYERS[to]! >= LAYERS[from]!)
        upward.push(`${relative(ROOT, file)} -> ${relative(ROOT, target)} (${from} ${LAYERS[from]} -> ${to} ${LAYERS[to]})`);
    }
  }
  assert.deepEqual(upward, [], `imports that reach up or sideways:\n${upward.join('\n')}`);
});

test("the README's code map names exactly the folders of src/", () => {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const block = /<!-- code-map:begin -->\n([\s\S]*?)\n<!-- code-map:end -->/.exec(readme)?.[1];
  assert.ok(block, 'README.md has the code-map block');
  const mapped = [...block.matchAll(/^\| `src\/([^/`]+)\/` \|/gm)].map((m) => m[1]!).sort();
  const folders = readdirSync(SRC)
    .filter((n) => statSync(join(SRC, n)).isDirectory())
    .sort();
  assert.deepEqual(mapped, folders);
});

test('every doc a source comment cites exists, with the section it names', () => {
  const missing: string[] = [];
  for (const dir of ['src', 'test', 'bench', 'scripts', 'webview'])
    for (const file of sourceFiles(join(ROOT, dir))) {
      const text = readFileSync(file, 'utf8');
      for (const m of text.matchAll(/docs\/([a-z0-9-]+\.md)(?: §([0-9.]*[0-9]))?/g)) {
        const doc = join(ROOT, 'docs', m[1]!);
        if (!existsSync(doc)) {
          missing.push(`${relative(ROOT, file)}: docs/${m[1]} does not exist`);
          continue;
        }
        const section = m[2];
        if (section && !new RegExp(`^#{2,3} ${section.replace(/\./g, '\\.')}[. ]`, 'm').test(readFileSync(doc, 'utf8')))
          missing.push(`${relative(ROOT, file)}: docs/${m[1]} has no section ${section}`);
      }
    }
  assert.deepEqual(missing, []);
});
