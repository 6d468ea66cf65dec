import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { test } from 'node:test';
import madge from 'madge';
import { ROOT } from './support/root.js';

// docs/architecture.md "Packages": imports point one way. Inside each package's src no module
// imports itself through others: a cycle, type-only imports included, fails here with its path.
// Imports between packages are not followed (the TypeScript project references order those).

const PACKAGES = join(ROOT, 'packages');
/** A relative module specifier: import ... from, export ... from, import '...', import('...'). */
const SPECIFIER = /(?:\bfrom\s*|\bimport\s*\(?\s*)['"](\.{1,2}\/[^'"]+)['"]/g;

const packages = readdirSync(PACKAGES).filter((p) => existsSync(join(PACKAGES, p, 'src')));

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? sources(join(dir, e.name)) : /\.tsx?$/.test(e.name) ? [join(dir, e.name)] : []));
}

/** The file a relative specifier names, as the compiler resolves it ('./x.js' is x.ts, x.tsx or x.d.ts), relative to src. */
function target(src: string, file: string, specifier: string): string {
  const base = resolve(dirname(file), specifier);
  const stem = base.replace(/\.jsx?$/, '');
  const candidates = [base, `${stem}.ts`, `${stem}.tsx`, `${stem}.d.ts`, join(base, 'index.ts'), join(base, 'index.tsx')];
  const found = candidates.find((c) => existsSync(c) && statSync(c).isFile());
  return relative(src, found ?? base)
    .split(sep)
    .join('/');
}

test('every package with a src folder is checked', () => {
  assert.deepEqual([...packages].sort(), ['agent', 'cli', 'dashboard', 'protocol', 'proxy', 'server']);
});

for (const name of packages) {
  test(`${name}: no import cycle in src`, async () => {
    const src = join(PACKAGES, name, 'src');
    const result = await madge(src, {
      fileExtensions: ['ts', 'tsx'],
      tsConfig: join(PACKAGES, name, 'tsconfig.json'),
      // Only this package's own files: another package is reached through its dist or node_modules.
      dependencyFilter: (dependency: string) => dependency.startsWith(src + sep),
      detectiveOptions: { ts: { skipTypeImports: false }, tsx: { skipTypeImports: false } },
    });
    const graph: Record<string, string[]> = result.obj();

    // Not vacuous: madge saw every source file, and resolved every relative import of each
    // (this codebase writes './x.js' for x.ts), type-only ones included.
    const files = sources(src);
    assert.deepEqual(
      Object.keys(graph)
        .filter((f) => /\.tsx?$/.test(f))
        .sort(),
      files.map((f) => relative(src, f).split(sep).join('/')).sort(),
      'madge saw every source file',
    );
    const unresolved = files.flatMap((file) => {
      const id = relative(src, file).split(sep).join('/');
      const deps = new Set(graph[id] ?? []);
      return [...readFileSync(file, 'utf8').matchAll(SPECIFIER)]
        .map((m) => m[1]!)
        .filter((s) => !deps.has(target(src, file, s)))
        .map((s) => `${id}: ${s}`);
    });
    assert.deepEqual(unresolved, [], 'madge resolved every relative import');
    const edges = Object.values(graph).reduce((n, deps) => n + deps.length, 0);
    assert.ok(files.length === 1 || edges >= files.length / 2, `madge found ${edges} imports among ${files.length} files`);

    const cycles: string[][] = result.circular();
    assert.deepEqual(
      cycles.map((c) => [...c, c[0]].join(' -> ')),
      [],
      `import cycles in packages/${name}/src (move what both sides need to a module that imports neither)`,
    );
  });
}
