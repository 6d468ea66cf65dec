import { sql } from 'kysely';
import type { Database, Tx } from '../db/database.js';

// The analytics_minute and analytics_hour tables (traffic analytics, docs/analytics.md), and the
// WAF event aggregates GET /api/analytics shows next to them.

/** One domain's counts for one minute, as added to analytics_minute. */
export interface MinuteCounts {
  accountId: string;
  domainId: string;
  minute: Date;
  requests: number;
  s1xx: number;
  s2xx: number;
  s3xx: number;
  s4xx: number;
  s5xx: number;
  sOther: number;
  bytesIn: number;
  bytesOut: number;
  blocked: Record<string, number>;
  /** Sampled requests by latency bucket (LATENCY_BUCKETS_MS), when the batch had samples. */
  latency?: number[] | undefined;
}

/** Two histograms of the same buckets added (either may be missing). */
export function addHistograms(a: readonly (number | string)[] | null | undefined, b: readonly (number | string)[] | null | undefined): number[] {
  const x = (a ?? []).map(Number);
  const y = (b ?? []).map(Number);
  return Array.from({ length: Math.max(x.length, y.length) }, (_, i) => (x[i] ?? 0) + (y[i] ?? 0));
}

const COUNT_COLUMNS = ['requests', 's1xx', 's2xx', 's3xx', 's4xx', 's5xx', 's_other', 'bytes_in', 'bytes_out'] as const;
export type CountColumn = (typeof COUNT_COLUMNS)[number];

/** The server's domains (id and name), of its account. */
export async function serverDomains(db: Database | Tx, accountId: string, serverId: string): Promise<{ id: string; domain: string }[]> {
  return db
    .selectFrom('domain_servers')
    .innerJoin('domains', 'domains.id', 'domain_servers.domain_id')
    .select(['domains.id', 'domains.domain'])
    .where('domain_servers.server_id', '=', serverId)
    .where('domains.account_id', '=', accountId)
    .execute();
}

/**
 * The most any count of one domain's minute holds: batches are bounded, their number is not (a
 * compromised agent may send thousands for one minute), so the sums stop here; an hour's 60
 * minutes, and every later sum cast to bigint, then stay far inside a bigint.
 */
export const MINUTE_COUNT_MAX = 100_000_000_000_000_000;

/** The sum of two {"reason": n} objects, in SQL, each count at most MINUTE_COUNT_MAX. */
const mergeBlocked = (a: string, b: string) =>
  sql.raw(
    `(select coalesce(jsonb_object_agg(k, s), '{}'::jsonb) from (select key as k, least(sum(value::numeric), ${MINUTE_COUNT_MAX})::bigint as s from ` +
      `(select * from jsonb_each_text(${a}) union all select * from jsonb_each_text(${b})) as x group by key) as y)`,
  );

/** The sum of two latency histograms (bigint[], either null), bucket by bucket, each at most MINUTE_COUNT_MAX. */
const mergeLatency = (a: string, b: string) =>
  sql.raw(
    `(case when ${a} is null then ${b} when ${b} is null then ${a} else (select array_agg(least(coalesce(x, 0) + coalesce(y, 0), ${MINUTE_COUNT_MAX}) order by i) ` +
      `from unnest(${a}, ${b}) with ordinality as t(x, y, i)) end)`,
  );

const cap = (n: number) => Math.min(MINUTE_COUNT_MAX, n);

/** Adds the counts to their minutes (one row per account, domain and minute; rows must be distinct by that key), each sum at most MINUTE_COUNT_MAX. */
export async function addMinuteCounts(db: Database | Tx, rows: readonly MinuteCounts[], updatedAt: Date): Promise<void> {
  if (rows.length === 0) return;
  await db
    .insertInto('analytics_minute')
    .values(
      rows.map((r) => ({
        account_id: r.accountId,
        domain_id: r.domainId,
        minute: r.minute,
        requests: cap(r.requests),
        s1xx: cap(r.s1xx),
        s2xx: cap(r.s2xx),
        s3xx: cap(r.s3xx),
        s4xx: cap(r.s4xx),
        s5xx: cap(r.s5xx),
        s_other: cap(r.sOther),
        bytes_in: cap(r.bytesIn),
        bytes_out: cap(r.bytesOut),
        blocked: JSON.stringify(Object.fromEntries(Object.entries(r.blocked).map(([k, n]) => [k, cap(n)]))),
        latency: r.latency ? r.latency.map(cap) : null,
        updated_at: updatedAt,
      })),
    )
    .onConflict((oc) =>
      oc.columns(['account_id', 'domain_id', 'minute']).doUpdateSet((eb) => ({
        ...Object.fromEntries(COUNT_COLUMNS.map((c) => [c, sql`least(${eb.ref(`analytics_minute.${c}`)} + ${eb.ref(`excluded.${c}`)}, ${sql.lit(MINUTE_COUNT_MAX)})`])),
        blocked: sql`${mergeBlocked('analytics_minute.blocked', 'excluded.blocked')}`,
        latency: sql`${mergeLatency('analytics_minute.latency', 'excluded.latency')}`,
        updated_at: eb.ref('excluded.updated_at'),
      })),
    )
    .execute();
}

/**
 * Recomputes, from their minutes, the hours that have a minute added to at or after `since`:
 * each such hour's row becomes the sum of its minutes (replacing what it held). Returns the
 * number of hour rows written.
 */
export async function rollUpHours(db: Database | Tx, since: Date): Promise<number> {
  const sums = COUNT_COLUMNS.map((c) => `sum(m.${c})::bigint as ${c}`).join(', ');
  const res = await sql`
    with dirty as (
      select distinct account_id, domain_id, date_trunc('hour', minute, 'UTC') as hour
      from analytics_minute where updated_at >= ${since}
    ),
    mins as (
      select d.hour, m.* from analytics_minute m
      join dirty d on m.account_id = d.account_id and m.domain_id = d.domain_id
       and m.minute >= d.hour and m.minute < d.hour + interval '1 hour'
    ),
    sums as (
      select account_id, domain_id, hour, ${sql.raw(sums.replaceAll('m.', ''))}
      from mins group by account_id, domain_id, hour
    ),
    blk as (
      select account_id, domain_id, hour, jsonb_object_agg(k, s) as blocked from (
        select account_id, domain_id, hour, e.key as k, sum(e.value::bigint) as s
        from mins cross join lateral jsonb_each_text(mins.blocked) as e
        group by account_id, domain_id, hour, e.key
      ) as b group by account_id, domain_id, hour
    )
    insert into analytics_hour (account_id, domain_id, hour, ${sql.raw(COUNT_COLUMNS.join(', '))}, blocked, updated_at)
    select s.account_id, s.domain_id, s.hour, ${sql.raw(COUNT_COLUMNS.map((c) => `s.${c}`).join(', '))}, coalesce(b.blocked, '{}'::jsonb), now()
    from sums s left join blk b on b.account_id = s.account_id and b.domain_id = s.domain_id and b.hour = s.hour
    on conflict (account_id, domain_id, hour) do update set
      ${sql.raw(COUNT_COLUMNS.map((c) => `${c} = excluded.${c}`).join(', '))}, blocked = excluded.blocked, updated_at = excluded.updated_at
  `.execute(db);
  return Number(res.numAffectedRows ?? 0);
}

/** Minutes before `cutoff` go; returns how many. */
export async function deleteMinutesBefore(db: Database | Tx, cutoff: Date): Promise<number> {
  const r = await db.deleteFrom('analytics_minute').where('minute', '<', cutoff).executeTakeFirst();
  return Number(r.numDeletedRows);
}

/** Hours before `cutoff` go; returns how many. */
export async function deleteHoursBefore(db: Database | Tx, cutoff: Date): Promise<number> {
  const r = await db.deleteFrom('analytics_hour').where('hour', '<', cutoff).executeTakeFirst();
  return Number(r.numDeletedRows);
}

/** One bucket of a series: the sums of its rows. */
export interface BucketRow {
  t: Date;
  counts: Record<CountColumn, number>;
  blocked: Record<string, number>;
}

/**
 * The account's counts in [from, to), summed per bucket of `step` (`minute`: from
 * analytics_minute; `hour`: from analytics_hour before `minutesFrom`, from the minutes after it),
 * over one domain or (domainId undefined) all the account's domains. Buckets without rows are
 * left out.
 */
export async function seriesRows(db: Database | Tx, accountId: string, domainId: string | undefined, step: 'minute' | 'hour', from: Date, to: Date, minutesFrom: Date): Promise<BucketRow[]> {
  const domainFilter = domainId === undefined ? sql`` : sql`and domain_id = ${domainId}`;
  const cols = sql.raw(COUNT_COLUMNS.join(', '));
  // Several domains' hours may sum past a bigint (each at most 60 × MINUTE_COUNT_MAX): held at its top.
  const sums = sql.raw(COUNT_COLUMNS.map((c) => `least(sum(${c}), 9223372036854775807)::bigint as ${c}`).join(', '));
  const sumsOf = (t: ReturnType<typeof sql.raw>) => sql`select ${t} as t, ${sums}, jsonb_agg(blocked) as blocked`;
  let query;
  if (step === 'minute') {
    query = sql`${sumsOf(sql.raw('minute'))} from analytics_minute where account_id = ${accountId} ${domainFilter} and minute >= ${from} and minute < ${to} group by minute order by minute`;
  } else {
    const split = new Date(Math.min(Math.max(minutesFrom.getTime(), from.getTime()), to.getTime()));
    // One domain's hours are one row each: read as they are. Several domains' are summed.
    const hours =
      domainId === undefined
        ? sql`${sumsOf(sql.raw('hour'))} from analytics_hour where account_id = ${accountId} and hour >= ${from} and hour < ${split} group by hour`
        : sql`select hour as t, ${cols}, blocked from analytics_hour where account_id = ${accountId} ${domainFilter} and hour >= ${from} and hour < ${split}`;
    const minutes = sql`${sumsOf(sql`date_trunc('hour', minute, 'UTC')`)} from analytics_minute where account_id = ${accountId} ${domainFilter} and minute >= ${split} and minute < ${to} group by 1`;
    query = sql`${hours} union all ${minutes} order by t`;
  }
  // The blocked objects of a bucket are merged here (an object, or a list of them when summed):
  // exploding them in SQL (jsonb_each) cost more than the rest of the query (bench:analytics).
  const res = await sql<Record<string, unknown>>`${query}`.execute(db);
  return res.rows.map((r) => {
    const blocked: Record<string, number> = {};
    const raw: unknown = typeof r.blocked === 'string' ? JSON.parse(r.blocked) : r.blocked;
    for (const b of (Array.isArray(raw) ? raw : [raw]) as Record<string, number | string>[]) for (const k in b) blocked[k] = (blocked[k] ?? 0) + Number(b[k]);
    return {
      t: new Date(r.t as Date | string),
      counts: Object.fromEntries(COUNT_COLUMNS.map((c) => [c, Number(r[c])])) as Record<CountColumn, number>,
      blocked,
    };
  });
}

/** What the top lists count: the account's blocked events in [from, to), of one domain (by name) or all. */
export interface TopFilter {
  accountId: string;
  domain: string | undefined;
  from: Date;
  to: Date;
  limit: number;
}

function eventsIn(db: Database | Tx, f: TopFilter) {
  let q = db
    .selectFrom('waf_events')
    .where('waf_events.account_id', '=', f.accountId)
    .where('waf_events.blocked', '=', true)
    .where('waf_events.occurred_at', '>=', f.from)
    .where('waf_events.occurred_at', '<', f.to);
  if (f.domain !== undefined) q = q.where('waf_events.domain', '=', f.domain);
  return q;
}

/** The most blocked source addresses, paths and rules (folded events count as many), most first. */
export async function topBy(db: Database | Tx, f: TopFilter, column: 'source_ip' | 'path' | 'rule_id'): Promise<{ key: string; count: number }[]> {
  const rows = await eventsIn(db, f)
    .select([`waf_events.${column} as key`, (eb) => eb.fn.sum<number>('waf_events.count').as('count')])
    .where(`waf_events.${column}`, 'is not', null)
    .groupBy(`waf_events.${column}`)
    .orderBy('count', 'desc')
    .orderBy('key')
    .limit(f.limit)
    .execute();
  return rows.map((r) => ({ key: String(r.key), count: Number(r.count) }));
}

/**
 * The most blocked countries: country_blocked events name the account's block_country rule that
 * matched, whose value is the country code (events of a rule deleted since are not counted).
 */
export async function topCountries(db: Database | Tx, f: TopFilter): Promise<{ key: string; count: number }[]> {
  const rows = await eventsIn(db, f)
    .innerJoin('waf_rules', (j) => j.onRef('waf_rules.id', '=', 'waf_events.rule_id').on('waf_rules.account_id', '=', f.accountId).on('waf_rules.rule_type', '=', 'block_country'))
    .where('waf_events.reason', '=', 'country_blocked')
    .select(['waf_rules.value as key', (eb) => eb.fn.sum<number>('waf_events.count').as('count')])
    .groupBy('waf_rules.value')
    .orderBy('count', 'desc')
    .orderBy('key')
    .limit(f.limit)
    .execute();
  return rows.map((r) => ({ key: String(r.key), count: Number(r.count) }));
}

/** The name of the account's domain with this id; undefined when it is not the account's. */
export async function accountDomainName(db: Database | Tx, accountId: string, id: string): Promise<string | undefined> {
  const row = await db.selectFrom('domains').select('domain').where('id', '=', id).where('account_id', '=', accountId).executeTakeFirst();
  return row?.domain;
}
