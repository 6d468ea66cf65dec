// A test reporter that prints, once every file has run, the slowest files (the sum of their
// top-level tests and suites) and the slowest single tests: where the suite's time goes. With
// RAMPART_RECORD_TEST_TIMES=1 it also writes every file's time to scripts/test-times.json, which
// run-tests.mjs reads to start the longest files first.
import { writeFileSync } from 'node:fs';
import { relative } from 'node:path';

const FILES = 15;
const TESTS = 10;

export default async function* slowest(source) {
  const files = new Map();
  const tests = [];
  for await (const event of source) {
    if (event.type !== 'test:pass' && event.type !== 'test:fail') continue;
    const { file, name, nesting, details } = event.data;
    const ms = details?.duration_ms ?? 0;
    const where = file ? relative(process.cwd(), file) : '?';
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
    const times = Object.fromEntries(
      [...files]
        .filter(([f]) => f !== '?')
        .sort((a, b) => a[0].localeCompare(b[0]))
        .map(([f, ms]) => [f, Math.round(ms / 100) / 10]),
    );
    writeFileSync(new URL('./test-times.json', import.meta.url), `${JSON.stringify(times, null, 2)}\n`);
  }
}
