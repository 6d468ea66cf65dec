import { AGENT_LIMITS, EVENT_FIELD_MAX, isHostname, isIP, WAF_REASONS, type WafEventItem, type WafReason } from '@rampart/protocol';
import type { Insertable } from 'kysely';
import type { ServiceContext } from '../context.js';
import type { WafEventsTable } from '../db/schema.js';
import { iso, isUuid } from '../context.js';
import { batchEventRows, deleteEventsBefore, eventCursor, listEventRows, type EventFilter } from '../data/events.js';
import { invalidField } from '../errors.js';
import { listPage, type Page, type PageParams } from './paging.js';
import { agentChannelStore, type AgentChannelStore } from './agent-channel.js';

export const EVENT_RETENTION_DAYS = 7;

type Detail = keyof typeof EVENT_FIELD_MAX;
const DETAILS = Object.keys(EVENT_FIELD_MAX) as Detail[];
const REQUEST_ID = /^[A-Za-z0-9_-]{1,64}$/;

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
  /** Stored as new rows. */
  stored: number;
  /** Folded into an identical event's row (within FOLD_WINDOW_MS): its count went up, no new row. */
  folded: number;
  /** Dropped: a bad address, domain, rule id or an over-long detail. */
  invalid: number;
  /** Dropped: for a domain not assigned to the sending server. */
  unassigned: number;
  /** Dropped: past the server's cap for the day (or, for FLOOD_REASONS, past their half of it). */
  overCap: number;
}

/** Identical events (same server, source address, domain, reason and rule) this close in event time are one row. */
export const FOLD_WINDOW_MS = 60_000;
/** Rate-limit and challenge reasons: a flood of them may take at most FLOOD_ROWS_PER_DAY of a server's rows a day. */
export const FLOOD_REASONS: readonly WafReason[] = ['rate_limited', 'bot_challenge'];
/** Half the daily cap: the other half stays for detections and blocks during a flood. */
export const FLOOD_ROWS_PER_DAY = Math.floor(AGENT_LIMITS.eventsPerServerPerDay / 2);

const foldKey = (ip: string, domain: string, reason: string, ruleId: string | null) => JSON.stringify([ip, domain, reason, ruleId]);

/**
 * Stores a batch of WAF events (blocked, challenged, or detected in detect mode) from one agent.
 * Nothing an agent says is taken on trust: an event with a bad address, domain, rule id or an
 * over-long detail is dropped, and so is one for a domain not assigned to that server.
 *
 * Folding: an event identical to a row of the server (same source address, domain, reason and
 * rule id) whose first occurrence is within FOLD_WINDOW_MS of the event's time (either side, by
 * event time: the row's occurred_at against the event's ts) is not a new row: the row's count
 * goes up and its last_seen_at becomes the latest time folded in. Rows of the same batch fold
 * too. The row keeps the first occurrence's details and request id. A persistent source so
 * yields one row a minute.
 *
 * The cap: at most AGENT_LIMITS.eventsPerServerPerDay rows per server per UTC day, counted by
 * the time the service received them (an event that claims an earlier time is stored with that
 * time but counts toward today), and of them at most FLOOD_ROWS_PER_DAY of FLOOD_REASONS, so a
 * flood leaves room for detections. Folding takes no room. The server's row is locked
 * meanwhile, so concurrent batches (from another process too) cannot both take the last room.
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
      (e.blocked === undefined || typeof e.blocked === 'boolean') &&
      (e.requestId === undefined || (typeof e.requestId === 'string' && REQUEST_ID.test(e.requestId))),
  );
  const result: StoredEvents = { stored: 0, folded: 0, invalid: events.length - valid.length, unassigned: 0, overCap: 0 };
  if (valid.length === 0) return result;
  return ctx.db.transaction().execute(async (tx) => {
    const server = await store.findServer(tx, accountId, serverId, true);
    const assigned = new Set(server ? await store.domainNamesOfServer(tx, serverId) : []);
    const own = valid.filter((e) => assigned.has(e.domain.toLowerCase()));
    result.unassigned = valid.length - own.length;
    if (own.length === 0) return result;
    const now = ctx.now();
    const dayStart = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate()));
    let room = Math.max(0, AGENT_LIMITS.eventsPerServerPerDay - (await store.countEventsReceivedSince(tx, serverId, dayStart)));
    let floodRoom = Math.max(0, FLOOD_ROWS_PER_DAY - (await store.countEventsReceivedSince(tx, serverId, dayStart, FLOOD_REASONS)));

    // HAProxy's timestamp, but never in the future of the service's clock
    const timed = own.map((e) => ({ e, at: new Date(Math.min(e.ts * 1000, now.getTime())) }));
    const times = timed.map((t) => t.at.getTime());
    const existing = await store.foldableEvents(
      tx,
      serverId,
      own.map((e) => e.ip),
      new Date(Math.min(...times) - FOLD_WINDOW_MS),
      new Date(Math.max(...times) + FOLD_WINDOW_MS),
    );
    /** Rows an event may fold into, by identity: the stored ones and this batch's new ones. */
    type Target = { at: number; row?: Insertable<WafEventsTable>; id?: string; n: number; last: number };
    const targets = new Map<string, Target[]>();
    const add = (key: string, t: Target) => (targets.get(key) ?? targets.set(key, []).get(key)!).push(t);
    for (const r of existing) add(foldKey(r.source_ip, r.domain, r.reason, r.rule_id), { at: r.occurred_at.getTime(), id: r.id, n: 0, last: r.occurred_at.getTime() });

    const rows: Insertable<WafEventsTable>[] = [];
    for (const { e, at } of timed) {
      const t = at.getTime();
      const domain = e.domain.toLowerCase();
      const key = foldKey(e.ip, domain, e.reason, e.ruleId);
      const into = targets.get(key)?.find((x) => Math.abs(x.at - t) <= FOLD_WINDOW_MS);
      if (into) {
        into.n += 1;
        into.last = Math.max(into.last, t);
        result.folded += 1;
        continue;
      }
      const flood = FLOOD_REASONS.includes(e.reason);
      if (room === 0 || (flood && floodRoom === 0)) {
        result.overCap += 1;
        continue;
      }
      room -= 1;
      if (flood) floodRoom -= 1;
      const row: Insertable<WafEventsTable> = {
        account_id: accountId,
        server_id: serverId,
        domain,
        source_ip: e.ip,
        reason: e.reason,
        rule_id: e.ruleId,
        occurred_at: at,
        received_at: now,
        method: storable(e.method),
        path: storable(e.path),
        location: storable(e.location),
        matched: storable(e.matched),
        blocked: e.blocked ?? true,
        request_id: e.requestId ?? null,
      };
      rows.push(row);
      add(key, { at: t, row, n: 0, last: t });
    }
    for (const list of targets.values()) {
      for (const x of list) {
        if (x.n === 0) continue;
        if (x.row) {
          x.row.count = 1 + x.n;
          x.row.last_seen_at = new Date(x.last);
        } else await store.foldEvent(tx, x.id!, x.n, new Date(x.last));
      }
    }
    await store.insertEvents(tx, rows);
    result.stored = rows.length;
    // The live streams load this batch's rows by server and receipt time, once committed.
    if (rows.length > 0) await ctx.live?.(tx, { kind: 'live-events', accountId, serverId, receivedAt: now.toISOString() });
    return result;
  });
}

/** The retention job: events older than 7 days go. */
export async function pruneEvents(ctx: ServiceContext): Promise<number> {
  const cutoff = new Date(ctx.now().getTime() - EVENT_RETENTION_DAYS * 86_400_000);
  return deleteEventsBefore(ctx.db, cutoff);
}

/** GET /api/waf/events's query: the filters and the page. */
export interface EventQuery extends PageParams {
  domain?: string | undefined;
  reason?: string | undefined;
  ip?: string | undefined;
  since?: string | undefined;
  until?: string | undefined;
}

const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})$/i;

/** The filters of GET /api/waf/events, each checked: a bad one is a 400 naming it. */
export function eventFilter(ctx: ServiceContext, q: EventQuery): EventFilter {
  const filter: EventFilter = {};
  if (q.domain !== undefined) {
    const domain = q.domain.toLowerCase();
    if (!isHostname(domain)) throw invalidField('domain', 'must be a domain name');
    filter.domain = domain;
  }
  if (q.reason !== undefined) {
    if (!(WAF_REASONS as readonly string[]).includes(q.reason)) throw invalidField('reason', `must be one of ${WAF_REASONS.join(', ')}`);
    filter.reason = q.reason;
  }
  if (q.ip !== undefined) {
    if (!isIP(q.ip)) throw invalidField('ip', 'must be an IPv4 or IPv6 address');
    filter.ip = q.ip.toLowerCase();
  }
  const kept = ctx.now().getTime() - EVENT_RETENTION_DAYS * 86_400_000;
  for (const field of ['since', 'until'] as const) {
    const v = q[field];
    if (v === undefined) continue;
    const at = ISO_TIME.test(v) ? Date.parse(v) : NaN;
    if (!Number.isFinite(at)) throw invalidField(field, 'must be an ISO 8601 time, e.g. 2026-11-23T06:00:00Z');
    if (at < kept) throw invalidField(field, `must be within the ${EVENT_RETENTION_DAYS} days events are kept`);
    filter[field] = new Date(at);
  }
  if (filter.since && filter.until && filter.since > filter.until) throw invalidField('since', 'must not be after until');
  return filter;
}

/** A stored event as GET /api/waf/events shows it. */
function eventView(e: Awaited<ReturnType<typeof listEventRows>>[number]) {
  return {
    id: e.id,
    timestamp: iso(e.occurred_at)!,
    source_ip: e.source_ip,
    domain: e.domain,
    reason: e.reason,
    rule_id: e.rule_id,
    server_id: e.server_id,
    method: e.method,
    path: e.path,
    location: e.location,
    matched: e.matched,
    blocked: e.blocked,
    count: e.count,
    last_seen_at: iso(e.last_seen_at),
    request_id: e.request_id,
  };
}

/**
 * The events one batch of a server stored (services/events.ts storeEvents: same receipt time), the
 * account's only, as GET /api/waf/events shows them, oldest first: what the live stream sends.
 */
export async function eventsOfBatch(ctx: ServiceContext, accountId: string, serverId: string, receivedAt: Date, limit = AGENT_LIMITS.eventsPerServerPerDay) {
  const rows = await batchEventRows(ctx.db, accountId, serverId, receivedAt, limit);
  return rows.map((r) => eventView({ ...r, id: String(r.id) }));
}

/**
 * The account's events matching the filters, newest first (by first occurrence), a page at a
 * time: `limit` (default 50) and `before` (the id of the previous page's last event).
 */
export async function listEvents(ctx: ServiceContext, accountId: string, query: EventQuery): Promise<Page<ReturnType<typeof eventView>>> {
  const filter = eventFilter(ctx, query);
  return listPage(
    query,
    (id) => eventCursor(ctx.db, accountId, id),
    (limit, before) => listEventRows(ctx.db, accountId, filter, limit, before),
    eventView,
    (id) => /^[1-9][0-9]{0,17}$/.test(id),
  );
}
