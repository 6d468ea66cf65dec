// A test reporter that prints, once every file has run, the slowest files (the sum of their
// top-level tests and suites) and the slowest single tests: where the suite's time goes. With
// RAMPART_RECORD_TEST_TIMES=1 it also records each file's time in scripts/test-times.json, which
// run-tests.mjs reads to start the longest files first.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { relative } from 'node:path';
import { source as sourceOf } from './build-tests.mjs';

const FILES = 15;
const TESTS = 10;

export default async function* slowest(source) {
  const files = new Map();
  const tests = [];
  for await (const event of source) {
    if (event.type !== 'test:pass' && event.type !== 'test:fail') continue;
    const { file, name, nesting, details } = event.data;
    const ms = details?.duration_ms ?? 0;
    const where = file ? relative(process.cwd(), sourceOf(file)) : '?';
    if (nesting === 0) files.set(where, (files.get(where) ?? 0) + ms);
    if (details?.type !== 'suite') tests.push({ where, name, ms });
  }
  const s = (ms) => `${(ms / 1000).toFixed(1).padStart(6)} s`;
  const total = [...files.values()].reduce((a, b) => a + b, 0);
  yield `\nslowest files (all ${files.size} files: ${s(total).trim()} in all):\n${[...files]
    .sort((a, b) => b[1] - a[1])
    .slice(0, FILES)
    .map(([f, ms]) => `${s(ms)}  ${f}`)
    .join('\n')}\n`;
  yield `slowest tests:\n${tests
    .sort((a, b) => b.ms - a.ms)
    .slice(0, TESTS)
    .map((t) => `${s(t.ms)}  ${t.where}: ${t.name}`)
    .join('\n')}\n`;
  if (process.env.RAMPART_RECORD_TEST_TIMES === '1') {
    // A run of some files updates theirs and keeps the others'.
    const path = new URL('./test-times.json', import.meta.url);
    const times = existsSync(path) ? JSON.parse(readFileSync(path, 'utf8')) : {};
    for (const [f, ms] of files) if (f !== '?') times[f] = Math.round(ms / 100) / 10;
    const sorted = Object.fromEntries(Object.entries(times).sort((x, y) => x[0].localeCompare(y[0])));
    writeFileSync(path, `${JSON.stringify(sorted, null, 2)}\n`);
  }
}
