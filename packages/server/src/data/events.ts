import { DETECTION_REASONS, FLOOD_REASONS, type EventRowsTaken } from '@rampart/protocol';
import { sql, type Insertable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { WafEventsTable } from '../db/schema.js';

// The waf_events table.

/**
 * The server's event rows the service received since then (what the daily cap counts): all of
 * them, and those of detections and of floods (protocol event-log.ts).
 */
export async function eventRowsReceivedSince(db: Database | Tx, serverId: string, since: Date): Promise<EventRowsTaken> {
  const row = await db
    .selectFrom('waf_events')
    .select((eb) => [
      eb.fn.countAll<number>().as('all'),
      eb.fn
        .countAll<number>()
        .filterWhere('reason', 'in', [...DETECTION_REASONS])
        .as('detections'),
      eb.fn
        .countAll<number>()
        .filterWhere('reason', 'in', [...FLOOD_REASONS])
        .as('flood'),
    ])
    .where('server_id', '=', serverId)
    .where('received_at', '>=', since)
    .executeTakeFirstOrThrow();
  return { all: Number(row.all), detections: Number(row.detections), flood: Number(row.flood) };
}

/** What an event folds into: a row's identity (protocol eventFoldKey) and time. */
export interface FoldableEvent {
  id: string;
  source_ip: string;
  domain: string;
  reason: string;
  rule_id: string | null;
  method: string | null;
  path: string | null;
  location: string | null;
  blocked: boolean;
  occurred_at: Date;
}

/** The server's rows from these source addresses that occurred within [from, to]: what a batch may fold into. */
export async function foldableEvents(db: Database | Tx, serverId: string, ips: readonly string[], from: Date, to: Date): Promise<FoldableEvent[]> {
  if (ips.length === 0) return [];
  const rows = await db
    .selectFrom('waf_events')
    .select(['id', 'source_ip', 'domain', 'reason', 'rule_id', 'method', 'path', 'location', 'blocked', 'occurred_at'])
    .where('server_id', '=', serverId)
    .where('source_ip', 'in', [...new Set(ips)])
    .where('occurred_at', '>=', from)
    .where('occurred_at', '<=', to)
    .orderBy('occurred_at', 'desc')
    .orderBy('id', 'desc')
    .execute();
  return rows.map((r) => ({ ...r, id: String(r.id), occurred_at: new Date(r.occurred_at) }));
}

/** Folds `n` more occurrences into the row, the last at `lastSeen` (kept if later already). */
export async function foldEvent(db: Database | Tx, id: string, n: number, lastSeen: Date): Promise<void> {
  await db
    .updateTable('waf_events')
    .set((eb) => ({
      // a count that would pass int32 stays at its largest value
      count: sql<number>`least(${eb.ref('count')}::bigint + ${n}, 2147483647)`,
      last_seen_at: sql<Date>`greatest(coalesce(${eb.ref('last_seen_at')}, ${eb.ref('occurred_at')}), ${lastSeen})`,
    }))
    .where('id', '=', Number(id))
    .execute();
}

/** Inserts the rows; returns their ids, in the rows' order. */
export async function insertEvents(db: Database | Tx, rows: readonly Insertable<WafEventsTable>[]): Promise<string[]> {
  if (rows.length === 0) return [];
  const ids = await db
    .insertInto('waf_events')
    .values([...rows])
    .returning('id')
    .execute();
  return ids.map((r) => String(r.id));
}

/** How many request ids each of these events keeps (events with none are left out). */
export async function requestIdCounts(db: Database | Tx, eventIds: readonly string[]): Promise<Map<string, number>> {
  if (eventIds.length === 0) return new Map();
  const rows = await db
    .selectFrom('waf_event_requests')
    .select((eb) => ['event_id', eb.fn.countAll<number>().as('n')])
    .where('event_id', 'in', eventIds.map(Number))
    .groupBy('event_id')
    .execute();
  return new Map(rows.map((r) => [String(r.event_id), Number(r.n)]));
}

/** Keeps request ids of events (one the event has already is skipped). */
export async function insertEventRequestIds(db: Database | Tx, rows: readonly { event_id: string; account_id: string; request_id: string }[]): Promise<void> {
  if (rows.length === 0) return;
  await db
    .insertInto('waf_event_requests')
    .values(rows.map((r) => ({ ...r, event_id: Number(r.event_id) })))
    .onConflict((oc) => oc.columns(['event_id', 'request_id']).doNothing())
    .execute();
}

/** Events that occurred before `cutoff` go; returns how many. */
export async function deleteEventsBefore(db: Database | Tx, cutoff: Date): Promise<number> {
  const res = await db.deleteFrom('waf_events').where('occurred_at', '<', cutoff).executeTakeFirst();
  return Number(res.numDeletedRows);
}

/** What GET /api/waf/events filters by; every one optional. */
export interface EventFilter {
  domain?: string | undefined;
  reason?: string | undefined;
  ip?: string | undefined;
  since?: Date | undefined;
  until?: Date | undefined;
  /** The event holding this request id (folded in or its first). */
  requestId?: string | undefined;
}

/** Where a page continues: the last row of the previous page. */
export interface EventCursor {
  id: string;
  occurred_at: Date;
}

/**
 * The account's events with the columns the API shows, and the name of the account's custom rule
 * each names (null for another kind of rule, or a rule since deleted).
 */
function accountEvents(db: Database | Tx, accountId: string) {
  return db
    .selectFrom('waf_events')
    .leftJoin('custom_rules', (j) => j.onRef('custom_rules.id', '=', 'waf_events.rule_id').on('custom_rules.account_id', '=', accountId))
    .select([
      'waf_events.id',
      'occurred_at',
      'source_ip',
      'domain',
      'reason',
      'rule_id',
      'server_id',
      'method',
      'path',
      'query',
      'location',
      'matched',
      'blocked',
      'count',
      'last_seen_at',
      'request_id',
      'custom_rules.name as rule_name',
    ])
    .where('waf_events.account_id', '=', accountId);
}

/** The account's event with this id, as a cursor; undefined when not the account's. */
export async function eventCursor(db: Database | Tx, accountId: string, id: string): Promise<EventCursor | undefined> {
  const row = await db.selectFrom('waf_events').select(['id', 'occurred_at']).where('account_id', '=', accountId).where('id', '=', Number(id)).executeTakeFirst();
  return row && { id: String(row.id), occurred_at: new Date(row.occurred_at) };
}

/** The account's events matching the filter, newest first (by first occurrence), after the cursor. */
export async function listEventRows(db: Database | Tx, accountId: string, filter: EventFilter, limit: number, before?: EventCursor) {
  let q = accountEvents(db, accountId);
  if (filter.domain !== undefined) q = q.where('domain', '=', filter.domain);
  if (filter.reason !== undefined) q = q.where('reason', '=', filter.reason);
  if (filter.ip !== undefined) q = q.where('source_ip', '=', filter.ip);
  if (filter.since !== undefined) q = q.where('occurred_at', '>=', filter.since);
  if (filter.until !== undefined) q = q.where('occurred_at', '<=', filter.until);
  const requestId = filter.requestId;
  if (requestId !== undefined) {
    q = q.where('waf_events.id', 'in', (eb) => eb.selectFrom('waf_event_requests').select('event_id').where('account_id', '=', accountId).where('request_id', '=', requestId));
  }
  if (before) q = q.where((eb) => eb.or([eb('occurred_at', '<', before.occurred_at), eb.and([eb('occurred_at', '=', before.occurred_at), eb('waf_events.id', '<', Number(before.id))])]));
  const rows = await q.orderBy('occurred_at', 'desc').orderBy('waf_events.id', 'desc').limit(limit).execute();
  return rows.map((r) => ({ ...r, id: String(r.id) }));
}

/** The account's events one batch of a server stored (same receipt time), oldest first. */
export function batchEventRows(db: Database | Tx, accountId: string, serverId: string, receivedAt: Date, limit: number) {
  return accountEvents(db, accountId).where('server_id', '=', serverId).where('received_at', '=', receivedAt).orderBy('waf_events.id', 'asc').limit(limit).execute();
}
