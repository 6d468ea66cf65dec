import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { after, describe, test } from 'node:test';
import { gunzipSync } from 'node:zlib';
import { sql } from 'kysely';
import { BackupError, restoreBackup, tablesInDependencyOrder } from '../src/db/backup.js';
import { dropSchema, openDatabase, type Database, type OpenDatabase } from '../src/db/database.js';
import { backends, call, makeTestApp, newAccount, postgresUrl, type Backend, type TestApp } from './helpers.js';

// Backups and restores (GET /admin/backup, rampart restore): every table of the database, found in
// the database itself, holds rows before the backup, and holds the same rows after a restore, on
// every pair of storages (PGlite and PostgreSQL, both ways: the way from the embedded database to
// PostgreSQL). A table added later gets a generated row here without anyone listing it.

/** Kysely's bookkeeping: rebuilt by the restore's migrations, compared by migration name. */
const MIGRATION_TABLES = ['kysely_migration', 'kysely_migration_lock'];

interface Column {
  name: string;
  type: string;
  nullable: boolean;
  parent: { table: string; column: string } | null;
}

async function columns(db: Database, table: string): Promise<Column[]> {
  const r = await sql<{ name: string; type: string; nullable: boolean; parent_table: string | null; parent_column: string | null }>`
    select a.attname as name, format_type(a.atttypid, a.atttypmod) as type, not a.attnotnull as nullable,
      (select p.relname from pg_constraint k join pg_class p on p.oid = k.confrelid
        where k.conrelid = a.attrelid and k.contype = 'f' and a.attnum = any (k.conkey) limit 1) as parent_table,
      (select pa.attname from pg_constraint k join pg_attribute pa on pa.attrelid = k.confrelid and pa.attnum = k.confkey[array_position(k.conkey, a.attnum)]
        where k.conrelid = a.attrelid and k.contype = 'f' and a.attnum = any (k.conkey) limit 1) as parent_column
    from pg_attribute a
    where a.attrelid = (quote_ident(current_schema()) || '.' || quote_ident(${table}))::regclass and a.attnum > 0 and not a.attisdropped
    order by a.attnum`.execute(db);
  return r.rows.map((c) => ({ name: c.name, type: c.type, nullable: c.nullable, parent: c.parent_table ? { table: c.parent_table, column: c.parent_column! } : null }));
}

/** A value of each type that is easy to get wrong on the way through JSON. */
function valueFor(type: string, tag: string): unknown {
  if (type === 'uuid') return randomUUID();
  if (type === 'text' || type.startsWith('character varying')) return `${tag} "quoted" \\ back\nline é 中文 🚀`;
  if (type === 'bigint') return '9007199254740993'; // past 2^53: a JavaScript number would lose it
  if (type === 'integer') return 2147483647;
  if (type === 'smallint') return 32767;
  if (type === 'boolean') return false;
  if (type === 'timestamp with time zone') return '2026-02-03T04:05:06.123456Z'; // microseconds, past what a Date holds
  if (type === 'jsonb' || type === 'json') return JSON.stringify({ k: [1, 'é', null, { n: 1.5, big: 12345678901234567890 }], s: 'a"b' });
  if (type === 'double precision') return 0.1 + 0.2;
  if (type === 'numeric') return '12345678901234567890.000000000001';
  if (type === 'bytea') return Buffer.from([0, 1, 254, 255]);
  if (type === 'text[]') return ['a', 'b "c"', ''];
  if (type === 'bigint[]') return ['9007199254740993', '0', '7']; // as text: past 2^53
  throw new Error(`backup.test.ts has no value for columns of type ${type}: add one`);
}

/**
 * One generated row in every table that the app's own use left empty, parents first; a column
 * that references another table takes a value of the row there.
 */
async function fillEmptyTables(db: Database): Promise<void> {
  for (const table of await tablesInDependencyOrder(db)) {
    if (MIGRATION_TABLES.includes(table)) continue;
    const has = await sql<{ n: number }>`select count(*)::int as n from ${sql.id(table)}`.execute(db);
    if (has.rows[0]!.n > 0) continue;
    const cols = await columns(db, table);
    const values: unknown[] = [];
    for (const c of cols) {
      if (c.parent) {
        const parent = await sql<{ v: unknown }>`select ${sql.id(c.parent.column)}::text as v from ${sql.id(c.parent.table)} limit 1`.execute(db);
        values.push(parent.rows[0]?.v ?? null);
      } else values.push(valueFor(c.type, `${table}.${c.name}`));
    }
    await sql`insert into ${sql.id(table)} (${sql.join(cols.map((c) => sql.id(c.name)))}) values (${sql.join(values.map((v, i) => sql`${v}::${sql.raw(cols[i]!.type)}`))})`.execute(db);
  }
}

/** Every sequence moved on from where a new database starts it, so a restore that forgot one shows. */
async function advanceSequences(db: Database): Promise<void> {
  const seqs = await sql<{ name: string }>`select relname as name from pg_class where relkind = 'S' and relnamespace = current_schema()::regnamespace`.execute(db);
  assert.ok(seqs.rows.length > 0, 'the schema has sequences');
  for (const s of seqs.rows) for (let i = 0; i < 3; i++) await sql`select nextval(quote_ident(${s.name})::regclass)`.execute(db);
}

/** Every table's rows (as PostgreSQL writes them, sorted) and every sequence's state. */
async function contents(db: Database): Promise<Record<string, string[]>> {
  const out: Record<string, string[]> = {};
  for (const table of await tablesInDependencyOrder(db)) {
    if (table === 'kysely_migration_lock') continue;
    const q =
      table === 'kysely_migration' ? sql<{ j: string }>`select name as j from kysely_migration order by name` : sql<{ j: string }>`select row_to_json(t)::text as j from ${sql.id(table)} t order by 1`;
    out[table] = (await q.execute(db)).rows.map((r) => r.j);
  }
  const seqs = await sql<{ name: string }>`select relname as name from pg_class where relkind = 'S' and relnamespace = current_schema()::regnamespace order by 1`.execute(db);
  for (const s of seqs.rows) {
    const v = await sql<{ last_value: string; is_called: boolean }>`select last_value::text, is_called from ${sql.id(s.name)}`.execute(db);
    out[`sequence ${s.name}`] = [JSON.stringify(v.rows[0])];
  }
  return out;
}

/** What the app's own use writes: an account with a key, a server, a domain on it, rules, a session. */
async function useTheApp(t: TestApp): Promise<void> {
  const { key } = await newAccount(t.app, 'pro', 50);
  const srv = await call(t.app, 'POST', '/api/servers', { key, body: { name: 'edge "one"' } });
  assert.equal(srv.status, 201, JSON.stringify(srv.body));
  const dom = await call(t.app, 'POST', '/api/domains', { key, body: { domain: 'shop.example.com', origins: [{ ip: '2001:db8::1', port: 8443 }], serverIds: [srv.body.id], sslEnabled: true } });
  assert.equal(dom.status, 201, JSON.stringify(dom.body));
  const rule = await call(t.app, 'POST', '/api/waf', { key, body: { rule_type: 'block_ip', value: '10.0.0.0/8', domain_id: dom.body.id } });
  assert.equal(rule.status, 201, JSON.stringify(rule.body));
  await call(t.app, 'POST', '/api/billing/deposits', { key, body: { amount: 20 } });
  await newAccount(t.app, 'free', 0, 'a-password-of-some-length');
}

/** A target database to restore into: a new PGlite directory, or a new schema on PostgreSQL. */
async function target(backend: Backend): Promise<{ options: { dataDir?: string; url?: string; schema?: string }; open(): Promise<OpenDatabase> }> {
  if (backend === 'pglite') {
    const dataDir = mkdtempSync(join(tmpdir(), 'rampart-restore-'));
    after(() => rmSync(dataDir, { recursive: true, force: true }));
    return { options: { dataDir }, open: () => openDatabase({ dataDir }) };
  }
  const url = (await postgresUrl())!;
  const schema = `t_${randomBytes(6).toString('hex')}`;
  after(() => dropSchema(url, schema));
  return { options: { url, schema }, open: () => openDatabase({ url, schema, poolSize: 2 }) };
}

async function backupOf(t: TestApp): Promise<Buffer> {
  const res = await t.app.inject({ method: 'GET', url: '/admin/backup', headers: { authorization: 'Bearer test-admin-token' } });
  assert.equal(res.statusCode, 200, res.body);
  assert.equal(res.headers['content-type'], 'application/gzip');
  assert.match(String(res.headers['content-disposition']), /^attachment; filename="rampart-backup-.+\.jsonl\.gz"$/);
  return res.rawPayload;
}

const gunzipped = (gz: Buffer) => Readable.from([gunzipSync(gz)]);

const all = await backends();
for (const from of all) {
  describe(`backups of ${from}`, async () => {
    const source = await makeTestApp(from);
    await useTheApp(source);
    await fillEmptyTables(source.ctx.db);
    await advanceSequences(source.ctx.db);
    const before = await contents(source.ctx.db);
    const gz = await backupOf(source);

    test('every table of the database holds rows before the backup (the round trips below cover them all)', async () => {
      const empty = Object.entries(before).filter(([, rows]) => rows.length === 0);
      assert.deepEqual(
        empty.map(([t]) => t),
        [],
      );
      assert.ok(Object.keys(before).length >= 20, `${Object.keys(before).length} tables`);
    });

    for (const to of all) {
      test(`a backup of ${from} restores every table, row and sequence into an empty ${to}`, async () => {
        const into = await target(to);
        const summary = await restoreBackup(into.options, gunzipped(gz));
        assert.equal(
          summary.rows,
          Object.entries(before)
            .filter(([t]) => !t.startsWith('sequence ') && !MIGRATION_TABLES.includes(t))
            .reduce((n, [, r]) => n + r.length, 0),
        );
        const restored = await into.open();
        try {
          assert.deepEqual(await contents(restored.db), before);
        } finally {
          await restored.close();
        }
      });
    }

    test('a restore into a database holding rows is refused without --force, and replaces them with it', async () => {
      const into = await target(from);
      const other = await into.open();
      await sql`insert into job_state (name, value) values ('kept', 'yes')`.execute(other.db);
      await other.close();
      await assert.rejects(restoreBackup(into.options, gunzipped(gz)), (err: Error) => err instanceof BackupError && /not empty \(rows in job_state\).*--force/.test(err.message));
      const still = await into.open();
      assert.deepEqual((await sql<{ name: string }>`select name from job_state`.execute(still.db)).rows, [{ name: 'kept' }], 'nothing was touched');
      await still.close();
      await restoreBackup({ ...into.options, force: true }, gunzipped(gz));
      const replaced = await into.open();
      try {
        assert.deepEqual(await contents(replaced.db), before);
      } finally {
        await replaced.close();
      }
    });

    test('a backup cut short, or with a damaged line, is refused and the target stays empty and usable', async () => {
      const lines = gunzipSync(gz).toString('utf8').split('\n');
      const cut = lines.slice(0, Math.floor(lines.length / 2)).join('\n');
      const into = await target(from);
      await assert.rejects(restoreBackup(into.options, Readable.from([cut])), (err: Error) => err instanceof BackupError && /incomplete/.test(err.message));
      const damaged = [...lines.slice(0, 3), '{"row":{"id": oops}}', ...lines.slice(3)].join('\n');
      await assert.rejects(restoreBackup(into.options, Readable.from([damaged])));
      // The failed attempts left no row: the same target takes the whole backup.
      await restoreBackup(into.options, gunzipped(gz));
      const restored = await into.open();
      try {
        assert.deepEqual(await contents(restored.db), before);
      } finally {
        await restored.close();
      }
    });
  });
}

describe('a backup taken while the control plane writes', { skip: !all.includes('postgres') && 'PostgreSQL is not reachable' }, () => {
  test('sees every table at one instant: a write to two tables is in the backup whole or not at all', async () => {
    const t = await makeTestApp('postgres');
    const { accountId } = await newAccount(t.app, 'pro', 10);
    // Rows enough in a table read between the two that the writes below land while the backup runs.
    await sql`insert into waf_events (account_id, domain, source_ip, reason, occurred_at)
      select ${accountId}::uuid, 'x.example.com', '192.0.2.1', 'ip_blocked', now() from generate_series(1, 60000)`.execute(t.ctx.db);
    let n = 0;
    // Pairs whose transaction has committed (n counts one more while a pair is being written).
    let committed = 0;
    let writing = true;
    const writer = (async () => {
      while (writing) {
        const i = ++n;
        await t.ctx.db.transaction().execute(async (tx) => {
          await sql`insert into job_state (name, value) values (${`pair-${i}`}, 'x')`.execute(tx);
          await sql`insert into payment_events (id, received_at) values (${`pair-${i}`}, now())`.execute(tx);
        });
        committed = i;
      }
    })();
    const firstPair = await (async () => {
      while (committed < 5) await new Promise((r) => setImmediate(r));
      return committed;
    })();
    const gz = await backupOf(t);
    writing = false;
    await writer;
    const pairs = { job_state: new Set<string>(), payment_events: new Set<string>() };
    let table = '';
    for (const line of gunzipSync(gz).toString('utf8').split('\n')) {
      if (line.startsWith('{"table":')) table = JSON.parse(line).table;
      else if (line.startsWith('{"row":') && (table === 'job_state' || table === 'payment_events')) {
        const row = JSON.parse(line).row as { name?: string; id?: string };
        pairs[table].add((row.name ?? row.id)!);
      }
    }
    assert.ok(pairs.job_state.size >= firstPair, `the backup holds the pairs written before it (${pairs.job_state.size})`);
    assert.ok(n > pairs.job_state.size, `pairs were written while the backup ran (${n} written, ${pairs.job_state.size} in the backup)`);
    assert.deepEqual([...pairs.payment_events].sort(), [...pairs.job_state].sort());
  });
});

describe('backup files', () => {
  test('a file that is not a backup, or from a newer schema, is refused naming why', async () => {
    const into = await target('pglite');
    await assert.rejects(restoreBackup(into.options, Readable.from(['{"hello":1}\n'])), /not a rampart backup/);
    await assert.rejects(restoreBackup(into.options, Readable.from([''])), /empty/);
    const newer = JSON.stringify({ format: 'rampart-backup', formatVersion: 1, rampartVersion: '9.0.0', createdAt: new Date().toISOString(), migrations: ['0001_initial', '9999_future'], tables: [] });
    await assert.rejects(restoreBackup(into.options, Readable.from([`${newer}\n{"end":true,"tables":0,"rows":0}\n`])), /rampart 9\.0\.0.*9999_future/);
  });
});
