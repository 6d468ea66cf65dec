import { isHostname, isIP, type WafEventItem } from '@rampart/protocol';
import type { ServiceContext } from '../context.js';
import { isUuid } from '../context.js';

export const EVENTS_PER_SERVER_PER_DAY = 5000;
export const EVENT_RETENTION_DAYS = 7;

/**
 * Stores a batch of blocked-request events from one agent. The agent already caps them at 5,000 a
 * UTC day; the service holds the same line, so a misbehaving agent cannot flood the table.
 */
export async function storeEvents(ctx: ServiceContext, accountId: string, serverId: string, events: readonly WafEventItem[]): Promise<number> {
  const valid = events.filter((e) => isIP(e.ip) && isHostname(e.domain) && (e.ruleId === null || isUuid(e.ruleId)));
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
