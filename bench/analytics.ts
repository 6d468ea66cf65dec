// npm run bench:analytics — GET /api/analytics over 30 days for one domain with 48 hours of
// minute data and 30 days of hours, on PostgreSQL (RAMPART_TEST_DATABASE_URL, default
// postgres://postgres@127.0.0.1:5432/test, in a schema of its own), through the app (inject: auth,
// validation, the series and the four top lists, serialisation), next to a bare SQL select of the
// same hourly rollups, measured in the same run; the median of BENCH_RUNS runs (default 31) each.
// Aim (issue 12): the answer within 2 times the bare query.
import { sql } from 'kysely';
import { buildApp } from '../packages/server/src/app.js';
import type { ServiceContext } from '../packages/server/src/context.js';
import { dropSchema, openDatabase } from '../packages/server/src/db/database.js';
import { DEFAULT_PLANS } from '../packages/server/src/plans.js';
import { runAnalyticsJob } from '../packages/server/src/services/analytics.js';
import { freshPostgresSchema, PG_URL } from '../test/support/postgres.js';
import { medianMs } from './support.js';

const RUNS = Number(process.env.BENCH_RUNS ?? 31);
const AIM = 2;
const ADMIN = 'bench-admin-token';

const url = await freshPostgresSchema('bench_analytics');
if (!url) throw new Error(`bench:analytics needs PostgreSQL at ${PG_URL} (RAMPART_TEST_DATABASE_URL)`);
const schema = new URL(url).searchParams.get('options')!.replace('-c search_path=', '');
const database = await openDatabase({ url, poolSize: 4 });
const { db } = database;
try {
  const ctx: ServiceContext = { db, plans: DEFAULT_PLANS, now: () => new Date(), serversChanged: () => {} };
  const app = await buildApp({ ctx, adminToken: ADMIN });
  await app.ready();
  const account = await app.inject({
    method: 'POST',
    url: '/admin/accounts',
    headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
    payload: JSON.stringify({ email: 'bench@example.com', plan: 'pro', balance: 100 }),
  });
  const { accountId, apiKey } = account.json() as { accountId: string; apiKey: string };
  const headers = { 'x-api-key': apiKey };
  const domain = await app.inject({
    method: 'POST',
    url: '/api/domains',
    headers: { ...headers, 'content-type': 'application/json' },
    payload: JSON.stringify({ domain: 'bench.example.com', origins: [{ ip: '10.0.0.1', port: 80 }], sslEnabled: false }),
  });
  const domainId = (domain.json() as { id: string }).id;

  // 48 hours of minutes, 30 days of hours (the job's rollup of the minutes' hours, the rest as
  // the job would have left them), and a week of blocked events for the top lists.
  const t0 = performance.now();
  await sql`
    insert into analytics_minute (account_id, domain_id, minute, requests, s1xx, s2xx, s3xx, s4xx, s5xx, s_other, bytes_in, bytes_out, blocked, updated_at)
    select ${accountId}, ${domainId}, date_trunc('minute', now()) - make_interval(mins => i),
           1000 + i % 97, 0, 900 + i % 97, 40, 50, 10, 0, 500000 + i, 9000000 + i,
           jsonb_build_object('rate_limited', i % 13, 'sqli_detected', i % 5, 'ip_blocked', i % 3), now()
    from generate_series(1, 48 * 60) as i`.execute(db);
  await runAnalyticsJob(ctx);
  await sql`
    insert into analytics_hour (account_id, domain_id, hour, requests, s1xx, s2xx, s3xx, s4xx, s5xx, s_other, bytes_in, bytes_out, blocked, updated_at)
    select ${accountId}, ${domainId}, date_trunc('hour', now()) - make_interval(hours => i),
           60000 + i, 0, 54000, 2400, 3000, 600, 0, 30000000, 540000000,
           jsonb_build_object('rate_limited', i % 130, 'sqli_detected', i % 50), now()
    from generate_series(49, 30 * 24 - 1) as i
    on conflict do nothing`.execute(db);
  await sql`
    insert into waf_events (account_id, server_id, domain, source_ip, reason, rule_id, occurred_at, received_at, method, path, blocked, count)
    select ${accountId}, null, 'bench.example.com', '203.0.' || (i % 200) || '.' || (i % 250), (array['rate_limited','sqli_detected','ip_blocked'])[1 + i % 3], null,
           now() - make_interval(secs => i * 120), now(), 'GET', '/p/' || (i % 300), true, 1 + i % 4
    from generate_series(1, 5000) as i`.execute(db);
  await sql`analyze`.execute(db);
  const counts = await sql<{
    m: string;
    h: string;
    e: string;
  }>`select (select count(*) from analytics_minute) as m, (select count(*) from analytics_hour) as h, (select count(*) from waf_events) as e`.execute(db);
  console.log(`analytics: seeded ${counts.rows[0]!.m} minutes, ${counts.rows[0]!.h} hours, ${counts.rows[0]!.e} events in ${((performance.now() - t0) / 1000).toFixed(2)} s`);

  const now = Date.now();
  const from = new Date(Math.floor(now / 3_600_000) * 3_600_000 - (30 * 24 - 1) * 3_600_000).toISOString();
  const path = `/api/analytics?domain=${domainId}&from=${from}&step=hour`;
  const check = await app.inject({ method: 'GET', url: path, headers });
  if (check.statusCode !== 200) throw new Error(`GET ${path}: ${check.statusCode} ${check.body}`);
  const body = check.json() as { series: { requests: number }[]; top: { ips: unknown[] } };
  console.log(
    `analytics: the answer has ${body.series.length} points, ${body.series.filter((p) => p.requests > 0).length} with traffic, ${body.top.ips.length} top addresses, ${check.body.length} bytes`,
  );

  const bare = () =>
    sql`select hour, requests, s1xx, s2xx, s3xx, s4xx, s5xx, s_other, bytes_in, bytes_out, blocked from analytics_hour
        where account_id = ${accountId} and domain_id = ${domainId} and hour >= ${new Date(from)} order by hour`.execute(db);
  const api = () => app.inject({ method: 'GET', url: path, headers });
  // Warm both (plans, caches), then measure them interleaved in the same run.
  for (let i = 0; i < 5; i++) {
    await bare();
    await api();
  }
  const bareMs = await medianMs(RUNS, bare);
  const apiMs = await medianMs(RUNS, api);
  const ratio = apiMs / bareMs;
  console.log(`analytics: bare select of the 30 days of hourly rollups ${bareMs.toFixed(2)} ms (median of ${RUNS})`);
  console.log(`analytics: GET /api/analytics over 30 days ${apiMs.toFixed(2)} ms (median of ${RUNS}); answer / bare = ${ratio.toFixed(2)}x`);
  console.log(`analytics: aim within ${AIM}x ${ratio <= AIM ? 'met' : 'MISSED'}`);
  await app.close();
} finally {
  await database.close();
  await dropSchema(PG_URL, schema);
}
