import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

// docs/architecture.md "Layers of the control plane": SQL lives only in the data-access layer
// (src/data/, and src/db/ for the connection and migrations). src/bus.ts keeps its own listening
// connection's LISTEN. The data layer imports no service, route or hub module.

const SRC = fileURLToPath(new URL('../src', import.meta.url));
const ALLOWED = ['db/', 'data/', 'bus.ts'];
const QUERY = [/\.selectFrom\(/, /\.insertInto\(/, /\.updateTable\(/, /\.deleteFrom\(/, /\bsql\s*(<[^`]*>)?`/, /\.query\(/];

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));
}

test('no query outside src/data/ and src/db/', () => {
  const files = sources(SRC)
    .map((f) => relative(SRC, f).split('\\').join('/'))
    .filter((f) => !ALLOWED.some((a) => f === a || f.startsWith(a)));
  assert.ok(files.includes('hub/hub.ts') && files.includes('services/servers.ts'), 'the files to check were found');
  const offending = files.flatMap((f) =>
    readFileSync(join(SRC, f), 'utf8')
      .split('\n')
      .flatMap((line, i) => (QUERY.some((q) => q.test(line)) ? [`src/${f}:${i + 1}: ${line.trim()}`] : [])),
  );
  assert.deepEqual(offending, [], 'move these queries into a module of src/data/');
});

test('the data layer imports no service', () => {
  const files = sources(join(SRC, 'data')).map((f) => relative(SRC, f).split('\\').join('/'));
  assert.ok(files.includes('data/servers.ts'), 'the files to check were found');
  const offending = files.flatMap((f) =>
    readFileSync(join(SRC, f), 'utf8')
      .split('\n')
      .flatMap((line, i) => (/\bfrom\s+'\.\.\/(services|routes|hub)\//.test(line) ? [`src/${f}:${i + 1}: ${line.trim()}`] : [])),
  );
  assert.deepEqual(offending, [], 'the service calls the data layer, never the other way (pass a hook, or call it from the service)');
});

test('transport reaches the database only through services: routes, the hub and auth import no data module', () => {
  const files = [...sources(join(SRC, 'routes')), ...sources(join(SRC, 'hub')), join(SRC, 'auth.ts'), join(SRC, 'app.ts')].map((f) => relative(SRC, f).split('\\').join('/'));
  assert.ok(files.includes('routes/waf.ts') && files.includes('hub/hub.ts') && files.includes('auth.ts'), 'the files to check were found');
  const offending = files.flatMap((f) =>
    readFileSync(join(SRC, f), 'utf8')
      .split('\n')
      .flatMap((line, i) => (/\bfrom\s+'(\.\.?\/)+data\//.test(line) ? [`src/${f}:${i + 1}: ${line.trim()}`] : [])),
  );
  assert.deepEqual(offending, [], 'call a service function instead (the service reads through src/data/)');
});
