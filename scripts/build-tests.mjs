// Compiles the TypeScript of the test suite ahead of time, so that the test files run in plain
// node: on Node 20 a loader such as tsx runs its hooks on a separate thread, and starting it and
// sending every import through it cost each test file from half a second to six seconds of CPU.
//
// The output is a mirror of the repository under node_modules/.cache/rampart-tests/<pid>: every
// .ts and .tsx file of the packages, test/ and scripts/ compiled by esbuild to a .js beside a link
// to the source, and every other file and folder a symbolic link to the original. Paths a module
// finds through import.meta.url (Lua, goldens, migrations, docs) therefore resolve as they do from
// the source tree, and a golden written through the mirror lands in the original file. Each run
// has a mirror of its own (two runs at once do not pull one from under the other), removed when
// the run ends; one a killed run left behind goes at the next run.
import { build } from 'esbuild';
import { mkdirSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));
const MIRRORS = join(ROOT, 'node_modules', '.cache', 'rampart-tests');
export const MIRROR = join(MIRRORS, String(process.pid));

/** Folders whose TypeScript is compiled; everything else in the repository is linked. */
const COMPILED = ['packages', 'test', 'scripts'];
const SKIPPED = new Set(['node_modules', 'dist']);
const isSource = (name) => /\.tsx?$/.test(name) && !name.endsWith('.d.ts');

/** The TypeScript files under dir (relative to ROOT), without node_modules and builds. */
function sourcesIn(rel) {
  return readdirSync(join(ROOT, rel), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() && !SKIPPED.has(e.name) ? sourcesIn(join(rel, e.name)) : e.isFile() && isSource(e.name) ? [join(rel, e.name)] : [],
  );
}

/**
 * Mirrors dir (relative to ROOT): a folder that holds TypeScript (in `folders`) becomes a real
 * folder, anything else a link. A folder without TypeScript (goldens, Lua, fixtures) is one link,
 * so that a file a test creates in it lands in the repository.
 */
function mirror(rel, folders) {
  mkdirSync(join(MIRROR, rel), { recursive: true });
  for (const entry of readdirSync(join(ROOT, rel), { withFileTypes: true })) {
    const path = join(rel, entry.name);
    if (entry.isDirectory() && folders.has(path)) mirror(path, folders);
    else symlinkSync(join(ROOT, path), join(MIRROR, path));
  }
}

/** Whether a process with this id runs. */
function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === 'EPERM';
  }
}

/** Builds this process's mirror afresh (and removes those of runs that are gone); returns its root. */
export async function buildTests() {
  mkdirSync(MIRRORS, { recursive: true });
  for (const name of readdirSync(MIRRORS)) {
    if (!/^\d+$/.test(name) || !alive(Number(name))) rmSync(join(MIRRORS, name), { recursive: true, force: true });
  }
  rmSync(MIRROR, { recursive: true, force: true });
  process.on('exit', () => rmSync(MIRROR, { recursive: true, force: true }));
  const sources = COMPILED.flatMap(sourcesIn);
  const folders = new Set(
    sources.flatMap((s) =>
      s
        .split(sep)
        .slice(0, -1)
        .map((_, i, parts) => parts.slice(0, i + 1).join(sep)),
    ),
  );
  mirror('', folders);
  const common = { outbase: ROOT, outdir: MIRROR, format: 'esm', platform: 'node', target: 'node20', supported: { 'import-attributes': true }, sourcemap: 'linked', logLevel: 'warning' };
  // The dashboard's sources import without extensions, as its bundler allows: its tests are
  // bundled with those sources (packages stay imports). Everything else is compiled file by file.
  const bundled = (s) => s.startsWith(`packages${sep}dashboard${sep}`);
  await Promise.all([
    build({ ...common, entryPoints: sources.filter((s) => !bundled(s)).map((s) => join(ROOT, s)) }),
    build({ ...common, entryPoints: sources.filter((s) => bundled(s) && s.endsWith('.test.ts')).map((s) => join(ROOT, s)), bundle: true, packages: 'external' }),
  ]);
  return MIRROR;
}

/** The compiled counterpart of an absolute path to a test file. */
export const compiled = (file) => join(MIRROR, relative(ROOT, file)).replace(/\.tsx?$/, '.js');

/** The source of a compiled test file (any other path is returned as it is). */
export const source = (file) => (file.startsWith(`${MIRROR}/`) ? join(ROOT, relative(MIRROR, file)).replace(/\.js$/, '.ts') : file);
