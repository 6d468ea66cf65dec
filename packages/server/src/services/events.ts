import { AGENT_LIMITS, EVENT_FIELD_MAX, isHostname, isIP, type WafEventItem } from '@rampart/protocol';
import type { ServiceContext } from '../context.js';
import { isUuid } from '../context.js';
import { deleteEventsBefore } from '../data/events.js';
import { agentChannelStore, type AgentChannelStore } from './agent-channel.js';

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

export interface StoredEvents {
  stored: number;
  /** Dropped: a bad address, domain, rule id or an over-long detail. */
  invalid: number;
  /** Dropped: for a domain not assigned to the sending server. */
  unassigned: number;
  /** Dropped: past the server's cap for the day. */
  overCap: number;
}

/**
 * Stores a batch of WAF events (blocked, challenged, or detected in detect mode) from one agent.
 * Nothing an agent says is taken on trust: an event with a bad address, domain, rule id or an
 * over-long detail is dropped, and so is one for a domain not assigned to that server. At most
 * AGENT_LIMITS.eventsPerServerPerDay are stored per server per UTC day, counted by the time the
 * service received them, so an event that claims an earlier time is stored with that time but
 * counts toward today. The server's row is locked meanwhile, so concurrent batches (from
 * another process too) cannot both take the last room.
 */
export async function storeEvents(
  ctx: ServiceContext,
  accountId: string,
  serverId: string,
  events: readonly WafEventItem[],
  store: AgentChannelStore = agentChannelStore,
): Promise<StoredEvents> {
  const valid = events.filter(
    (e) =>
      isIP(e.ip) &&
      isHostname(e.domain) &&
      (e.ruleId === null || isUuid(e.ruleId)) &&
      DETAILS.every((f) => detailOk(e, f)) &&
      (e.blocked === undefined || typeof e.blocked === 'boolean'),
  );
  const result: StoredEvents = { stored: 0, invalid: events.length - valid.length, unassigned: 0, overCap: 0 };
  if (valid.length === 0) return result;
  return ctx.db.transaction().execute(async (tx) => {
    const server = await store.findServer(tx, accountId, serverId, true);
    const assigned = new Set(server ? await store.domainNamesOfServer(tx, serverId) : []);
    const own = valid.filter((e) => assigned.has(e.domain.toLowerCase()));
    result.unassigned = valid.length - own.length;
    if (own.length === 0) return result;
    const now = ctx.now();
    const dayStart = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate()));
    const room = Math.max(0, AGENT_LIMITS.eventsPerServerPerDay - (await store.countEventsReceivedSince(tx, serverId, dayStart)));
    const rows = own.slice(0, room).map((e) => ({
      account_id: accountId,
      server_id: serverId,
      domain: e.domain,
      source_ip: e.ip,
      reason: e.reason,
      rule_id: e.ruleId,
      // HAProxy's timestamp, but never in the future of the service's clock
      occurred_at: new Date(Math.min(e.ts * 1000, now.getTime())),
      received_at: now,
      method: storable(e.method),
      path: storable(e.path),
      location: storable(e.location),
      matched: storable(e.matched),
      blocked: e.blocked ?? true,
    }));
    result.overCap = own.length - rows.length;
    await store.insertEvents(tx, rows);
    result.stored = rows.length;
    return result;
  });
}

/** The retention job: events older than 7 days go. */
export async function pruneEvents(ctx: ServiceContext): Promise<number> {
  const cutoff = new Date(ctx.now().getTime() - EVENT_RETENTION_DAYS * 86_400_000);
  return deleteEventsBefore(ctx.db, cutoff);
}
