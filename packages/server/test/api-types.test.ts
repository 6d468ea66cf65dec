import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { API_DIR, generateApiFiles } from '../scripts/openapi.js';

// The committed API description and the dashboard's types are what the control plane of this
// commit describes: a route or schema changed without `npm run openapi -w packages/server`
// fails here, naming the file.

test('src/api/openapi.json and schema.d.ts are fresh: regenerated, they are the same bytes', async () => {
  const fresh = await generateApiFiles();
  for (const [name, text] of Object.entries(fresh)) {
    assert.ok(readFileSync(join(API_DIR, name), 'utf8') === text, `packages/dashboard/src/api/${name} is stale: run npm run openapi -w packages/server`);
  }
});
