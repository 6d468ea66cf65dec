#!/usr/bin/env node
// Builds dist/rampart_<version>_all.deb from the built product (npm run build first): the
// workspaces' dist/ (and the proxy's Lua and assets) under /usr/lib/rampart with only their
// production dependencies, /usr/bin/rampart, the two systemd units, the maintainer scripts of
// packaging/debian. The archive is made by dpkg-deb under fakeroot, so every file belongs to root.
// Usage: node scripts/package.mjs [--out DIR]
import { execFileSync } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { gzipSync } from 'node:zlib';

const ROOT = resolve(dirname(new URL(import.meta.url).pathname), '..');
const WORKSPACES = ['protocol', 'proxy', 'server', 'agent', 'dashboard', 'cli'];
/** What each workspace ships besides its package.json: its build, and the proxy's runtime assets. */
const SHIPPED = { proxy: ['dist', 'lua', 'assets'] };
const LIB = 'usr/lib/rampart';
/** Who builds the package: Debian's DEBFULLNAME and DEBEMAIL, as dch reads them. */
const MAINTAINER = `${process.env.DEBFULLNAME || 'Rampart maintainers'} <${process.env.DEBEMAIL || 'rampart@example.org'}>`;

const { values } = parseArgs({ options: { out: { type: 'string' } } });
const outDir = resolve(values.out ?? join(ROOT, 'dist'));
const version = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).version;

function checkBuilt() {
  const missing = WORKSPACES.map((w) => `packages/${w}/dist`).filter((p) => !existsSync(join(ROOT, p)));
  if (!existsSync(join(ROOT, 'packages/dashboard/dist/index.html'))) missing.push('packages/dashboard/dist/index.html');
  if (missing.length) throw new Error(`not built (${missing.join(', ')}): run npm run build first`);
}

/** The built files of every workspace and the lockfile; never sources, tests or build caches. */
function stageProduct(lib) {
  mkdirSync(lib, { recursive: true });
  for (const f of ['package.json', 'package-lock.json']) cpSync(join(ROOT, f), join(lib, f));
  const keep = (src) => !/\.(tsbuildinfo|d\.ts|d\.ts\.map)$/.test(src);
  for (const w of WORKSPACES) {
    const from = join(ROOT, 'packages', w);
    const to = join(lib, 'packages', w);
    mkdirSync(to, { recursive: true });
    cpSync(join(from, 'package.json'), join(to, 'package.json'));
    for (const d of SHIPPED[w] ?? ['dist']) cpSync(join(from, d), join(to, d), { recursive: true, filter: keep });
  }
  // Production dependencies only, exactly as locked; the workspaces resolve through node_modules links.
  // Optional ones are left out: they are native speed-ups (ws's bufferutil) with pure JavaScript fallbacks.
  execFileSync('npm', ['ci', '--omit=dev', '--omit=optional', '--ignore-scripts', '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error'], {
    cwd: lib,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  rmSync(join(lib, 'node_modules/.package-lock.json'), { force: true });
  chmodSync(join(lib, 'packages/cli/dist/main.js'), 0o755);
}

/** Dependencies' development leftovers that Debian's lintian refuses (linter and VCS files, shell scripts). */
const LEFTOVER = /^(\.eslintrc.*|eslint\.config\.[cm]?js|\.npmignore|\.gitignore|\.gitattributes|\.travis\.yml|.*\.sh)$/;

/** What Node never loads at run time: TypeScript sources and declarations, source maps (over half the files of the dependencies). */
const COMPILE_TIME = /\.(?:[cm]?ts|map)$/;

/** Removes LEFTOVER and COMPILE_TIME files; a file is executable exactly when it starts with #! (lintian's rule). */
function pruneDependencies(dir) {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) pruneDependencies(p);
    else if (e.isFile() && (LEFTOVER.test(e.name) || COMPILE_TIME.test(e.name))) rmSync(p);
    else if (e.isFile()) chmodSync(p, readFileSync(p).subarray(0, 2).toString() === '#!' ? 0o755 : 0o644);
  }
}

/** Architecture all: a compiled add-on would tie the package to one machine type. */
function checkNoNativeCode(dir) {
  const found = [];
  const walk = (d) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile() && e.name.endsWith('.node')) found.push(relative(dir, p));
    }
  };
  walk(dir);
  if (found.length) throw new Error(`native add-ons in the production dependencies: ${found.join(', ')}`);
}

function stageSystemFiles(stage) {
  mkdirSync(join(stage, 'usr/bin'), { recursive: true });
  symlinkSync(`../lib/rampart/packages/cli/dist/main.js`, join(stage, 'usr/bin/rampart'));
  const units = join(stage, 'usr/lib/systemd/system');
  mkdirSync(units, { recursive: true });
  for (const u of ['rampart-server.service', 'rampart-agent.service']) cpSync(join(ROOT, 'packaging/systemd', u), join(units, u));
  const doc = join(stage, 'usr/share/doc/rampart');
  mkdirSync(doc, { recursive: true });
  cpSync(join(ROOT, 'docs/operations.md'), join(doc, 'operations.md'));
  cpSync(join(ROOT, 'packaging/debian/copyright'), join(doc, 'copyright'));
  const changelog = `rampart (${version}) unstable; urgency=medium\n\n  * Release ${version}; see the project's git history.\n\n -- ${MAINTAINER}  ${new Date(0).toUTCString().replace('GMT', '+0000')}\n`;
  writeFileSync(join(doc, 'changelog.gz'), gzipSync(changelog, { level: 9 }));
}

/** Every regular file below dir (symbolic links excluded), as paths relative to it. */
function filesBelow(dir) {
  const out = [];
  const walk = (d) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile()) out.push(relative(dir, p));
    }
  };
  walk(dir);
  return out.sort();
}

function stageControl(stage) {
  const debian = join(stage, 'DEBIAN');
  mkdirSync(debian);
  const files = filesBelow(stage).filter((f) => !f.startsWith('DEBIAN/'));
  const installedKb = Math.ceil(files.reduce((n, f) => n + statSync(join(stage, f)).size, 0) / 1024);
  const control = readFileSync(join(ROOT, 'packaging/debian/control.in'), 'utf8').replace('@VERSION@', version).replace('@MAINTAINER@', MAINTAINER).replace('@INSTALLED_SIZE@', String(installedKb));
  writeFileSync(join(debian, 'control'), control);
  const md5 = files.map(
    (f) =>
      `${createHash('md5')
        .update(readFileSync(join(stage, f)))
        .digest('hex')}  ${f}\n`,
  );
  writeFileSync(join(debian, 'md5sums'), md5.join(''));
  for (const s of ['postinst', 'prerm', 'postrm']) {
    cpSync(join(ROOT, 'packaging/debian', s), join(debian, s));
    chmodSync(join(debian, s), 0o755);
  }
}

function build() {
  checkBuilt();
  const stage = mkdtempSync(join(tmpdir(), 'rampart-deb-'));
  try {
    chmodSync(stage, 0o755);
    stageProduct(join(stage, LIB));
    pruneDependencies(join(stage, LIB, 'node_modules'));
    checkNoNativeCode(join(stage, LIB));
    stageSystemFiles(stage);
    stageControl(stage);
    mkdirSync(outDir, { recursive: true });
    const deb = join(outDir, `rampart_${version}_all.deb`);
    execFileSync('fakeroot', ['dpkg-deb', '-Zgzip', '-z6', '--build', stage, deb], { stdio: ['ignore', 'ignore', 'inherit'] });
    process.stdout.write(`${deb}\n`);
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
}

build();
