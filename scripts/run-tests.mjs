#!/usr/bin/env node
// Runs every *.test.ts under the given folders or files (default: packages and test) with Node's
// test runner, compiled ahead of time to a mirror of the repository (scripts/build-tests.mjs), so
// that no test process pays for a TypeScript loader; RAMPART_TEST_TSX=1 loads the sources through
// tsx instead. Exits with the runner's code.
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { run } from 'node:test';
import { spec } from 'node:test/reporters';
import { fileURLToPath } from 'node:url';
import { buildTests, compiled } from './build-tests.mjs';
import slowest from './slowest-reporter.mjs';

function find(dir) {
  let out = [];
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules' || name === 'dist') continue;
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out = out.concat(find(p));
    else if (name.endsWith('.test.ts')) out.push(p);
  }
  return out;
}

/** Seconds each file took in a recorded run (scripts/test-times.json; RAMPART_RECORD_TEST_TIMES=1 npm test writes it). */
function recordedTimes() {
  try {
    return JSON.parse(readFileSync(new URL('./test-times.json', import.meta.url), 'utf8'));
  } catch {
    return {};
  }
}

const roots = process.argv.slice(2).filter((a) => !a.startsWith('--'));
// The longest files first, so that no long file starts last and runs alone at the end; a file
// without a recorded time counts as a long one.
const times = recordedTimes();
const seconds = (f) => times[relative(process.cwd(), f)] ?? 60;
const files = (roots.length ? roots : ['packages', 'test'])
  .flatMap((r) => (r.endsWith('.ts') ? [r] : find(r)))
  .sort()
  .sort((a, b) => seconds(b) - seconds(a));
if (files.length === 0) {
  console.error('run-tests: no test files found');
  process.exit(1);
}
// Node's --test sorts the files it is given by name, so the runner is run(), with the files in this
// order. Through tsx, it runs in a process that loads tsx, which every test file's process then
// loads too.
const TSX = process.env.RAMPART_TEST_TSX === '1';
if (TSX && !process.env.RAMPART_TEST_RUNNER) {
  const res = spawnSync(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), ...files], { stdio: 'inherit', env: { ...process.env, RAMPART_TEST_RUNNER: '1' } });
  process.exit(res.status ?? 1);
}
if (!TSX) await buildTests();
// Every Node process of the run, test files and the processes they start: scripts/test-preload.mjs.
process.env.NODE_OPTIONS = [process.env.NODE_OPTIONS, `--import=${new URL('./test-preload.mjs', import.meta.url).href}`].filter(Boolean).join(' ');
// Three files at once on two cores: many end-to-end tests wait on processes and the network.
const concurrency = Number(process.env.RAMPART_TEST_CONCURRENCY ?? 3);
const stream = run({ files: files.map((f) => (TSX ? resolve(f) : compiled(resolve(f)))), concurrency });
stream.on('test:fail', () => (process.exitCode = 1));
stream.compose(spec).pipe(process.stdout);
stream.compose(slowest).pipe(process.stdout);
