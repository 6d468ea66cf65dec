import assert from 'node:assert/strict';
import { existsSync, lstatSync, mkdirSync, realpathSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { buildTests, compiled, MIRROR, source } from '../scripts/build-tests.mjs';
import { ROOT } from './support/root.js';

// The runner's mirror (scripts/build-tests.mjs): this test builds one of its own while the run's
// mirror is in use, as a second run at the same time would.

test("a run's mirror: compiled tests, folders without TypeScript linked whole, mirrors of runs that are gone removed", async () => {
  const mirrors = dirname(MIRROR);
  const gone = join(mirrors, '4194305'); // above Linux's largest process id: no process has it
  const oldLayout = join(mirrors, 'packages'); // what a runner before per-run mirrors left
  mkdirSync(gone, { recursive: true });
  mkdirSync(oldLayout, { recursive: true });
  assert.equal(await buildTests(), MIRROR);
  assert.ok(!existsSync(gone) && !existsSync(oldLayout), 'mirrors of runs that are gone are removed');

  const file = join(ROOT, 'packages/proxy/test/haproxy-config.test.ts');
  assert.ok(existsSync(compiled(file)), compiled(file));
  assert.equal(source(compiled(file)), file, 'the slowest-files report names the source');
  assert.equal(source('/elsewhere/x.test.js'), '/elsewhere/x.test.js');

  // A folder that holds TypeScript is a real folder; one without (goldens) is a link, so a golden a
  // test writes lands in the repository.
  assert.ok(lstatSync(join(MIRROR, 'packages/proxy/test')).isDirectory());
  const golden = join(MIRROR, 'packages/proxy/test/golden');
  assert.ok(lstatSync(golden).isSymbolicLink());
  assert.equal(realpathSync(golden), join(ROOT, 'packages/proxy/test/golden'));

  // The compiled sources run without a loader, their assets found through import.meta.url.
  const proxy = (await import(join(MIRROR, 'packages/proxy/src/detect-lua.js'))) as typeof import('../packages/proxy/src/detect-lua.js');
  assert.match(proxy.detectEngineSource(), /function D\.inspect/);
});
