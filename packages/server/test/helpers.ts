import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';
import { after } from 'node:test';
import pg from 'pg';
import assert from 'node:assert/strict';
import { Kysely, Migrator } from 'kysely';
import { OwnSchemaPostgresDialect } from '../src/db/own-schema-dialect.js';
import { buildApp, type AppOptions } from '../src/app.js';
import type { ServiceContext } from '../src/context.js';
import { dropSchema, migrate, openDatabase, type OpenDatabase } from '../src/db/database.js';
import type { DB } from '../src/db/schema.js';
import { PGliteDialect } from 'kysely-pglite-dialect';
import { DEFAULT_PLANS } from '../src/plans.js';
import { cachedInTmp } from '../../../test/support/tmp-cache.js';
import type { App } from '../src/routes/types.js';

export const ADMIN_TOKEN = 'test-admin-token';
// No test reaches the Internet: a control plane started in a test fetches no crawler lists unless
// the test names its own (a loopback server's).
process.env.RAMPART_CRAWLER_RANGES ??= 'off';
const DEFAULT_PG_URL = 'postgres://postgres@127.0.0.1:5432/test';

let pgUrl: Promise<string | undefined> | undefined;

/**
 * The PostgreSQL the storage suites run against: RAMPART_TEST_DATABASE_URL when set (CI sets it, and
 * then it must answer), otherwise the local default when one answers, otherwise none.
 */
export function postgresUrl(): Promise<string | undefined> {
  pgUrl ??= (async () => {
    const explicit = process.env.RAMPART_TEST_DATABASE_URL;
    if (explicit === 'off') return undefined;
    const url = explicit || DEFAULT_PG_URL;
    // 10 s: a loaded machine (the suite runs two files at once) can take seconds to accept a connection.
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
    try {
      await client.connect();
      await client.end();
      return url;
    } catch (err) {
      if (explicit) throw new Error(`RAMPART_TEST_DATABASE_URL=${explicit} does not answer: ${String(err)}`);
      return undefined;
    }
  })();
  return pgUrl;
}

export type Backend = 'pglite' | 'postgres';

/** The backends to run storage-dependent suites on: PGlite always, PostgreSQL when reachable. */
export async function backends(): Promise<Backend[]> {
  return (await postgresUrl()) ? ['pglite', 'postgres'] : ['pglite'];
}

/**
 * An embedded database that `prepare` leaves in memory, as PGlite's data-directory tarball, made
 * once per version of `sources` (relative to this file) and shared by the test processes through
 * cachedInTmp: a test database starts from it instead of running initdb (about 2 s of CPU).
 */
async function cachedPglite(prefix: string, sources: string[], prepare: (lite: PGlite) => Promise<void>): Promise<Blob> {
  const urls = [...sources, '../../../node_modules/@electric-sql/pglite/package.json'].map((f) => new URL(f, import.meta.url));
  const file = await cachedInTmp(prefix, '.tar', urls, async (path) => {
    const lite = new PGlite();
    await prepare(lite);
    // Nothing here connects to template0 or template1 or creates a database, and a PGlite instance
    // unpacks the whole tarball into memory: without their 16 MB it starts in about two thirds of
    // the CPU (0.43 s instead of 0.6 s).
    await lite.exec("UPDATE pg_database SET datistemplate = false WHERE datname IN ('template0', 'template1')");
    await lite.exec('DROP DATABASE template0');
    await lite.exec('DROP DATABASE template1');
    await lite.exec('CHECKPOINT');
    const dump = await lite.dumpDataDir('none');
    await lite.close();
    writeFileSync(path, Buffer.from(await dump.arrayBuffer()));
  });
  return new Blob([readFileSync(file)]);
}

let template: Promise<Blob> | undefined;

/**
 * An embedded database with every migration run (cachedPglite), so a test database starts from it
 * instead of running initdb and the migrations (about 3 s of CPU).
 */
export function migratedPglite(): Promise<Blob> {
  template ??= cachedPglite('rampart-test-pgdump-', ['../src/db/migrations.ts', '../src/db/database.ts', './helpers.ts'], async (lite) => {
    await migrate(new Kysely<DB>({ dialect: new PGliteDialect(lite) }));
  });
  return template;
}

let empty: Promise<Blob> | undefined;

/** A new embedded database before any migration (cachedPglite): where migrateOver starts. */
function emptyPglite(): Promise<Blob> {
  empty ??= cachedPglite('rampart-test-pgempty-', ['./helpers.ts'], async () => {});
  return empty;
}

export interface TestClock {
  now(): Date;
  set(d: Date): void;
  advance(ms: number): void;
}

export function testClock(start = new Date()): TestClock {
  let t = start.getTime();
  return { now: () => new Date(t), set: (d) => (t = d.getTime()), advance: (ms) => (t += ms) };
}

export interface TestApp {
  app: App;
  ctx: ServiceContext;
  database: OpenDatabase;
  clock: TestClock;
  changed: string[][];
  close(): Promise<void>;
}

/**
 * A fresh app on a fresh database (in-memory PGlite, or a new schema on PostgreSQL). Sign-up is
 * open unless `appOptions` says otherwise (the tests register accounts freely).
 */
export async function makeTestApp(backend: Backend = 'pglite', appOptions: Partial<Omit<AppOptions, 'ctx'>> = {}): Promise<TestApp> {
  // The hook is registered before the first await: node:test attaches it to the test or suite
  // running at that moment, and after an await it would land on the file's root, which may have
  // run its hooks already (a file's top-level await). An app left open keeps its embedded
  // database's timers, and with them the test process, alive.
  let close: () => Promise<void> = async () => {};
  after(() => close());
  const url = backend === 'postgres' ? await postgresUrl() : undefined;
  if (backend === 'postgres' && !url) throw new Error('PostgreSQL is not reachable');
  const schema = url ? `t_${randomBytes(6).toString('hex')}` : undefined;
  const database = await openDatabase({ url, schema, poolSize: 4, initialData: url ? undefined : await migratedPglite() });
  const clock = testClock();
  const changed: string[][] = [];
  const ctx: ServiceContext = { db: database.db, plans: DEFAULT_PLANS, now: clock.now, serversChanged: (ids) => changed.push([...ids]) };
  const app = await buildApp({ ctx, adminToken: ADMIN_TOKEN, signup: 'open', ...appOptions });
  await app.ready();
  let closed = false;
  close = async () => {
    if (closed) return;
    closed = true;
    await app.close();
    await database.close();
    if (url && schema) await dropSchema(url, schema);
  };
  return { app, ctx, database, clock, changed, close };
}

export interface Reply<T = any> {
  status: number;
  body: T;
  headers: Record<string, string | string[] | number | undefined>;
  cookies: { name: string; value: string; [k: string]: unknown }[];
}

export interface CallOptions {
  key?: string;
  cookie?: string;
  admin?: boolean;
  body?: unknown;
  rawBody?: string;
  headers?: Record<string, string>;
}

/** One request through app.inject, JSON in and out. */
export async function call<T = any>(app: App, method: string, url: string, opts: CallOptions = {}): Promise<Reply<T>> {
  const headers: Record<string, string> = { ...(opts.headers ?? {}) };
  if (opts.key) headers['x-api-key'] = opts.key;
  if (opts.cookie) headers.cookie = opts.cookie;
  if (opts.admin) headers.authorization = `Bearer ${ADMIN_TOKEN}`;
  let payload: string | undefined;
  if (opts.rawBody !== undefined) payload = opts.rawBody;
  else if (opts.body !== undefined) payload = JSON.stringify(opts.body);
  if (payload !== undefined && !headers['content-type']) headers['content-type'] = 'application/json';
  const res = await app.inject({ method: method as any, url, headers, ...(payload !== undefined ? { payload } : {}) });
  let body: any = res.body;
  try {
    body = res.body ? JSON.parse(res.body) : undefined;
  } catch {
    /* not JSON */
  }
  return { status: res.statusCode, body, headers: res.headers, cookies: res.cookies as Reply['cookies'] };
}

let emailCounter = 0;

/** A new account through the operator API; returns its id and (on pro/enterprise) its first key. */
export async function newAccount(app: App, plan: 'free' | 'pro' | 'enterprise' = 'pro', balance = 100, password?: string) {
  const email = `user${++emailCounter}-${randomBytes(3).toString('hex')}@example.com`;
  const res = await call<{ accountId: string; apiKey: string | null }>(app, 'POST', '/admin/accounts', {
    admin: true,
    body: { email, plan, balance, ...(password ? { password } : {}) },
  });
  if (res.status !== 201) throw new Error(`account creation failed: ${res.status} ${JSON.stringify(res.body)}`);
  return { email, accountId: res.body.accountId, key: res.body.apiKey as string };
}

/**
 * A database on `backend` migrated up to `until`, where `before` writes rows as they were then;
 * then the remaining migrations run, and `check` reads what they made of the rows.
 */
export async function migrateOver(backend: Backend, until: string, before: (db: Kysely<any>) => Promise<void>, check: (db: Kysely<any>) => Promise<void>): Promise<void> {
  const { PGlite } = await import('@electric-sql/pglite');
  const { PGliteDialect } = await import('kysely-pglite-dialect');
  const { migrationProvider } = await import('../src/db/migrations.js');
  const { migrate } = await import('../src/db/database.js');
  const url = backend === 'postgres' ? await postgresUrl() : undefined;
  const schema = url ? `t_${randomBytes(6).toString('hex')}` : undefined;
  let db: Kysely<any>;
  if (url) {
    const pool = new pg.Pool({ connectionString: url, max: 2, options: `-c search_path=${schema}` });
    await pool.query(`CREATE SCHEMA ${schema}`);
    // As the product opens PostgreSQL: introspection of its own schema only (db/own-schema-dialect.ts).
    db = new Kysely<any>({ dialect: new OwnSchemaPostgresDialect({ pool }) });
  } else {
    db = new Kysely<any>({ dialect: new PGliteDialect(new PGlite({ loadDataDir: await emptyPglite() })) });
  }
  try {
    const migrator = new Migrator({ db, provider: migrationProvider, ...(schema ? { migrationTableSchema: schema } : {}) });
    assert.equal((await migrator.migrateTo(until)).error, undefined);
    await before(db);
    await migrate(db, schema);
    await check(db);
  } finally {
    await db.destroy();
    if (url && schema) await dropSchema(url, schema);
  }
}
