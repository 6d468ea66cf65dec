import { EVENT_FIELD_MAX, isHostname, isIP, type WafEventItem } from '@rampart/protocol';
import type { ServiceContext } from '../context.js';
import { isUuid } from '../context.js';

export const EVENTS_PER_SERVER_PER_DAY = 5000;
export const EVENT_RETENTION_DAYS = 7;

type Detail = keyof typeof EVENT_FIELD_MAX;
const DETAILS = Object.keys(EVENT_FIELD_MAX) as Detail[];

/** A detail within its cap (the messages schema holds the same line; this holds it for any caller). */
function detailOk(e: WafEventItem, field: Detail): boolean {
  const v = e[field];
  return v === undefined || v === null || (typeof v === 'string' && v.length <= EVENT_FIELD_MAX[field]);
}

/**
 * Text PostgreSQL can store: NUL (which a decoded %00 can produce) and lone surrogates become
 * U+FFFD. Absent (an agent from before request details) is null.
 */
function storable(v: string | null | undefined): string | null {
  if (v === undefined || v === null) return null;
  return v.replace(/\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd');
}

/**
 * Stores a batch of WAF events (blocked, challenged, or detected in detect mode) from one agent.
 * The agent already caps them at 5,000 a UTC day; the service holds the same line, so a
 * misbehaving agent cannot flood the table. An event with a bad address, domain, rule id or an
 * over-long detail is dropped.
 */
export async function storeEvents(ctx: ServiceContext, accountId: string, serverId: string, events: readonly WafEventItem[]): Promise<number> {
  const valid = events.filter(
    (e) =>
      isIP(e.ip) &&
      isHostname(e.domain) &&
      (e.ruleId === null || isUuid(e.ruleId)) &&
      DETAILS.every((f) => detailOk(e, f)) &&
      (e.blocked === undefined || typeof e.blocked === 'boolean'),
  );
  if (valid.length === 0) return 0;
  const now = ctx.now();
  const dayStart = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate()));
  const { count } = await ctx.db
    .selectFrom('waf_events')
    .select((eb) => eb.fn.countAll<number>().as('count'))
    .where('server_id', '=', serverId)
    .where('occurred_at', '>=', dayStart)
    .executeTakeFirstOrThrow();
  const room = Math.max(0, EVENTS_PER_SERVER_PER_DAY - Number(count));
  const rows = valid.slice(0, room).map((e) => ({
    account_id: accountId,
    server_id: serverId,
    domain: e.domain,
    source_ip: e.ip,
    reason: e.reason,
    rule_id: e.ruleId,
    // HAProxy's timestamp, but never in the future of the service's clock
    occurred_at: new Date(Math.min(e.ts * 1000, now.getTime())),
    method: storable(e.method),
    path: storable(e.path),
    location: storable(e.location),
    matched: storable(e.matched),
    blocked: e.blocked ?? true,
  }));
  if (rows.length) await ctx.db.insertInto('waf_events').values(rows).execute();
  return rows.length;
}

/** The retention job: events older than 7 days go. */
export async function pruneEvents(ctx: ServiceContext): Promise<number> {
  const cutoff = new Date(ctx.now().getTime() - EVENT_RETENTION_DAYS * 86_400_000);
  const res = await ctx.db.deleteFrom('waf_events').where('occurred_at', '<', cutoff).executeTakeFirst();
  return Number(res.numDeletedRows);
}
