import assert from 'node:assert/strict';
import { test } from 'node:test';
import ValidatorSelector from '@fastify/ajv-compiler';
import SerializerSelector from '@fastify/fast-json-stringify-compiler';
import { lazySchemaController } from '../src/schema-compilers.js';
import { call, makeTestApp, newAccount } from './helpers.js';

// The app's schema compilers compile a route's schema on its first request (src/schema-compilers.ts).
// A schema that does not compile would then fail on that request instead of at start: this file
// compiles every schema the app hands them, up front, with Fastify's default compilers.

type Route = { schema: unknown; method: string; url: string; httpPart?: string; httpStatus?: string };
type Factory = (externalSchemas: unknown, options: unknown) => (route: Route) => (data: unknown) => unknown;

const factories = lazySchemaController.compilersFactory as unknown as { buildValidator: Factory; buildSerializer: Factory };
/** The routes handed to each compiler, with what the compiler was built from (the shared schemas, the options). */
const seen = { validators: [] as [Route, unknown, unknown][], serializers: [] as [Route, unknown, unknown][] };
const lazyValidator = factories.buildValidator;
const lazySerializer = factories.buildSerializer;
factories.buildValidator = (ext, opts) => {
  const compile = lazyValidator(ext, opts);
  return (route) => (seen.validators.push([route, ext, opts]), compile(route));
};
factories.buildSerializer = (ext, opts) => {
  const compile = lazySerializer(ext, opts);
  return (route) => (seen.serializers.push([route, ext, opts]), compile(route));
};

test('every schema of every route compiles with Fastify’s own compilers', async () => {
  const { app } = await makeTestApp();
  assert.ok(seen.validators.length > 40, `the app's validators were seen (${seen.validators.length})`);
  assert.ok(seen.serializers.length > 100, `the app's serializers were seen (${seen.serializers.length})`);
  const ajv = (ValidatorSelector as unknown as () => Factory)();
  const fjs = (SerializerSelector as unknown as () => Factory)();
  for (const [route, ext, opts] of seen.validators) assert.doesNotThrow(() => ajv(ext, opts)(route), `${route.method} ${route.url} ${route.httpPart}`);
  for (const [route, ext, opts] of seen.serializers) assert.doesNotThrow(() => fjs(ext, opts)(route), `${route.method} ${route.url} ${route.httpStatus}`);
  await app.close();
});

test('through the lazy compilers: a bad body is refused naming the field, every time; a good one is answered by its serializer', async () => {
  const { app } = await makeTestApp();
  const { key } = await newAccount(app);
  // The first request compiles the route's validator, the second uses it: both answers carry the
  // validator's errors, which Fastify reads from the function it called (the wrapper copies them).
  const bad = await call(app, 'POST', '/api/servers', { key, body: { name: 7 } });
  assert.equal(bad.status, 400);
  assert.match(bad.body.error, /name/);
  const again = await call(app, 'POST', '/api/servers', { key, body: {} });
  assert.equal(again.status, 400);
  assert.match(again.body.error, /name/);
  const good = await call(app, 'POST', '/api/servers', { key, body: { name: 'edge-1' } });
  assert.equal(good.status, 201, JSON.stringify(good.body));
  assert.equal(good.body.name, 'edge-1');
  assert.equal(typeof good.body.connectionToken, 'string', 'ServerWithToken, written by its serializer');
});
