import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable, Writable } from 'node:stream';
import { finished } from 'node:stream/promises';
import { createGzip } from 'node:zlib';
import { sql, type MigrationProvider } from 'kysely';
import { RAMPART_VERSION } from '@rampart/protocol/version';
import { migrationProvider } from './migrations.js';
import { migrate, openDatabase, type Database, type DatabaseOptions } from './database.js';

// Logical backups of the whole database (docs/operations.md "Backup and restore"): one JSON-lines
// file, gzip'd by the caller, the same from PGlite and PostgreSQL and restorable into either, so
// it is also the way from the embedded database to PostgreSQL. Its lines, in order:
//   {"format":"rampart-backup","formatVersion":1,"rampartVersion","createdAt","migrations":[...],"tables":[...]}
//   {"table":"accounts","columns":[...]}, then one {"row":{...}} per row (PostgreSQL's row_to_json,
//   read back by json_populate_recordset, so every type round-trips in its own text form)
//   {"sequence":"...","lastValue":N,"isCalled":true}
//   {"end":true,"tables":N,"rows":N}
// Tables come parents first (foreign keys); Kysely's own migration tables are left out: the
// header's migrations list rebuilds them.

export const BACKUP_FORMAT = 'rampart-backup';
export const BACKUP_FORMAT_VERSION = 1;

/** Kysely's migration bookkeeping: recreated by migrating, never copied. */
const MIGRATION_TABLES = new Set(['kysely_migration', 'kysely_migration_lock']);
const FETCH_ROWS = 1000;
/** Rows per insert when restoring (one json_populate_recordset each). */
const INSERT_ROWS = 500;

export interface BackupHeader {
  format: typeof BACKUP_FORMAT;
  formatVersion: number;
  rampartVersion: string;
  createdAt: string;
  /** The migrations applied to the database backed up, in order: its schema version is the last. */
  migrations: string[];
  tables: string[];
}

export interface BackupSummary {
  rampartVersion: string;
  createdAt: string;
  schemaVersion: string | null;
  tables: number;
  rows: number;
}

/** Thrown for a backup or a target the operator must do something about; the message says what. */
export class BackupError extends Error {}

const ident = (name: string) => sql.id(name);

/** The base tables of the connection's schema, parents before the tables that reference them. */
export async function tablesInDependencyOrder(db: Database): Promise<string[]> {
  const tables = (
    await sql<{ name: string }>`select c.relname as name from pg_class c
      where c.relnamespace = current_schema()::regnamespace and c.relkind in ('r', 'p') order by c.relname`.execute(db)
  ).rows.map((r) => r.name);
  const edges = (
    await sql<{ child: string; parent: string }>`select c.relname as child, p.relname as parent from pg_constraint k
      join pg_class c on c.oid = k.conrelid join pg_class p on p.oid = k.confrelid
      where k.contype = 'f' and c.relnamespace = current_schema()::regnamespace and p.relnamespace = current_schema()::regnamespace`.execute(db)
  ).rows;
  const ordered: string[] = [];
  const placed = new Set<string>();
  const visit = (t: string, path: Set<string>) => {
    if (placed.has(t) || path.has(t)) return; // a cycle is cut where it is met; self-references are ignored
    path.add(t);
    for (const e of edges) if (e.child === t && e.parent !== t) visit(e.parent, path);
    placed.add(t);
    ordered.push(t);
  };
  for (const t of tables) visit(t, new Set());
  return ordered;
}

async function columnsOf(db: Database, table: string): Promise<string[]> {
  const r = await sql<{ name: string }>`select a.attname as name from pg_attribute a
    where a.attrelid = (quote_ident(current_schema()) || '.' || quote_ident(${table}))::regclass and a.attnum > 0 and not a.attisdropped
    order by a.attnum`.execute(db);
  return r.rows.map((x) => x.name);
}

async function sequencesOf(db: Database): Promise<string[]> {
  const r = await sql<{ name: string }>`select c.relname as name from pg_class c
    where c.relnamespace = current_schema()::regnamespace and c.relkind = 'S' order by c.relname`.execute(db);
  return r.rows.map((x) => x.name);
}

async function appliedMigrations(db: Database): Promise<string[]> {
  const exists = await sql<{ t: string | null }>`select to_regclass(quote_ident(current_schema()) || '.kysely_migration')::text as t`.execute(db);
  if (!exists.rows[0]?.t) return [];
  return (await sql<{ name: string }>`select name from kysely_migration order by name`.execute(db)).rows.map((r) => r.name);
}

/** Writes a line and waits while the stream is full. */
async function writeLine(out: Writable, line: string): Promise<void> {
  if (!out.write(`${line}\n`)) await once(out, 'drain');
}

/**
 * Writes a consistent backup of the whole database to `out` (left open): one repeatable-read,
 * read-only transaction sees every table at the same instant while the control plane goes on.
 */
export async function writeBackup(db: Database, out: Writable, now: Date = new Date()): Promise<BackupSummary> {
  return db
    .transaction()
    .setIsolationLevel('repeatable read')
    .execute(async (tx) => {
      await sql`set transaction read only`.execute(tx);
      const trx = tx as unknown as Database;
      const migrations = await appliedMigrations(trx);
      const tables = (await tablesInDependencyOrder(trx)).filter((t) => !MIGRATION_TABLES.has(t));
      const header: BackupHeader = { format: BACKUP_FORMAT, formatVersion: BACKUP_FORMAT_VERSION, rampartVersion: RAMPART_VERSION, createdAt: now.toISOString(), migrations, tables };
      await writeLine(out, JSON.stringify(header));
      let rows = 0;
      for (const table of tables) {
        await writeLine(out, JSON.stringify({ table, columns: await columnsOf(trx, table) }));
        // A cursor: a large table is read a thousand rows at a time, never whole.
        await sql`declare rampart_backup no scroll cursor for select row_to_json(t)::text as j from ${ident(table)} t`.execute(tx);
        for (;;) {
          const batch = (await sql<{ j: string }>`fetch forward ${sql.lit(FETCH_ROWS)} from rampart_backup`.execute(tx)).rows;
          if (batch.length) await writeLine(out, batch.map((r) => `{"row":${r.j}}`).join('\n'));
          rows += batch.length;
          if (batch.length < FETCH_ROWS) break;
        }
        await sql`close rampart_backup`.execute(tx);
      }
      for (const sequence of await sequencesOf(trx)) {
        const s = (await sql<{ last_value: string | number; is_called: boolean }>`select last_value, is_called from ${ident(sequence)}`.execute(tx)).rows[0]!;
        await writeLine(out, JSON.stringify({ sequence, lastValue: String(s.last_value), isCalled: s.is_called }));
      }
      await writeLine(out, JSON.stringify({ end: true, tables: tables.length, rows }));
      return { rampartVersion: RAMPART_VERSION, createdAt: header.createdAt, schemaVersion: migrations.at(-1) ?? null, tables: tables.length, rows };
    });
}

/**
 * A gzip'd backup in a new private temporary file: the database is read as fast as it reads (on
 * PGlite its one connection is held meanwhile), then the file goes out at the client's pace.
 */
export async function backupToTempFile(db: Database, now: Date = new Date()): Promise<{ path: string; remove(): Promise<void>; summary: BackupSummary }> {
  const dir = await mkdtemp(join(tmpdir(), 'rampart-backup-'));
  const remove = () => rm(dir, { recursive: true, force: true });
  try {
    const path = join(dir, 'backup.jsonl.gz');
    const file = createWriteStream(path, { mode: 0o600 });
    const gzip = createGzip();
    gzip.pipe(file);
    const summary = await writeBackup(db, gzip, now);
    gzip.end();
    await finished(file);
    return { path, remove, summary };
  } catch (err) {
    await remove();
    throw err;
  }
}

type Line =
  | { kind: 'table'; table: string; columns: string[] }
  | { kind: 'row'; json: string }
  | { kind: 'sequence'; sequence: string; lastValue: string; isCalled: boolean }
  | { kind: 'end'; tables: number; rows: number };

/** The lines of a backup (already gunzipped): the header first, then the rest, checked as they come. */
export async function* backupLines(input: Readable): AsyncGenerator<BackupHeader | Line> {
  let n = 0;
  let ended = false;
  for await (const text of createInterface({ input, crlfDelay: Infinity })) {
    n++;
    if (text === '') continue;
    if (ended) throw new BackupError(`line ${n}: the backup goes on after its end line`);
    if (n === 1) {
      yield parseHeader(text);
      continue;
    }
    const line = parseLine(text, n);
    if (line.kind === 'end') ended = true;
    yield line;
  }
  if (n === 0) throw new BackupError('the file is empty: not a rampart backup');
  if (!ended) throw new BackupError('the backup is incomplete: it has no end line (was it cut short?)');
}

function parseJson(text: string, n: number): Record<string, unknown> {
  try {
    const v = JSON.parse(text) as unknown;
    if (typeof v === 'object' && v !== null && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch {
    /* below */
  }
  throw new BackupError(`line ${n}: not a JSON object`);
}

function parseHeader(text: string): BackupHeader {
  let h: Record<string, unknown>;
  try {
    h = parseJson(text, 1);
  } catch {
    throw new BackupError('not a rampart backup (its first line is not a backup header)');
  }
  if (h.format !== BACKUP_FORMAT) throw new BackupError('not a rampart backup (its first line is not a backup header)');
  if (h.formatVersion !== BACKUP_FORMAT_VERSION) {
    throw new BackupError(`backup format ${String(h.formatVersion)} is not known to rampart ${RAMPART_VERSION} (it reads format ${BACKUP_FORMAT_VERSION})`);
  }
  const strings = (v: unknown) => Array.isArray(v) && v.every((x) => typeof x === 'string');
  if (!strings(h.migrations) || !strings(h.tables) || typeof h.rampartVersion !== 'string' || typeof h.createdAt !== 'string') {
    throw new BackupError('line 1: the backup header is damaged');
  }
  return h as unknown as BackupHeader;
}

function parseLine(text: string, n: number): Line {
  // Rows are most lines: passed on as the JSON text PostgreSQL reads back, without a parse here.
  if (text.startsWith('{"row":') && text.endsWith('}')) return { kind: 'row', json: text.slice(7, -1) };
  const v = parseJson(text, n);
  if (typeof v.table === 'string' && Array.isArray(v.columns)) return { kind: 'table', table: v.table, columns: v.columns.map(String) };
  if (typeof v.sequence === 'string' && typeof v.lastValue === 'string' && typeof v.isCalled === 'boolean') {
    return { kind: 'sequence', sequence: v.sequence, lastValue: v.lastValue, isCalled: v.isCalled };
  }
  if (v.end === true && typeof v.tables === 'number' && typeof v.rows === 'number') return { kind: 'end', tables: v.tables, rows: v.rows };
  throw new BackupError(`line ${n}: not a line of a rampart backup`);
}

/** Reads a whole backup (gunzipped) and checks it: what it holds, or a BackupError. */
export async function inspectBackup(input: Readable): Promise<BackupSummary> {
  let header: BackupHeader | undefined;
  let rows = 0;
  let tables = 0;
  for await (const line of backupLines(input)) {
    if ('format' in line) header = line;
    else if (line.kind === 'row') rows++;
    else if (line.kind === 'table') tables++;
    else if (line.kind === 'end' && (line.rows !== rows || line.tables !== tables)) throw new BackupError('the backup is damaged: its end line does not count what it holds');
  }
  return { rampartVersion: header!.rampartVersion, createdAt: header!.createdAt, schemaVersion: header!.migrations.at(-1) ?? null, tables, rows };
}

export interface RestoreOptions extends Pick<DatabaseOptions, 'url' | 'dataDir' | 'schema'> {
  /** Replace whatever the target holds; without it a target holding any row is refused. */
  force?: boolean;
}

/** This rampart's migrations that the backup's database had applied: what builds its schema. */
function migrationsOf(header: BackupHeader): MigrationProvider {
  return {
    async getMigrations() {
      const all = await migrationProvider.getMigrations();
      return Object.fromEntries(Object.entries(all).filter(([name]) => header.migrations.includes(name)));
    },
  };
}

/** Tables of the target that hold rows (Kysely's bookkeeping aside). */
async function nonEmptyTables(db: Database): Promise<string[]> {
  const found: string[] = [];
  for (const table of await tablesInDependencyOrder(db)) {
    if (MIGRATION_TABLES.has(table)) continue;
    const r = await sql<{ any: boolean }>`select exists (select 1 from ${ident(table)}) as any`.execute(db);
    if (r.rows[0]?.any) found.push(table);
  }
  return found;
}

/** Drops the tables, views and sequences of the connection's schema (the target's old contents). */
async function clearSchema(db: Database): Promise<void> {
  const r = await sql<{ name: string; kind: string }>`select c.relname as name, c.relkind as kind from pg_class c
    where c.relnamespace = current_schema()::regnamespace and c.relkind in ('r', 'p', 'v', 'm', 'S')`.execute(db);
  const drop = { r: 'table', p: 'table', v: 'view', m: 'materialized view', S: 'sequence' } as Record<string, string>;
  for (const kind of ['v', 'm', 'r', 'p', 'S']) {
    for (const o of r.rows.filter((x) => x.kind === kind)) await sql`drop ${sql.raw(drop[kind]!)} if exists ${ident(o.name)} cascade`.execute(db);
  }
}

/**
 * Restores a backup (gunzipped) into the database `options` name: the schema is built by this
 * rampart's migrations up to the backup's, the rows and sequences are loaded in one transaction,
 * then the later migrations run, so a backup of an older release restores into a newer one.
 */
export async function restoreBackup(options: RestoreOptions, input: Readable): Promise<BackupSummary> {
  const lines = backupLines(input);
  const first = await lines.next();
  const header = first.value as BackupHeader;
  const known = Object.keys(await migrationProvider.getMigrations());
  const unknown = header.migrations.filter((m) => !known.includes(m));
  if (unknown.length) {
    throw new BackupError(
      `the backup was made by rampart ${header.rampartVersion}, whose schema has migrations this rampart (${RAMPART_VERSION}) does not know: ${unknown.join(', ')}; restore it with that release or a newer one`,
    );
  }
  const target = await openDatabase({ url: options.url, dataDir: options.dataDir, schema: options.schema, migrate: false });
  try {
    const db = target.db;
    const holding = await nonEmptyTables(db);
    if (holding.length && !options.force) {
      throw new BackupError(
        `the target database is not empty (rows in ${holding.slice(0, 5).join(', ')}${holding.length > 5 ? ', ...' : ''}): restore into an empty one, or pass --force to replace what it holds`,
      );
    }
    await clearSchema(db);
    const schema = target.kind === 'postgres' ? (await sql<{ s: string }>`select current_schema() as s`.execute(db)).rows[0]?.s : undefined;
    // Exactly the backup's migrations (not all those named before its last: they may have landed
    // out of name order), then its rows, then this release's other migrations.
    await migrate(db, schema, migrationsOf(header));
    const summary = await db.transaction().execute((tx) => loadRows(tx as unknown as Database, header, lines));
    await migrate(db, schema);
    return summary;
  } finally {
    await target.close();
  }
}

async function loadRows(db: Database, header: BackupHeader, lines: AsyncGenerator<BackupHeader | Line>): Promise<BackupSummary> {
  let table: string | undefined;
  let batch: string[] = [];
  let rows = 0;
  let tables = 0;
  const flush = async () => {
    if (!table || batch.length === 0) return;
    await sql`insert into ${ident(table)} select * from json_populate_recordset(null::${ident(table)}, ${`[${batch.join(',')}]`}::json)`.execute(db);
    rows += batch.length;
    batch = [];
  };
  for await (const line of lines) {
    if ('format' in line) continue;
    if (line.kind === 'row') {
      if (!table) throw new BackupError('the backup is damaged: a row before any table');
      batch.push(line.json);
      if (batch.length >= INSERT_ROWS) await flush();
      continue;
    }
    await flush();
    if (line.kind === 'table') {
      const columns = await columnsOf(db, line.table).catch(() => []);
      if (columns.join(',') !== line.columns.join(',')) {
        throw new BackupError(`table ${line.table} of the backup does not match the schema its migrations build (columns ${line.columns.join(', ')})`);
      }
      table = line.table;
      tables++;
    } else if (line.kind === 'sequence') {
      await sql`select setval(quote_ident(${line.sequence})::regclass, ${line.lastValue}::bigint, ${line.isCalled})`.execute(db);
    } else if (line.rows !== rows || line.tables !== tables) {
      throw new BackupError('the backup is damaged: its end line does not count what it holds');
    }
  }
  return { rampartVersion: header.rampartVersion, createdAt: header.createdAt, schemaVersion: header.migrations.at(-1) ?? null, tables, rows };
}
