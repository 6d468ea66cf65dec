#!/usr/bin/env node
// Runs every *.test.ts under the given folders (default: packages and test) with Node's test runner,
// TypeScript loaded through tsx. Exits with the runner's code.
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

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
// Three files at once on two cores: many end-to-end tests wait on processes and the network.
const concurrency = process.env.RAMPART_TEST_CONCURRENCY ?? '3';
const res = spawnSync(
  process.execPath,
  [
    '--import',
    'tsx',
    '--test',
    `--test-concurrency=${concurrency}`,
    '--test-reporter=spec',
    '--test-reporter-destination=stdout',
    `--test-reporter=${new URL('./slowest-reporter.mjs', import.meta.url).pathname}`,
    '--test-reporter-destination=stdout',
    ...files,
  ],
  { stdio: 'inherit' },
);
process.exit(res.status ?? 1);
