// npm run bench:jobs [section...] — the periodic jobs over 100,000 accounts on PostgreSQL, each
// section on a fresh schema, as a ratio to a bare query of the same rows measured in the same run.
// Sections (all by default, or the ones named on the command line):
//
//   charge   the monthly charge job (runChargeJob, docs/billing.md "The monthly charge") with every
//            account due, 1% of them short of their price (frozen, with a notification each),
//            against `select id from accounts where next_charge_at <= now()`. Aim: under 30 s.
//   health   the health cycle (runHealthCycle, docs/dns-failover.md "The health cycle") over
//            BENCH_SERVERS shield servers (default 10,000), all connected, each probed over HTTP
//            (50 at once) at a loopback server standing in for its HAProxy, 1% refused (server_down
//            each), plus 100 domains with DNS failover on a fake provider, against one bare
//            query of the same rows. Aim: under 30 s (a tenth of the default 5-minute interval).
//
// BENCH_ACCOUNTS changes the number of accounts (default 100,000).
import { sql } from 'kysely';
import type { ServiceContext } from '../packages/server/src/context.js';
import { dropSchema, openDatabase, type OpenDatabase } from '../packages/server/src/db/database.js';
import { DEFAULT_PLANS } from '../packages/server/src/plans.js';
import { runChargeJob } from '../packages/server/src/services/billing-charge.js';
import { createServer } from 'node:http';
import { once } from 'node:events';
import { secretKeyFrom, encryptSecret } from '../packages/server/src/secret-box.js';
import { runHealthCycle } from '../packages/server/src/services/health.js';
import { freshPostgresSchema, PG_URL } from '../test/support/postgres.js';
import { medianMs } from './support.js';

const ACCOUNTS = Number(process.env.BENCH_ACCOUNTS ?? 100_000);
/** The aims: the charge over 100,000 accounts under 30 s, the health cycle over 10,000 servers under 10 s. */
const CHARGE_AIM_SECONDS = 30;
const HEALTH_AIM_SECONDS = 10;

const seconds = (ms: number) => (ms / 1000).toFixed(2);

/** A fresh schema with every migration, closed and dropped after `fn`. */
async function withFreshDatabase<T>(prefix: string, fn: (database: OpenDatabase) => Promise<T>): Promise<T> {
  const url = await freshPostgresSchema(prefix);
  if (!url) throw new Error(`bench:jobs needs PostgreSQL at ${PG_URL} (RAMPART_TEST_DATABASE_URL)`);
  const schema = new URL(url).searchParams.get('options')!.replace('-c search_path=', '');
  const database = await openDatabase({ url, poolSize: 4 });
  try {
    return await fn(database);
  } finally {
    await database.close();
    await dropSchema(PG_URL, schema);
  }
}

async function chargeSection(): Promise<boolean> {
  return withFreshDatabase('bench_jobs_charge', async ({ db }) => {
    // Accounts as `POST /admin/accounts` leaves them (an opening balance is an adjustment row),
    // every one due an hour ago; one in a hundred short of its plan's price.
    const t0 = performance.now();
    await sql`
      insert into accounts (id, email, password_hash, plan, balance_cents, state, bot_secret, next_charge_at, created_at)
      select gen_random_uuid(), 'bench-' || i || '@example.com', null,
             case when i % 20 = 0 then 'enterprise' when i % 20 = 1 then 'free' else 'pro' end,
             case when i % 100 = 50 then 1000 else 100000 end,
             'active', md5(i::text), now() - interval '1 hour', now() - interval '1 month 1 hour'
      from generate_series(1, ${ACCOUNTS}) as i`.execute(db);
    await sql`
      insert into transactions (id, account_id, kind, amount_cents, delta_cents, status, description, created_at, confirmed_at)
      select gen_random_uuid(), id, 'adjustment', balance_cents, balance_cents, 'confirmed', 'Opening balance', created_at, created_at from accounts`.execute(db);
    await sql`analyze`.execute(db);
    console.log(`charge: seeded ${ACCOUNTS.toLocaleString('en')} accounts in ${seconds(performance.now() - t0)} s`);

    const bare = await medianMs(5, () => sql`select id from accounts where next_charge_at <= now()`.execute(db));
    const ctx: ServiceContext = { db, plans: DEFAULT_PLANS, now: () => new Date(), serversChanged: () => {} };
    const t1 = performance.now();
    const results = await runChargeJob(ctx);
    const job = performance.now() - t1;

    // What the run did: every account once, the short ones frozen, the ledger in step.
    const charged = results.filter((r) => r.charged).length;
    const frozen = results.length - charged;
    const { rows } = await sql<{ off: number; negative: number; charges: number; notes: number }>`
      select
        (select count(*) from accounts a where a.balance_cents <> (select coalesce(sum(delta_cents), 0) from transactions t where t.account_id = a.id))::int as off,
        (select count(*) from accounts where balance_cents < 0)::int as negative,
        (select count(*) from transactions where kind = 'charge')::int as charges,
        (select count(*) from notifications where kind = 'account_frozen')::int as notes`.execute(db);
    const check = rows[0]!;
    const again = await runChargeJob(ctx);
    console.log(
      `charge: ${results.length.toLocaleString('en')} accounts in ${seconds(job)} s (${charged.toLocaleString('en')} charged, ${frozen.toLocaleString('en')} frozen, ` +
        `${check.charges.toLocaleString('en')} charge rows, ${check.notes.toLocaleString('en')} account_frozen notifications); a second run charged ${again.length}`,
    );
    console.log(`charge: bare select of the due rows ${bare.toFixed(1)} ms; job / bare = ${(job / bare).toFixed(0)}x`);
    const correct = results.length === ACCOUNTS && check.off === 0 && check.negative === 0 && check.charges === ACCOUNTS && check.notes === frozen && again.length === 0;
    if (!correct) console.log(`charge: WRONG: ${JSON.stringify({ results: results.length, ...check, again: again.length })}`);
    const met = job < CHARGE_AIM_SECONDS * 1000;
    console.log(`charge: aim < ${CHARGE_AIM_SECONDS} s ${met ? 'met' : 'MISSED'} (${seconds(job)} s for ${ACCOUNTS.toLocaleString('en')} accounts)`);
    return met && correct;
  });
}

const SERVERS = Number(process.env.BENCH_SERVERS ?? 10_000);

async function healthSection(): Promise<boolean> {
  // The servers' HAProxies, as far as the probe sees them: one loopback server answering "ok".
  const target = createServer((req, res) => res.end(req.url === '/.well-known/rampart/health' ? 'ok' : 'no'));
  target.listen(0, '127.0.0.1');
  await once(target, 'listening');
  const port = (target.address() as { port: number }).port;
  const closed = await new Promise<number>((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p)); // nothing listens there afterwards: those probes are refused
    });
  });
  try {
    return await withFreshDatabase('bench_jobs_health', async ({ db }) => {
      const key = secretKeyFrom('bench-jobs-secret-key-0123456789')!;
      const t0 = performance.now();
      const accounts = Math.ceil(SERVERS / 1000);
      await sql`
        insert into accounts (id, email, password_hash, plan, balance_cents, state, bot_secret, next_charge_at, created_at)
        select gen_random_uuid(), 'bench-health-' || i || '@example.com', null, 'pro', 100000, 'active', md5(i::text), now() + interval '1 month', now()
        from generate_series(1, ${accounts}) as i`.execute(db);
      // Connected servers (a heartbeat now), every hundredth on the closed port.
      await sql`
        insert into servers (id, account_id, name, token_hash, status, ip, public_ip, http_port, last_seen_at, desired_revision, applied_revision, created_at)
        select gen_random_uuid(), a.id, 'edge-' || i, md5('t' || i), 'active', '127.0.0.1', '127.0.0.1',
               case when i % 100 = 0 then ${closed}::int else ${port}::int end, now(), 1, 1, now()
        from generate_series(1, ${SERVERS}) as i
        join (select id, row_number() over (order by id) - 1 as n from accounts) a on a.n = i % ${accounts}`.execute(db);
      await sql`
        insert into agent_connections (server_id, connection_id, process_id, ip, connected_at, last_heartbeat_at)
        select id, gen_random_uuid(), 'bench', ip, now(), now() from servers`.execute(db);
      // 100 failover domains, each on two servers of its account, and every account's provider.
      await sql`
        insert into dns_settings (account_id, provider, credentials_enc, updated_at)
        select id, 'cloudflare', ${encryptSecret(key, JSON.stringify({ provider: 'cloudflare', apiToken: 'bench-token-0123456789abcdef' }))}, now() from accounts`.execute(db);
      await sql`
        insert into domains (id, account_id, domain, origins, ssl_enabled, ssl_status, waf_enabled, waf_level, waf_mode, status, dns_failover, created_at, updated_at)
        select gen_random_uuid(), account_id, 'd' || n || '.example.com', '[{"ip":"10.0.0.1","port":80}]', false, 'off', true, 'medium', 'block', 'active', true, now(), now()
        from (select account_id, row_number() over () as n from servers limit 100) s`.execute(db);
      await sql`
        with d as (select id, account_id, row_number() over (partition by account_id order by id) as n from domains),
             s as (select id, account_id, row_number() over (partition by account_id order by id) as n from servers)
        insert into domain_servers (domain_id, server_id)
        select d.id, s.id from d join s on s.account_id = d.account_id and s.n in (d.n * 2, d.n * 2 + 1)`.execute(db);
      await sql`analyze`.execute(db);
      console.log(`health: seeded ${SERVERS.toLocaleString('en')} connected servers and 100 failover domains in ${seconds(performance.now() - t0)} s`);

      const bare = await medianMs(5, () =>
        sql`select s.id, s.ip, s.public_ip, s.http_port, s.proxy_serving, s.healthy, s.last_seen_at, c.last_heartbeat_at
            from servers s left join agent_connections c on c.server_id = s.id where s.status <> 'decommissioned'`.execute(db),
      );
      let published = 0;
      const ctx: ServiceContext = { db, plans: DEFAULT_PLANS, now: () => new Date(), serversChanged: () => {}, secretKey: key };
      const options = { dns: { providerFor: () => ({ setAddresses: async () => void published++, getAddresses: async () => [] }) } };
      const t1 = performance.now();
      const first = await runHealthCycle(ctx, new Date(), options);
      const cycle = performance.now() - t1;
      const t2 = performance.now();
      const second = await runHealthCycle(ctx, new Date(), options);
      const steady = performance.now() - t2;
      const { rows } = await sql<{ healthy: number; down: number; notes: number }>`
        select (select count(*) from servers where healthy)::int as healthy,
               (select count(*) from servers where healthy = false)::int as down,
               (select count(*) from notifications where kind = 'server_down')::int as notes`.execute(db);
      const check = rows[0]!;
      console.log(
        `health: ${first.servers.toLocaleString('en')} servers in ${seconds(cycle)} s (${check.healthy.toLocaleString('en')} healthy, ${check.down} down, ${check.notes} server_down; ` +
          `${first.dns.domains} failover domains, ${published} publications); the next cycle, nothing changed: ${seconds(steady)} s, ${second.down.length} server_down`,
      );
      // The same cycle with every probe answered at once: what the database side costs.
      const t3 = performance.now();
      await runHealthCycle(ctx, new Date(), { ...options, probe: async () => ({ ok: true as const }) });
      const dbSide = performance.now() - t3;
      console.log(
        `health: bare select of the same rows ${bare.toFixed(1)} ms; cycle / bare = ${(cycle / bare).toFixed(0)}x; with instant probes (the queries, verdicts, notifications, DNS step) ${seconds(dbSide)} s`,
      );
      const expectedDown = Math.floor(SERVERS / 100);
      const correct = check.down === expectedDown && check.notes === expectedDown && check.healthy === SERVERS - expectedDown && second.down.length === 0 && first.dns.domains === 100;
      if (!correct) console.log(`health: WRONG: ${JSON.stringify({ ...check, expectedDown, secondDown: second.down.length, domains: first.dns.domains })}`);
      const met = cycle < HEALTH_AIM_SECONDS * 1000;
      console.log(`health: aim < ${HEALTH_AIM_SECONDS} s ${met ? 'met' : 'MISSED'} (${seconds(cycle)} s for ${SERVERS.toLocaleString('en')} servers)`);
      return met && correct;
    });
  } finally {
    target.close();
  }
}

const SECTIONS: Record<string, () => Promise<boolean>> = {
  charge: chargeSection,
  health: healthSection,
};

const wanted = process.argv.slice(2);
for (const name of wanted) if (!SECTIONS[name]) throw new Error(`bench:jobs: no section ${name}; sections: ${Object.keys(SECTIONS).join(', ')}`);
let ok = true;
for (const [name, run] of Object.entries(SECTIONS)) {
  if (wanted.length > 0 && !wanted.includes(name)) continue;
  ok = (await run()) && ok;
}
process.exitCode = ok ? 0 : 1;
