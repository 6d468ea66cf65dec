// Fastify's own schema compilers (Ajv for what comes in, fast-json-stringify for what goes out),
// compiling each route's schema when the route is first used instead of when the app starts.
// Compiling all of them (about 65 routes: some 50 request schemas and over 100 answer schemas, one
// per status) took most of a second of CPU on every start, and a process uses few of them: a test
// builds an app for a route or two, and a control plane that only agents talk to uses a handful.
// A schema is compiled on its route's first request, in milliseconds. The apps a process builds
// share one Ajv instance (the factories below), which compiles a schema object once.
// test/schema-compilers.test.ts compiles every schema the app hands these compilers with Fastify's
// defaults, so a schema that does not compile fails a test, not a first request.

import ValidatorSelector from '@fastify/ajv-compiler';
import SerializerSelector from '@fastify/fast-json-stringify-compiler';
import type { FastifyServerOptions } from 'fastify';

type Compilers = NonNullable<NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']>;
/** What Fastify hands a compiler: the schema and where it is used. */
type RouteSchema = { schema: unknown; method: string; url: string };
/**
 * A compiled validator: true or false, and on false its `errors`, which Fastify reads from the
 * function. Fastify hands Ajv's own functions the request as the parent of the value, so that
 * coercion or defaults can replace a whole request part; the wrapper has no such parent, which
 * is right only while app.ts keeps coerceTypes, useDefaults and removeAdditional off.
 */
type Validate = ((data: unknown) => unknown) & { errors?: unknown };
type Compile<F> = (route: RouteSchema) => F;
// @fastify/ajv-compiler types its compiler as Ajv's compile(schema); Fastify calls it with the route's
// definition (lib/validation.js), as the fast-json-stringify compiler is typed.
type Factory<F> = (externalSchemas: unknown, options: unknown) => Compile<F>;

function lazy<F extends (data: unknown) => unknown>(compile: Compile<F>, route: RouteSchema, after?: (compiled: F) => void): (data: unknown) => unknown {
  let compiled: F | undefined;
  return (data) => {
    compiled ??= compile(route);
    const result = compiled(data);
    after?.(compiled);
    return result;
  };
}

const ajv = (ValidatorSelector as unknown as () => Factory<Validate>)();
const fastJsonStringify = (SerializerSelector as unknown as () => Factory<(data: unknown) => string>)();

/** Fastify's `schemaController` option: its default compilers, each schema compiled on first use. */
export const lazySchemaController = {
  compilersFactory: {
    buildValidator: ((externalSchemas: unknown, options: unknown) => {
      const compile = ajv(externalSchemas, options);
      return (route: RouteSchema) => {
        const validate: Validate = lazy(compile, route, (compiled) => (validate.errors = compiled.errors));
        return validate;
      };
    }) as unknown as NonNullable<Compilers['buildValidator']>,
    buildSerializer: ((externalSchemas: unknown, options: unknown) => {
      const compile = fastJsonStringify(externalSchemas, options);
      return (route: RouteSchema) => lazy(compile, route);
    }) as unknown as NonNullable<Compilers['buildSerializer']>,
  },
};
