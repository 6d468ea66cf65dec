import {
  AGENT_LIMITS,
  EVENT_FIELD_MAX,
  eventFoldKey,
  eventRowFits,
  FOLD_WINDOW_SECONDS,
  isHostname,
  isIP,
  MAX_UNIX_SECONDS,
  takeEventRow,
  WAF_REASONS,
  type WafEventItem,
  type WafReason,
} from '@rampart/protocol';
import type { Insertable } from 'kysely';
import type { ServiceContext } from '../context.js';
import type { Tx } from '../db/database.js';
import type { WafEventsTable } from '../db/schema.js';
import { ISO_TIME, isUuid, iso } from '../values.js';
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
  // eslint-disable-next-line no-control-regex -- deliberate: PostgreSQL text cannot hold NUL, so it is replaced
  return v.replace(/\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd');
}

export interface StoredEvents {
  /** Stored as new rows. */
  stored: number;
  /** Folded into the same event's row (within FOLD_WINDOW_MS): its count went up, no new row. */
  folded: number;
  /** Dropped: a bad address, domain, rule id, fold field or an over-long detail. */
  invalid: number;
  /** Dropped: for a domain not assigned to the sending server. */
  unassigned: number;
  /** Dropped: past the server's room for the day for its kind of event (protocol eventRowFits). */
  overCap: number;
}

/** Events this close in event time to a row's first occurrence fold into it (the agent folds by the same window). */
export const FOLD_WINDOW_MS = FOLD_WINDOW_SECONDS * 1000;
/** The largest count a row holds (int4). */
const MAX_COUNT = 2_147_483_647;

/** The fold fields an agent sends (count, lastTs, requestIds), checked for any caller. */
function foldFieldsOk(e: WafEventItem): boolean {
  const count = e.count === undefined || (Number.isSafeInteger(e.count) && e.count >= 1 && e.count <= AGENT_LIMITS.foldedPerItem);
  const last = e.lastTs === undefined || (Number.isSafeInteger(e.lastTs) && e.lastTs >= 0 && e.lastTs <= MAX_UNIX_SECONDS);
  const ids =
    e.requestIds === undefined || (Array.isArray(e.requestIds) && e.requestIds.length < AGENT_LIMITS.requestIdsPerEvent && e.requestIds.every((id) => typeof id === 'string' && REQUEST_ID.test(id)));
  return count && last && ids;
}

/**
 * Stores a batch of WAF events (blocked, challenged, or detected in detect mode) from one agent.
 * Nothing an agent says is taken on trust: an event with a bad address, domain, rule id, fold
 * field or an over-long detail is dropped, and so is one for a domain not assigned to that server.
 *
 * An item stands for `count` occurrences (1 when absent: agents from before folding send one item
 * per request), the first at `ts`, the last at `lastTs`, with the request ids `requestId` and
 * `requestIds`.
 *
 * Folding: an item with the same protocol eventFoldKey as a row of the server (source, reason,
 * rule, domain, method, path, location, blocked) whose first occurrence is within FOLD_WINDOW_MS
 * of the item's `ts` (either side, the nearest row) is not a new row: the row's count goes up by
 * the item's, its last_seen_at becomes the latest time folded in, and it keeps the item's request
 * ids while it has fewer than AGENT_LIMITS.requestIdsPerEvent. Items of the same batch fold too;
 * a row keeps its first occurrence's details. The agent folds the same way before it ships, so
 * repeats it folded go into the row of their first occurrence.
 *
 * The cap: at most AGENT_LIMITS.eventsPerServerPerDay rows per server per UTC day, counted by the
 * time the service received them (an event that claims an earlier time is stored with that time
 * but counts toward today), shared out as the protocol's eventRowFits does: room kept for
 * detections, a share for rate limits and challenges. Folding takes no room. The server's row is
 * locked meanwhile, so concurrent batches (from another process too) cannot both take the last room.
 */
export async function storeEvents(ctx: ServiceContext, accountId: string, serverId: string, events: readonly WafEventItem[], store: AgentChannelStore = agentChannelStore): Promise<StoredEvents> {
  const valid = events.filter(
    (e) =>
      isIP(e.ip) &&
      isHostname(e.domain) &&
      (e.ruleId === null || isUuid(e.ruleId)) &&
      DETAILS.every((f) => detailOk(e, f)) &&
      (e.blocked === undefined || typeof e.blocked === 'boolean') &&
      (e.requestId === undefined || (typeof e.requestId === 'string' && REQUEST_ID.test(e.requestId))) &&
      foldFieldsOk(e),
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
    const taken = await store.eventRowsReceivedSince(tx, serverId, dayStart);

    const items = own.map((e) => received(e, now));
    const times = items.map((t) => t.at);
    const existing = await store.foldableEvents(
      tx,
      serverId,
      own.map((e) => e.ip),
      new Date(Math.min(...times) - FOLD_WINDOW_MS),
      new Date(Math.max(...times) + FOLD_WINDOW_MS),
    );
    /** Rows an item may fold into, by identity: the stored ones and this batch's new ones. */
    type Target = { at: number; row?: Insertable<WafEventsTable>; id?: string; n: number; last: number; ids: string[] };
    const targets = new Map<string, Target[]>();
    const add = (key: string, t: Target) => (targets.get(key) ?? targets.set(key, []).get(key)!).push(t);
    for (const r of existing) {
      const key = eventFoldKey({ ip: r.source_ip, domain: r.domain, reason: r.reason as WafReason, ruleId: r.rule_id, method: r.method, path: r.path, location: r.location, blocked: r.blocked });
      add(key, { at: r.occurred_at.getTime(), id: r.id, n: 0, last: r.occurred_at.getTime(), ids: [] });
    }

    const rows: Insertable<WafEventsTable>[] = [];
    const fresh: Target[] = [];
    for (const item of items) {
      const into = nearest(targets.get(item.key), item.at);
      if (into) {
        into.n += item.count;
        into.last = Math.max(into.last, item.last);
        into.ids.push(...item.ids);
        result.folded += 1;
        continue;
      }
      if (!eventRowFits(item.reason, taken)) {
        result.overCap += 1;
        continue;
      }
      takeEventRow(item.reason, taken);
      const row: Insertable<WafEventsTable> = { ...item.row, account_id: accountId, server_id: serverId, received_at: now };
      rows.push(row);
      const target: Target = { at: item.at, row, n: item.count, last: item.last, ids: [...item.ids] };
      fresh.push(target);
      add(item.key, target);
    }
    for (const x of fresh) {
      x.row!.count = Math.min(x.n, MAX_COUNT);
      x.row!.last_seen_at = x.n > 1 ? new Date(x.last) : null;
    }
    for (const list of targets.values()) for (const x of list) if (x.id !== undefined && x.n > 0) await store.foldEvent(tx, x.id, x.n, new Date(x.last));
    const ids = await store.insertEvents(tx, rows);
    fresh.forEach((x, i) => (x.id = ids[i]));
    await keepRequestIds(tx, store, accountId, [...targets.values()].flat());
    result.stored = rows.length;
    // The live streams load this batch's rows by server and receipt time, once committed.
    if (rows.length > 0) await ctx.live?.(tx, { kind: 'live-events', accountId, serverId, receivedAt: now.toISOString() });
    return result;
  });
}

/** An item as the service keeps it: its times (never past the service's clock), identity and row fields. */
function received(e: WafEventItem, now: Date) {
  const at = Math.min(e.ts * 1000, now.getTime());
  const last = Math.max(at, Math.min((e.lastTs ?? e.ts) * 1000, now.getTime()));
  const domain = e.domain.toLowerCase();
  const row = {
    domain,
    source_ip: e.ip,
    reason: e.reason,
    rule_id: e.ruleId,
    occurred_at: new Date(at),
    method: storable(e.method),
    path: storable(e.path),
    // the first occurrence's: a repeat with another query folds into the row and leaves it as it is
    query: storable(e.query),
    location: storable(e.location),
    matched: storable(e.matched),
    blocked: e.blocked ?? true,
    request_id: e.requestId ?? e.requestIds?.[0] ?? null,
  };
  const key = eventFoldKey({ ip: e.ip, domain, reason: e.reason, ruleId: e.ruleId, method: row.method, path: row.path, location: row.location, blocked: row.blocked });
  const ids = [...(e.requestId !== undefined ? [e.requestId] : []), ...(e.requestIds ?? [])];
  return { at, last, key, reason: e.reason, count: e.count ?? 1, ids, row };
}

/** The target whose first occurrence is nearest `at`, within FOLD_WINDOW_MS. */
function nearest<T extends { at: number }>(list: readonly T[] | undefined, at: number): T | undefined {
  let best: T | undefined;
  for (const x of list ?? []) if (Math.abs(x.at - at) <= FOLD_WINDOW_MS && (!best || Math.abs(x.at - at) < Math.abs(best.at - at))) best = x;
  return best;
}

/** Each row keeps the request ids folded into it until it holds AGENT_LIMITS.requestIdsPerEvent (the first ones). */
async function keepRequestIds(tx: Tx, store: AgentChannelStore, accountId: string, targets: readonly { id?: string | undefined; ids: string[] }[]): Promise<void> {
  const withIds = targets.filter((x) => x.id !== undefined && x.ids.length > 0);
  if (withIds.length === 0) return;
  const have = await store.requestIdCounts(
    tx,
    withIds.map((x) => x.id!),
  );
  const rows = withIds.flatMap((x) =>
    [...new Set(x.ids)].slice(0, Math.max(0, AGENT_LIMITS.requestIdsPerEvent - (have.get(x.id!) ?? 0))).map((request_id) => ({ event_id: x.id!, account_id: accountId, request_id })),
  );
  await store.insertEventRequestIds(tx, rows);
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
  requestId?: string | undefined;
}

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
  if (q.requestId !== undefined) {
    if (!REQUEST_ID.test(q.requestId)) throw invalidField('requestId', 'must be a request id: 1 to 64 of A-Z a-z 0-9 _ -');
    filter.requestId = q.requestId;
  }
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
    ruleName: e.rule_name,
    server_id: e.server_id,
    method: e.method,
    path: e.path,
    query: e.query,
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
