import { cpSync, mkdirSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';
import { Kysely, Migrator, sql, type MigrationProvider, type Transaction } from 'kysely';
import { PGliteDialect } from 'kysely-pglite-dialect';
import { basename, dirname, join, resolve } from 'node:path';
import pg from 'pg';
import { migrationProvider } from './migrations.js';
import { OwnSchemaPostgresDialect } from './own-schema-dialect.js';
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
  /** false: opened as found, not migrated (a restore builds the schema itself). */
  migrate?: boolean | undefined;
  /** The migrations to run: this release's unless a test passes others. */
  migrations?: MigrationProvider | undefined;
  /** Told where the embedded database was copied before an upgrade migrated it. */
  onSnapshot?: ((path: string) => void) | undefined;
  /**
   * In-memory PGlite only: starts from this data directory (a tarball from PGlite's `dumpDataDir`)
   * instead of an empty one; tests pass an already migrated one, skipping initdb.
   */
  initialData?: Blob | undefined;
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
    db = new Kysely<DB>({ dialect: new OwnSchemaPostgresDialect({ pool }) });
  } else {
    kind = 'pglite';
    if (options.dataDir) mkdirSync(options.dataDir, { recursive: true });
    db = await openPglite(options.dataDir, options.initialData);
  }
  const provider = options.migrations ?? migrationProvider;
  let snapshot: string | undefined;
  try {
    if (options.migrate !== false) {
      // An upgrade of the embedded database is preceded by a copy of it, taken while it is closed.
      const pending = options.dataDir && kind === 'pglite' ? await pendingUpgrade(db, provider) : undefined;
      if (pending) {
        await db.destroy();
        snapshot = snapshotDataDir(options.dataDir!, pending);
        options.onSnapshot?.(snapshot);
        db = await openPglite(options.dataDir);
      }
      // Kysely's own migration tables go in the schema the connection uses (search_path may name one).
      const schema = kind === 'postgres' ? (options.schema ?? (await sql<{ s: string }>`select current_schema() as s`.execute(db)).rows[0]?.s) : undefined;
      await migrate(db, schema, provider);
    }
  } catch (err) {
    await db.destroy();
    if (!snapshot) throw err;
    throw new Error(
      `${(err instanceof Error ? err.message : String(err)).replace(/\.+$/, '')}. The database in ${options.dataDir} is left as it was before this start (the migrations run in one transaction) ` +
        `and the previous release still opens it; a copy taken before migrating is in ${snapshot}`,
    );
  }
  return { db, kind, schema: options.url ? options.schema : undefined, close: () => db.destroy() };
}

/** An embedded database in `dataDir`, or in memory (started from `initialData` when given). */
async function openPglite(dataDir: string | undefined, initialData?: Blob): Promise<Database> {
  const lite = dataDir ? new PGlite(dataDir) : new PGlite(initialData ? { loadDataDir: initialData } : {});
  await lite.waitReady;
  return new Kysely<DB>({ dialect: new PGliteDialect(lite) });
}

/** The first migration an upgrade would run: some ran before and some have not; undefined otherwise. */
async function pendingUpgrade(db: Database, provider: MigrationProvider): Promise<string | undefined> {
  const migrations = await new Migrator({ db, provider }).getMigrations();
  if (!migrations.some((m) => m.executedAt)) return undefined; // a new database: nothing to keep
  return migrations.find((m) => !m.executedAt)?.name;
}

/**
 * Copies the (closed) embedded database beside itself, as DIR.before-<migration>-<time>: a data
 * directory the previous release opens as it is. The copy is renamed into place once whole; then
 * older copies taken before the same migration go (the newest holds the latest data of that
 * schema), so a service restarted after a failed migration does not fill the disk with copies.
 */
function snapshotDataDir(dataDir: string, migration: string): string {
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const prefix = `${basename(resolve(dataDir))}.before-${migration}-`;
  const parent = dirname(resolve(dataDir));
  const target = join(parent, `${prefix}${stamp}`);
  try {
    cpSync(dataDir, `${target}.partial`, { recursive: true, errorOnExist: true, force: false });
    renameSync(`${target}.partial`, target);
  } catch (err) {
    throw new Error(`not migrating: the embedded database could not be copied to ${target} before migration ${migration}: ${String(err)}`);
  }
  for (const name of readdirSync(parent)) {
    if (name.startsWith(prefix) && join(parent, name) !== target) rmSync(join(parent, name), { recursive: true, force: true });
  }
  return target;
}

/**
 * Runs the migrations not yet applied, in name order. Parallel work lands migrations out of name
 * order (a release may hold 0018 before 0014 exists), so one named before the last applied still runs.
 */
export async function migrate(db: Database, schema?: string, provider: MigrationProvider = migrationProvider): Promise<void> {
  // Named explicitly when suites share a database, so Kysely's own tables land in the suite's schema.
  const migrator = new Migrator({ db, provider, allowUnorderedMigrations: true, ...(schema ? { migrationTableSchema: schema } : {}) });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === 'Error');
    // What a migration threw: an Error as it prints itself (anything else as JSON, never [object Object]).
    const why = error instanceof Error ? String(error) : JSON.stringify(error);
    throw new Error(failed ? `migration ${failed.migrationName} failed: ${why}` : `migrating failed: ${why}`);
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

/** Whether the database answers a trivial query within `timeoutMs`: undefined when it does, else why not. */
export async function databaseProblem(db: Database, timeoutMs: number): Promise<string | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<string>((resolve) => (timer = setTimeout(() => resolve(`no answer within ${timeoutMs} ms`), timeoutMs)));
  try {
    return await Promise.race([sql`select 1`.execute(db).then(() => undefined), late]);
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  } finally {
    clearTimeout(timer);
  }
}
