import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { after, describe, test } from 'node:test';
import { PGlite } from '@electric-sql/pglite';
import { sql, type Kysely, type MigrationProvider } from 'kysely';
import pg from 'pg';
import { buildApp } from '../src/app.js';
import { dropSchema, openDatabase, type OpenDatabase } from '../src/db/database.js';
import { migrationProvider } from '../src/db/migrations.js';
import { DEFAULT_PLANS } from '../src/plans.js';
import { call, postgresUrl } from './helpers.js';

// Upgrades that cannot strand data (docs/operations.md "Upgrading"): a database made by the
// previous release (fixtures/upgrade, made by that release itself) is migrated with everything
// it held intact; the embedded one is copied before it is migrated; a migration that fails leaves
// the database as it was, usable by the previous release, and says which migration failed and
// where the copy is.

const FIXTURE = readFileSync(new URL('./fixtures/upgrade/previous-release.sql', import.meta.url), 'utf8');
/** What the previous release's API answered when the fixture was made (fixtures/upgrade/README.md). */
const FIXTURE_KEY = 'rmpk_9b10cec47692a7fce475aa87578426532053c74616bc5429b955751e3f5dd248';
const FIXTURE_MIGRATIONS = [...FIXTURE.matchAll(/^INSERT INTO kysely_migration VALUES \('([^']+)'/gm)].map((m) => m[1]!);

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'rampart-upgrade-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** An embedded database directory holding the fixture, as the previous release left it. */
async function previousReleaseDataDir(): Promise<string> {
  const dataDir = join(tempDir(), 'server');
  const lite = new PGlite(dataDir);
  await lite.exec(FIXTURE);
  await lite.close();
  return dataDir;
}

async function appliedMigrations(db: Kysely<any>): Promise<string[]> {
  return (await sql<{ name: string }>`select name from kysely_migration order by name`.execute(db)).rows.map((r) => r.name);
}

/** The previous release's data, read through this release's API. */
async function assertFixtureData(database: OpenDatabase): Promise<void> {
  const app = await buildApp({ ctx: { db: database.db, plans: DEFAULT_PLANS, now: () => new Date(), serversChanged: () => undefined }, adminToken: 'x' });
  try {
    const domains = await call(app, 'GET', '/api/domains', { key: FIXTURE_KEY });
    assert.equal(domains.status, 200, JSON.stringify(domains.body));
    assert.deepEqual(
      domains.body.map((d: { domain: string; origins: unknown }) => [d.domain, d.origins]),
      [['shop.fixture.example', [{ ip: '192.0.2.10', port: 8080 }]]],
    );
    const rules = await call(app, 'GET', '/api/waf', { key: FIXTURE_KEY });
    assert.deepEqual(rules.body.map((r: { rule_type: string; value: string }) => [r.rule_type, r.value]).sort(), [
      ['block_ip', '2001:db8::1'],
      ['rate_limit', '{"requests_per_minute":120}'],
    ]);
    const servers = await call(app, 'GET', '/api/servers', { key: FIXTURE_KEY });
    assert.deepEqual(
      servers.body.map((s: { name: string; agentVersion: unknown }) => [s.name, s.agentVersion]),
      [['edge-1', null]],
    );
    const account = await call(app, 'GET', '/api/account', { key: FIXTURE_KEY });
    assert.equal(account.body.balance, 42.5);
    const login = await call(app, 'POST', '/api/auth/login', { body: { email: 'owner@fixture.example', password: 'fixture-password-1' } });
    assert.equal(login.status, 200, 'the password hash of the previous release still signs in');
  } finally {
    await app.close();
  }
}

/** This release's migrations, and one more after them that changes things and then fails. */
const failingMigrations: MigrationProvider = {
  async getMigrations() {
    return {
      ...(await migrationProvider.getMigrations()),
      '9999_fails': {
        async up(db: Kysely<any>) {
          await db.schema.alterTable('domains').addColumn('half_done', 'text').execute();
          await sql`update domains set domain = 'changed.example'`.execute(db);
          throw new Error('deliberate failure');
        },
      },
    };
  },
};

describe('upgrading the embedded database', () => {
  test('a database the previous release made is copied, then migrated, and holds all it held', async () => {
    const dataDir = await previousReleaseDataDir();
    const snapshots: string[] = [];
    const database = await openDatabase({ dataDir, onSnapshot: (p) => snapshots.push(p) });
    try {
      const known = Object.keys(await migrationProvider.getMigrations()).sort();
      assert.deepEqual(await appliedMigrations(database.db), known);
      await assertFixtureData(database);
    } finally {
      await database.close();
    }
    const firstPending = Object.keys(await migrationProvider.getMigrations())
      .sort()
      .find((m) => !FIXTURE_MIGRATIONS.includes(m))!;
    assert.equal(snapshots.length, 1);
    assert.equal(dirname(snapshots[0]!), dirname(dataDir), 'the copy sits beside the data directory');
    assert.match(basename(snapshots[0]!), new RegExp(`^server\\.before-${firstPending}-\\d{4}-`));

    // The copy is the previous release's database, whole: it opens as it is.
    const copy = new PGlite(snapshots[0]!);
    const names = (await copy.query<{ name: string }>('select name from kysely_migration order by name')).rows.map((r) => r.name);
    assert.deepEqual(names, FIXTURE_MIGRATIONS);
    assert.deepEqual((await copy.query<{ domain: string }>('select domain from domains')).rows, [{ domain: 'shop.fixture.example' }]);
    await copy.close();

    // Nothing left to migrate: no copy.
    const again = await openDatabase({ dataDir, onSnapshot: (p) => snapshots.push(p) });
    await again.close();
    assert.equal(snapshots.length, 1);
    assert.deepEqual(readdirSync(dirname(dataDir)).sort(), [basename(dataDir), basename(snapshots[0]!)].sort());
  });

  test('a new embedded database is not copied', async () => {
    const dataDir = join(tempDir(), 'fresh');
    const snapshots: string[] = [];
    const database = await openDatabase({ dataDir, onSnapshot: (p) => snapshots.push(p) });
    await database.close();
    assert.deepEqual(snapshots, []);
  });

  test('a migration that fails leaves the database as it was, usable by the previous release, and names the migration and the copy', async () => {
    const dataDir = await previousReleaseDataDir();
    const snapshots: string[] = [];
    await assert.rejects(openDatabase({ dataDir, migrations: failingMigrations, onSnapshot: (p) => snapshots.push(p) }), (err: Error) => {
      assert.match(err.message, /migration 9999_fails failed: .*deliberate failure/);
      assert.ok(err.message.includes(dataDir), err.message);
      assert.equal(snapshots.length, 1);
      assert.ok(err.message.includes(snapshots[0]!), err.message);
      return true;
    });
    assert.ok(existsSync(snapshots[0]!));

    // Started again (a service restarting on failure): it fails the same way, and the copy taken
    // before the same migration replaces the older one instead of adding to it.
    await assert.rejects(openDatabase({ dataDir, migrations: failingMigrations, onSnapshot: (p) => snapshots.push(p) }), /migration 9999_fails failed/);
    assert.equal(snapshots.length, 2);
    assert.notEqual(snapshots[1], snapshots[0]);
    assert.deepEqual(readdirSync(dirname(dataDir)).sort(), [basename(dataDir), basename(snapshots[1]!)].sort());

    // The previous release opens it as it left it: its migrations, its rows, no half-made column.
    const lite = new PGlite(dataDir);
    assert.deepEqual(
      (await lite.query<{ name: string }>('select name from kysely_migration order by name')).rows.map((r) => r.name),
      FIXTURE_MIGRATIONS,
    );
    assert.deepEqual((await lite.query<{ domain: string }>('select domain from domains')).rows, [{ domain: 'shop.fixture.example' }]);
    const half = await lite.query(`select 1 from information_schema.columns where table_name = 'domains' and column_name = 'half_done'`);
    assert.equal(half.rows.length, 0);
    await lite.close();

    // Once the migration is fixed (here: this release's own), the same directory upgrades.
    const database = await openDatabase({ dataDir });
    try {
      await assertFixtureData(database);
    } finally {
      await database.close();
    }
  });
});

describe('upgrading PostgreSQL', async () => {
  const url = await postgresUrl();
  test('a database the previous release made is migrated and holds all it held', { skip: !url && 'PostgreSQL is not reachable' }, async () => {
    const schema = `t_${randomBytes(6).toString('hex')}`;
    after(() => dropSchema(url!, schema));
    const client = new pg.Client({ connectionString: url, options: `-c search_path=${schema}` });
    await client.connect();
    try {
      await client.query(`create schema ${schema}`);
      await client.query(FIXTURE);
    } finally {
      await client.end();
    }
    const database = await openDatabase({ url, schema, poolSize: 2 });
    try {
      assert.deepEqual(await appliedMigrations(database.db), Object.keys(await migrationProvider.getMigrations()).sort());
      await assertFixtureData(database);
    } finally {
      await database.close();
    }
  });
});
