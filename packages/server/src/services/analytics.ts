import { AGENT_LIMITS, ANALYTICS_LIMITS, LATENCY_BUCKETS_MS, STATUS_CLASSES, WAF_REASONS, type AnalyticsBatchPayload, type StatusClass } from '@rampart/protocol';
import type { ServiceContext } from '../context.js';
import { ISO_TIME, isUuid } from '../values.js';
import {
  addHistograms,
  addMinuteCounts,
  accountDomainName,
  deleteHoursBefore,
  deleteMinutesBefore,
  rollUpHours,
  serverDomains,
  seriesRows,
  topBy,
  topCountries,
  type CountColumn,
  type MinuteCounts,
} from '../data/analytics.js';
import { addRuleHits, deleteRuleHitsBefore } from '../data/custom-rules.js';
import { readJobState, writeJobState } from '../data/job-state.js';
import { AppError, invalidField } from '../errors.js';

const MINUTE_MS = 60_000;
const HOUR_MS = 3_600_000;
const MINUTES_KEPT_MS = ANALYTICS_LIMITS.minuteRetentionHours * HOUR_MS;
const HOURS_KEPT_MS = ANALYTICS_LIMITS.hourRetentionDays * 24 * HOUR_MS;
const REASONS = new Set<string>(WAF_REASONS);
/** Hits of custom rules: minutes for the last hour and day, hours for the week (data/custom-rules.ts ruleHits). */
const RULE_MINUTES_KEPT_MS = 25 * HOUR_MS;
const RULE_HOURS_KEPT_MS = 8 * 24 * HOUR_MS;
const STATUS_COLUMN: Record<StatusClass, CountColumn> = { '1xx': 's1xx', '2xx': 's2xx', '3xx': 's3xx', '4xx': 's4xx', '5xx': 's5xx', other: 's_other' };

const floorTo = (t: number, step: number) => Math.floor(t / step) * step;

export interface StoredAnalytics {
  /** Domains whose counts were added to the minute. */
  stored: number;
  /** Entries for domains not assigned to the sending server: dropped. */
  unassigned: number;
  /** Entries with a count outside its bounds or an unknown reason: dropped. */
  invalid: number;
  /** Why the whole batch was refused (its minute), if it was. */
  refused?: string;
}

const countOk = (n: unknown, max: number) => typeof n === 'number' && Number.isSafeInteger(n) && n >= 0 && n <= max;

/**
 * One analytics/batch from a shield server's agent. Nothing in it is taken on trust beyond what
 * the server may claim: the minute must be a UTC minute, not in the future and not older than
 * the 48 hours minutes are kept; only the server's own domains (by name) are counted; every
 * number is within the protocol's bounds (the schema holds the same line; this holds it for any
 * caller) and stays there when entries of one domain are summed. The counts are added to what
 * the minute holds already (the domain's other servers, earlier batches).
 */
export async function storeAnalytics(ctx: ServiceContext, accountId: string, serverId: string, batch: AnalyticsBatchPayload): Promise<StoredAnalytics> {
  const result: StoredAnalytics = { stored: 0, unassigned: 0, invalid: 0 };
  const at = Date.parse(batch.minute);
  const now = ctx.now().getTime();
  if (!Number.isFinite(at) || at % MINUTE_MS !== 0) return { ...result, refused: `minute ${batch.minute} is not the start of a UTC minute` };
  if (at > floorTo(now, MINUTE_MS)) return { ...result, refused: `minute ${batch.minute} is in the future` };
  if (at < now - MINUTES_KEPT_MS) return { ...result, refused: `minute ${batch.minute} is older than the ${ANALYTICS_LIMITS.minuteRetentionHours} hours minutes are kept` };
  const rules = (batch.rules ?? []).slice(0, AGENT_LIMITS.analyticsRules);
  if (batch.domains.length === 0 && rules.length === 0) return result;
  const own = new Map((await serverDomains(ctx.db, accountId, serverId)).map((d) => [d.domain.toLowerCase(), d.id]));
  const rows = new Map<string, MinuteCounts>();
  const R = AGENT_LIMITS.analyticsRequests;
  const B = AGENT_LIMITS.analyticsBytes;
  for (const d of batch.domains.slice(0, AGENT_LIMITS.analyticsDomains)) {
    const domainId = typeof d.domain === 'string' ? own.get(d.domain.toLowerCase()) : undefined;
    if (domainId === undefined) {
      result.unassigned++;
      continue;
    }
    const blocked = Object.entries(d.blocked ?? {});
    const valid =
      countOk(d.requests, R) &&
      STATUS_CLASSES.every((c) => countOk(d.status?.[c], R)) &&
      countOk(d.bytesIn, B) &&
      countOk(d.bytesOut, B) &&
      blocked.every(([reason, n]) => REASONS.has(reason) && countOk(n, R)) &&
      (d.latency === undefined || (Array.isArray(d.latency) && d.latency.length === LATENCY_BUCKETS_MS.length + 1 && d.latency.every((n) => countOk(n, R))));
    if (!valid) {
      result.invalid++;
      continue;
    }
    const row =
      rows.get(domainId) ??
      rows.set(domainId, { accountId, domainId, minute: new Date(at), requests: 0, s1xx: 0, s2xx: 0, s3xx: 0, s4xx: 0, s5xx: 0, sOther: 0, bytesIn: 0, bytesOut: 0, blocked: {} }).get(domainId)!;
    row.requests = Math.min(R, row.requests + d.requests);
    row.s1xx = Math.min(R, row.s1xx + d.status['1xx']);
    row.s2xx = Math.min(R, row.s2xx + d.status['2xx']);
    row.s3xx = Math.min(R, row.s3xx + d.status['3xx']);
    row.s4xx = Math.min(R, row.s4xx + d.status['4xx']);
    row.s5xx = Math.min(R, row.s5xx + d.status['5xx']);
    row.sOther = Math.min(R, row.sOther + d.status.other);
    row.bytesIn = Math.min(B, row.bytesIn + d.bytesIn);
    row.bytesOut = Math.min(B, row.bytesOut + d.bytesOut);
    for (const [reason, n] of blocked) if (n > 0) row.blocked[reason] = Math.min(R, (row.blocked[reason] ?? 0) + n);
    if (d.latency) row.latency = addHistograms(row.latency, d.latency).map((n) => Math.min(R, n));
    result.stored++;
  }
  await addMinuteCounts(ctx.db, [...rows.values()], ctx.now());
  await storeRuleHits(ctx, accountId, [...own.values()], new Date(at), rules, result);
  return result;
}

/**
 * A batch's hits of custom rules: each a rule id and a count within the protocol's bounds (else
 * dropped as invalid), the same rule's entries summed; only rules of the account that the server
 * has (account-wide, or of one of its domains) are counted (addRuleHits).
 */
async function storeRuleHits(ctx: ServiceContext, accountId: string, domainIds: string[], minute: Date, rules: NonNullable<AnalyticsBatchPayload['rules']>, result: StoredAnalytics): Promise<void> {
  const byRule = new Map<string, number>();
  for (const r of rules) {
    if (!isUuid(r?.ruleId) || !countOk(r.hits, AGENT_LIMITS.analyticsRequests)) {
      result.invalid++;
      continue;
    }
    const id = r.ruleId.toLowerCase();
    byRule.set(id, Math.min(AGENT_LIMITS.analyticsRequests, (byRule.get(id) ?? 0) + r.hits));
  }
  await addRuleHits(
    ctx.db,
    accountId,
    domainIds,
    minute,
    [...byRule].filter(([, n]) => n > 0).map(([ruleId, hits]) => ({ ruleId, hits })),
  );
}

/** The job's bookmark: when its last run began. */
const ROLLUP_STATE = 'analytics-rollup';
/** Minutes added this long before the last run began are rolled up again (a batch's transaction may have been open then). */
const ROLLUP_SLACK_MS = 5 * MINUTE_MS;
/** How often serve.ts runs the job. */
export const ANALYTICS_JOB_INTERVAL_MS = 5 * MINUTE_MS;

/**
 * The analytics job: every hour with a minute added since its last run (less a slack) is
 * recomputed from its minutes; then minutes of whole hours older than 48 hours and hours older
 * than 30 days go. Minutes are deleted by whole hours, so every hour the minute table holds is
 * whole, and an hour is rolled up (in this run) before its minutes go.
 */
export async function runAnalyticsJob(ctx: ServiceContext): Promise<{ hours: number; minutesDeleted: number; hoursDeleted: number }> {
  const started = ctx.now();
  const last = await readJobState(ctx.db, ROLLUP_STATE);
  const lastMs = last === undefined ? NaN : Date.parse(last);
  const since = new Date(Number.isFinite(lastMs) ? lastMs - ROLLUP_SLACK_MS : 0);
  const hours = await rollUpHours(ctx.db, since);
  const minutesDeleted = await deleteMinutesBefore(ctx.db, new Date(floorTo(started.getTime() - MINUTES_KEPT_MS, HOUR_MS)));
  const hoursDeleted = await deleteHoursBefore(ctx.db, new Date(floorTo(started.getTime() - HOURS_KEPT_MS, HOUR_MS)));
  await deleteRuleHitsBefore(ctx.db, new Date(floorTo(started.getTime(), MINUTE_MS) - RULE_MINUTES_KEPT_MS), new Date(floorTo(started.getTime(), HOUR_MS) - RULE_HOURS_KEPT_MS));
  await writeJobState(ctx.db, ROLLUP_STATE, started.toISOString());
  return { hours, minutesDeleted, hoursDeleted };
}

/** GET /api/analytics's query. */
export interface AnalyticsQuery {
  domain?: string | undefined;
  from?: string | undefined;
  to?: string | undefined;
  step?: string | undefined;
}

/** How far in the future `to` may be (clients' clocks differ from ours). */
const FUTURE_SKEW_MS = 5 * MINUTE_MS;

function parseTime(field: 'from' | 'to', v: string): number {
  const at = ISO_TIME.test(v) ? Date.parse(v) : NaN;
  if (!Number.isFinite(at)) throw invalidField(field, 'must be an ISO 8601 time, e.g. 2026-11-23T06:00:00Z');
  return at;
}

type Counts = { requests: number; status: Record<StatusClass, number>; bytes_in: number; bytes_out: number; blocked: Record<string, number> };
const top = (rows: { key: string; count: number }[], name: string) => rows.map((r) => ({ [name]: r.key, count: r.count }));

/**
 * The account's traffic over [from, to) in steps of a minute or an hour, over one domain (its
 * id) or all the account's domains, with the top blocked addresses, paths, countries and rules
 * (from the stored WAF events) over the same range. Every bad parameter is a 400 naming it; a
 * domain id that is not one of the account's domains is a 404.
 */
export async function getAnalytics(ctx: ServiceContext, accountId: string, q: AnalyticsQuery) {
  const now = ctx.now().getTime();
  let domainName: string | undefined;
  if (q.domain !== undefined) {
    if (!isUuid(q.domain)) throw new AppError('domain_not_found');
    domainName = await accountDomainName(ctx.db, accountId, q.domain);
    if (domainName === undefined) throw new AppError('domain_not_found');
  }
  const to = q.to !== undefined ? parseTime('to', q.to) : now;
  if (to > now + FUTURE_SKEW_MS) throw invalidField('to', 'must not be in the future');
  const from = q.from !== undefined ? parseTime('from', q.from) : to - 24 * HOUR_MS;
  if (from >= to) throw invalidField(q.from !== undefined ? 'from' : 'to', 'from must be before to');
  if (from < floorTo(now - HOURS_KEPT_MS, HOUR_MS)) throw invalidField('from', `must be within the ${ANALYTICS_LIMITS.hourRetentionDays} days analytics are kept`);
  const minuteFloor = floorTo(now - MINUTES_KEPT_MS, HOUR_MS);
  let step: 'minute' | 'hour';
  if (q.step === undefined) step = to - from <= ANALYTICS_LIMITS.minuteStepMaxRangeHours * HOUR_MS && from >= minuteFloor ? 'minute' : 'hour';
  else if (q.step === 'minute' || q.step === 'hour') step = q.step;
  else throw invalidField('step', 'must be minute or hour');
  const stepMs = step === 'minute' ? MINUTE_MS : HOUR_MS;
  if (step === 'minute' && from < minuteFloor)
    throw invalidField('from', `with step minute, must be within the last ${ANALYTICS_LIMITS.minuteRetentionHours} hours (minutes are kept that long); use step hour`);
  const start = floorTo(from, stepMs);
  const points = Math.ceil((to - start) / stepMs);
  if (points > ANALYTICS_LIMITS.maxPoints) throw invalidField('step', `${step} over this range is ${points} points, more than ${ANALYTICS_LIMITS.maxPoints}; use step hour or a shorter range`);

  // Hours before the last whole one come from analytics_hour (rolled up by the job every 5
  // minutes); the latest come straight from the minutes, so the newest traffic shows at once.
  const minutesFrom = new Date(floorTo(now, HOUR_MS) - HOUR_MS);
  const filter = { accountId, domain: domainName, from: new Date(from), to: new Date(to), limit: ANALYTICS_LIMITS.top };
  const [rows, ips, paths, countries, rules] = await Promise.all([
    seriesRows(ctx.db, accountId, q.domain, step, new Date(start), new Date(to), minutesFrom),
    topBy(ctx.db, filter, 'source_ip'),
    topBy(ctx.db, filter, 'path'),
    topCountries(ctx.db, filter),
    topBy(ctx.db, filter, 'rule_id'),
  ]);
  const byTime = new Map(rows.map((r) => [r.t.getTime(), r]));
  const series: ({ t: string } & Counts)[] = [];
  for (let t = start; t < to; t += stepMs) {
    const r = byTime.get(t);
    series.push({
      t: new Date(t).toISOString(),
      requests: r?.counts.requests ?? 0,
      status: Object.fromEntries(STATUS_CLASSES.map((c) => [c, r?.counts[STATUS_COLUMN[c]] ?? 0])) as Record<StatusClass, number>,
      bytes_in: r?.counts.bytes_in ?? 0,
      bytes_out: r?.counts.bytes_out ?? 0,
      blocked: r?.blocked ?? {},
    });
  }
  return {
    from: new Date(start).toISOString(),
    to: new Date(to).toISOString(),
    step,
    series,
    top: { ips: top(ips, 'ip'), paths: top(paths, 'path'), countries: top(countries, 'country'), rules: top(rules, 'rule_id') },
  };
}
