import { mkdirSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';
import { Kysely, Migrator, PostgresDialect, sql, type Transaction } from 'kysely';
import { PGliteDialect } from 'kysely-pglite-dialect';
import pg from 'pg';
import { migrationProvider } from './migrations.js';
import type { DB } from './schema.js';

export type Database = Kysely<DB>;
/** The one transaction type of the data-access code. */
export type Tx = Transaction<DB>;

export interface DatabaseOptions {
  /** postgres://... ; when absent the embedded PGlite is used. */
  url?: string | undefined;
  /** PGlite's data directory; absent means in memory (tests). */
  dataDir?: string | undefined;
  /** PostgreSQL only: a schema to create and use, so test suites can share one database. */
  schema?: string | undefined;
  poolSize?: number | undefined;
}

export interface OpenDatabase {
  db: Database;
  kind: 'postgres' | 'pglite';
  /** The PostgreSQL schema in use when one was asked for. */
  schema?: string | undefined;
  close(): Promise<void>;
}

// int8 as a JS number: balances in cents and revisions stay far below 2^53.
pg.types.setTypeParser(20, (v) => Number(v));

export async function openDatabase(options: DatabaseOptions): Promise<OpenDatabase> {
  let db: Database;
  let kind: OpenDatabase['kind'];
  if (options.url) {
    kind = 'postgres';
    if (options.schema && !/^[a-z_][a-z0-9_]{0,62}$/.test(options.schema)) {
      throw new Error(`invalid schema name ${options.schema}`);
    }
    const pool = new pg.Pool({
      connectionString: options.url,
      max: options.poolSize ?? 10,
      ...(options.schema ? { options: `-c search_path=${options.schema}` } : {}),
    });
    if (options.schema) {
      const client = await pool.connect();
      try {
        await client.query(`CREATE SCHEMA IF NOT EXISTS ${options.schema}`);
      } finally {
        client.release();
      }
    }
    db = new Kysely<DB>({ dialect: new PostgresDialect({ pool }) });
  } else {
    kind = 'pglite';
    if (options.dataDir) mkdirSync(options.dataDir, { recursive: true });
    const lite = options.dataDir ? new PGlite(options.dataDir) : new PGlite();
    await lite.waitReady;
    db = new Kysely<DB>({ dialect: new PGliteDialect(lite) });
  }
  try {
    // Kysely's own migration tables go in the schema the connection uses (search_path may name one).
    const schema = kind === 'postgres' ? (options.schema ?? (await sql<{ s: string }>`select current_schema() as s`.execute(db)).rows[0]?.s) : undefined;
    await migrate(db, schema);
  } catch (err) {
    await db.destroy();
    throw err;
  }
  return { db, kind, schema: options.url ? options.schema : undefined, close: () => db.destroy() };
}

export async function migrate(db: Database, schema?: string): Promise<void> {
  // Named explicitly when suites share a database, so Kysely's own tables land in the suite's schema.
  const migrator = new Migrator({ db, provider: migrationProvider, ...(schema ? { migrationTableSchema: schema } : {}) });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === 'Error');
    throw new Error(`migration ${failed?.migrationName ?? '?'} failed: ${String(error)}`);
  }
}

/** Drops a test schema (PostgreSQL only). */
export async function dropSchema(url: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  } finally {
    await client.end();
  }
}

export { sql };
