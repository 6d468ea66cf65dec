import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import { after, describe, test } from 'node:test';
import { buildApp } from '../src/app.js';
import type { ServiceContext } from '../src/context.js';
import { credentialCache } from '../src/credential-cache.js';
import type { CredentialMessage } from '../src/credential-messages.js';
import { dropSchema, openDatabase } from '../src/db/database.js';
import { DEFAULT_PLANS } from '../src/plans.js';
import { ADMIN_TOKEN, backends, call, makeTestApp, migrateOver, newAccount, postgresUrl } from './helpers.js';

// The same migrations and queries on both storages: every suite below runs on PGlite, and on
// PostgreSQL when one is reachable (CI points RAMPART_TEST_DATABASE_URL at the machine's).
for (const backend of await backends()) {
  describe(`storage on ${backend}`, () => {
    test('migrations run and a full write/read cycle round-trips every column type', async () => {
      const t = await makeTestApp(backend);
      const { key } = await newAccount(t.app, 'pro', 12.34);
      const acct = await call(t.app, 'GET', '/api/account', { key });
      assert.equal(acct.status, 200);
      assert.equal(acct.body.balance, 12.34);
      assert.equal(acct.body.state, 'active');

      const srv = await call(t.app, 'POST', '/api/servers', { key, body: { name: 'edge' } });
      assert.equal(srv.status, 201);
      const dom = await call(t.app, 'POST', '/api/domains', {
        key,
        body: { domain: 'shop.example.com', origins: [{ ip: '2001:db8::1', port: 8443 }], serverIds: [srv.body.id], sslEnabled: false },
      });
      assert.equal(dom.status, 201, JSON.stringify(dom.body));
      const list = await call(t.app, 'GET', '/api/domains', { key });
      assert.deepEqual(list.body[0].origins, [{ ip: '2001:db8::1', port: 8443 }]);
      assert.deepEqual(list.body[0].serverIds, [srv.body.id]);
      assert.equal(list.body[0].sslEnabled, false);

      const servers = await call(t.app, 'GET', '/api/servers', { key });
      assert.equal(typeof servers.body[0].desiredRevision, 'number');
      assert.equal(servers.body[0].desiredRevision, 2, 'the domain assignment bumped the revision');
    });

    test('0012 rewrites stored block_ip and allow_ip values in canonical form, and nothing else', async () => {
      const account = '00000000-0000-4000-8000-000000000001';
      const rules: [string, string, string][] = [
        ['block_ip', '2001:DB8:0:0:0:0:0:1', '2001:db8::1'],
        ['block_ip', '2001:0db8:0000::/48', '2001:db8::/48'],
        ['allow_ip', '1.2.3.4/32', '1.2.3.4'],
        ['allow_ip', '2001:db8::7/128', '2001:db8::7'],
        ['block_ip', '10.0.0.0/8', '10.0.0.0/8'],
        ['block_country', 'FR', 'FR'],
      ];
      const id = (i: number) => `00000000-0000-4000-8000-0000000001${String(i).padStart(2, '0')}`;
      await migrateOver(
        backend,
        '0011_analytics',
        async (db) => {
          await sql`insert into accounts (id, email, plan, bot_secret, next_charge_at) values (${account}, 'old@example.com', 'pro', 'aa', now())`.execute(db);
          for (const [i, [type, value]] of rules.entries()) {
            await sql`insert into waf_rules (id, account_id, rule_type, value, enabled, priority) values (${id(i)}, ${account}, ${type}, ${value}, true, 100)`.execute(db);
          }
        },
        async (db) => {
          const stored = new Map((await sql<{ id: string; value: string }>`select id, value from waf_rules`.execute(db)).rows.map((r) => [r.id, r.value]));
          for (const [i, [type, before, after]] of rules.entries()) assert.equal(stored.get(id(i)), after, `${type} ${before}`);
        },
      );
    });

    test('0005 gives existing domains their SSL state: off without SSL, pending with it', async () => {
      const account = '00000000-0000-4000-8000-000000000001';
      await migrateOver(
        backend,
        '0003_waf_events_by_server',
        async (db) => {
          await sql`insert into accounts (id, email, plan, bot_secret, next_charge_at) values (${account}, 'old@example.com', 'pro', 'aa', now())`.execute(db);
          const row = (id: string, domain: string, ssl: boolean, status: string) =>
            sql`insert into domains (id, account_id, domain, origins, ssl_enabled, status) values (${id}, ${account}, ${domain}, '[]', ${ssl}, ${status})`.execute(db);
          await row('00000000-0000-4000-8000-00000000000a', 'plain.example.com', false, 'active');
          await row('00000000-0000-4000-8000-00000000000b', 'tls.example.com', true, 'active');
        },
        async (db) => {
          const after = await sql<{ domain: string; ssl_status: string; ssl_error: string | null; status: string }>`select domain, ssl_status, ssl_error, status from domains order by domain`.execute(
            db,
          );
          assert.deepEqual(after.rows, [
            { domain: 'plain.example.com', ssl_status: 'off', ssl_error: null, status: 'active' },
            { domain: 'tls.example.com', ssl_status: 'pending', ssl_error: null, status: 'pending' },
          ]);
        },
      );
    });

    test('0006 leaves existing domains in block mode and existing events blocked, without request details', async () => {
      const account = '00000000-0000-4000-8000-000000000001';
      await migrateOver(
        backend,
        '0005_certificates',
        async (db) => {
          await sql`insert into accounts (id, email, plan, bot_secret, next_charge_at) values (${account}, 'old@example.com', 'pro', 'aa', now())`.execute(db);
          await sql`insert into domains (id, account_id, domain, origins, ssl_enabled, ssl_status, waf_level) values ('00000000-0000-4000-8000-00000000000a', ${account}, 'old.example.com', '[]', false, 'off', 'high')`.execute(
            db,
          );
          await sql`insert into waf_events (account_id, domain, source_ip, reason, occurred_at) values (${account}, 'old.example.com', '203.0.113.1', 'sqli_detected', now())`.execute(db);
        },
        async (db) => {
          const domains = await sql<{ waf_level: string; waf_mode: string }>`select waf_level, waf_mode from domains`.execute(db);
          assert.deepEqual(domains.rows, [{ waf_level: 'high', waf_mode: 'block' }]);
          const events = await sql<Record<string, unknown>>`select reason, method, path, location, matched, blocked from waf_events`.execute(db);
          assert.deepEqual(events.rows, [{ reason: 'sqli_detected', method: null, path: null, location: null, matched: null, blocked: true }]);
          // blocked cannot be null; the details can.
          await assert.rejects(
            sql`insert into waf_events (account_id, domain, source_ip, reason, occurred_at, blocked) values (${account}, 'old.example.com', '203.0.113.1', 'xss_detected', now(), null)`.execute(db),
          );
          await assert.rejects(sql`update domains set waf_mode = null`.execute(db));
        },
      );
    });

    test('a migrated database migrates again as a no-op', async () => {
      const t = await makeTestApp(backend);
      const { migrate } = await import('../src/db/database.js');
      await migrate(t.database.db, t.database.schema);
      const { key } = await newAccount(t.app);
      assert.equal((await call(t.app, 'GET', '/api/servers', { key })).status, 200);
    });
  });
}

describe('several control-plane processes on one PostgreSQL', async () => {
  const url = await postgresUrl();
  test('a rule change made through one process is served at once by the other (no stale rule-list cache)', { skip: !url && 'PostgreSQL not reachable' }, async () => {
    const schema = `t_${randomBytes(6).toString('hex')}`;
    const open = () => openDatabase({ url, schema, poolSize: 2 });
    const [d1, d2] = [await open(), await open()];
    // Processes share a change bus (serve.ts): here one in memory, for the credential messages.
    const ctxs: ServiceContext[] = [];
    const deliver = (m: CredentialMessage) => {
      for (const c of ctxs) credentialCache(c).receive(m, deliver);
    };
    const ctxOf = (db: typeof d1): ServiceContext => {
      const ctx: ServiceContext = {
        db: db.db,
        plans: DEFAULT_PLANS,
        now: () => new Date(),
        serversChanged: () => {},
        credentialBus: { publish: async (m) => deliver(m), live: () => true, listeners: async () => 2 },
      };
      ctxs.push(ctx);
      return ctx;
    };
    const [a1, a2] = [await buildApp({ ctx: ctxOf(d1), adminToken: ADMIN_TOKEN }), await buildApp({ ctx: ctxOf(d2), adminToken: ADMIN_TOKEN })];
    after(async () => {
      await a1.close();
      await a2.close();
      await d1.close();
      await d2.close();
      await dropSchema(url!, schema);
    });
    const { key } = await newAccount(a1);
    const rule = await call(a1, 'POST', '/api/waf', { key, body: { rule_type: 'block_ip', value: '198.51.100.7' } });
    assert.deepEqual(
      (await call(a2, 'GET', '/api/waf', { key })).body.map((r: any) => r.value),
      ['198.51.100.7'],
    );
    await call(a1, 'PUT', `/api/waf/${rule.body.id}`, { key, body: { value: '198.51.100.8' } });
    assert.deepEqual(
      (await call(a2, 'GET', '/api/waf', { key })).body.map((r: any) => r.value),
      ['198.51.100.8'],
    );
    const deleted = await call(a1, 'DELETE', `/api/settings/api-keys?id=${(await call(a1, 'GET', '/api/settings/api-keys', { key })).body[0].id}`, { key });
    assert.equal(deleted.status, 200);
    assert.equal((await call(a2, 'GET', '/api/waf', { key })).status, 401, 'a key deleted through one process is refused by the other at once');
  });

  test('migrating sees only its own schema: another install dropping its schema at that moment does not stop it', { skip: !url && 'PostgreSQL not reachable' }, async () => {
    const others = Array.from({ length: 6 }, () => `t_${randomBytes(6).toString('hex')}`);
    const mine = `t_${randomBytes(6).toString('hex')}`;
    after(async () => {
      for (const s of [...others, mine]) await dropSchema(url!, s);
    });
    // Other installs' schemas, each with tables Kysely's own introspector would read (serial columns).
    for (const s of others) {
      const d = await openDatabase({ url, schema: s, poolSize: 1, migrate: false });
      for (let i = 0; i < 20; i++) await sql`create table ${sql.id(`x${i}`)} (id serial primary key, v text)`.execute(d.db);
      await d.close();
    }
    // Each migration runs while one of them is dropped.
    const runs = others.map(async (other, i) => {
      const [d] = await Promise.all([openDatabase({ url, schema: `${mine}_${i}`, poolSize: 2 }), dropSchema(url!, other)]);
      try {
        const tables = await d.db.introspection.getTables({ withInternalKyselyTables: true });
        assert.ok(tables.length > 10 && tables.every((t) => t.schema === `${mine}_${i}`), 'introspection lists its own schema only');
        assert.ok(tables.some((t) => t.name === 'kysely_migration'));
        assert.ok(!(await d.db.introspection.getTables()).some((t) => t.name.startsWith('kysely_')), "Kysely's own tables only when asked for");
      } finally {
        await d.close();
        await dropSchema(url!, `${mine}_${i}`);
      }
    });
    await Promise.all(runs);
  });
});
