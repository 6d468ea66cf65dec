// ESLint over every package's source (eslint.config.mjs, the same globs as `npm run lint`) reports
// nothing, and Prettier finds every file formatted (`npm run format:check`; `npm run format` fixes
// it). Type-checked rules: the dashboard sees @rampart/protocol through its build (dist), so the
// suite's `npm run build` comes first.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { ROOT } from './support/root.js';

const ESLINT = `${ROOT}node_modules/.bin/eslint`;
const PRETTIER = `${ROOT}node_modules/.bin/prettier`;
const TIMEOUT_MS = 5 * 60_000;

function run(cmd: string, args: string[]): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], timeout: TIMEOUT_MS });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, output }));
  });
}

test('eslint reports no problem in packages/*/src', { timeout: TIMEOUT_MS + 30_000 }, async () => {
  assert.ok(existsSync(`${ROOT}packages/protocol/dist/index.d.ts`), 'packages/protocol is not built: run npm run build first (the dashboard is type-checked against its dist)');
  const { code, output } = await run(ESLINT, ['packages/*/src/**/*.{ts,tsx}']);
  assert.equal(code, 0, `eslint exited with ${code}:\n${output}`);
});

test('prettier finds every source file formatted', { timeout: TIMEOUT_MS + 30_000 }, async () => {
  const scripts = JSON.parse(readFileSync(`${ROOT}package.json`, 'utf8')) as { scripts: Record<string, string> };
  // The globs of `npm run format:check`, so the test and the script never disagree.
  const globs = [...scripts.scripts['format:check']!.matchAll(/"([^"]+)"/g)].map((m) => m[1]!);
  assert.ok(globs.length >= 2, `no globs found in ${scripts.scripts['format:check']}`);
  const { code, output } = await run(PRETTIER, ['--check', ...globs]);
  assert.equal(code, 0, `prettier --check exited with ${code} (run npm run format):\n${output}`);
});
