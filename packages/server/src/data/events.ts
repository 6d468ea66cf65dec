import { sql, type Insertable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { WafEventsTable } from '../db/schema.js';

// The waf_events table.

/**
 * How many event rows of the server the service received since then (what the daily cap
 * counts); with `reasons`, only the rows of those reasons.
 */
export async function countEventsReceivedSince(db: Database | Tx, serverId: string, since: Date, reasons?: readonly string[]): Promise<number> {
  let q = db
    .selectFrom('waf_events')
    .select((eb) => eb.fn.countAll<number>().as('count'))
    .where('server_id', '=', serverId)
    .where('received_at', '>=', since);
  if (reasons) q = q.where('reason', 'in', [...reasons]);
  const { count } = await q.executeTakeFirstOrThrow();
  return Number(count);
}

/** What an event folds into: a row's identity and time. */
export interface FoldableEvent {
  id: string;
  source_ip: string;
  domain: string;
  reason: string;
  rule_id: string | null;
  occurred_at: Date;
}

/** The server's rows from these source addresses that occurred within [from, to]: what a batch may fold into. */
export async function foldableEvents(db: Database | Tx, serverId: string, ips: readonly string[], from: Date, to: Date): Promise<FoldableEvent[]> {
  if (ips.length === 0) return [];
  const rows = await db
    .selectFrom('waf_events')
    .select(['id', 'source_ip', 'domain', 'reason', 'rule_id', 'occurred_at'])
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
      count: eb('count', '+', n),
      last_seen_at: sql<Date>`greatest(coalesce(${eb.ref('last_seen_at')}, ${eb.ref('occurred_at')}), ${lastSeen})`,
    }))
    .where('id', '=', Number(id))
    .execute();
}

export async function insertEvents(db: Database | Tx, rows: readonly Insertable<WafEventsTable>[]): Promise<void> {
  if (rows.length) await db.insertInto('waf_events').values([...rows]).execute();
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
}

/** Where a page continues: the last row of the previous page. */
export interface EventCursor {
  id: string;
  occurred_at: Date;
}

/** The account's event with this id, as a cursor; undefined when not the account's. */
export async function eventCursor(db: Database | Tx, accountId: string, id: string): Promise<EventCursor | undefined> {
  const row = await db.selectFrom('waf_events').select(['id', 'occurred_at']).where('account_id', '=', accountId).where('id', '=', Number(id)).executeTakeFirst();
  return row && { id: String(row.id), occurred_at: new Date(row.occurred_at) };
}

/** The account's events matching the filter, newest first (by first occurrence), after the cursor. */
export async function listEventRows(db: Database | Tx, accountId: string, filter: EventFilter, limit: number, before?: EventCursor) {
  let q = db
    .selectFrom('waf_events')
    .select(['id', 'occurred_at', 'source_ip', 'domain', 'reason', 'rule_id', 'server_id', 'method', 'path', 'location', 'matched', 'blocked', 'count', 'last_seen_at', 'request_id'])
    .where('account_id', '=', accountId);
  if (filter.domain !== undefined) q = q.where('domain', '=', filter.domain);
  if (filter.reason !== undefined) q = q.where('reason', '=', filter.reason);
  if (filter.ip !== undefined) q = q.where('source_ip', '=', filter.ip);
  if (filter.since !== undefined) q = q.where('occurred_at', '>=', filter.since);
  if (filter.until !== undefined) q = q.where('occurred_at', '<=', filter.until);
  if (before) q = q.where((eb) => eb.or([eb('occurred_at', '<', before.occurred_at), eb.and([eb('occurred_at', '=', before.occurred_at), eb('id', '<', Number(before.id))])]));
  const rows = await q.orderBy('occurred_at', 'desc').orderBy('id', 'desc').limit(limit).execute();
  return rows.map((r) => ({ ...r, id: String(r.id) }));
}

/** The account's events one batch of a server stored (same receipt time), oldest first. */
export function batchEventRows(db: Database | Tx, accountId: string, serverId: string, receivedAt: Date, limit: number) {
  return db
    .selectFrom('waf_events')
    .select(['id', 'occurred_at', 'source_ip', 'domain', 'reason', 'rule_id', 'server_id', 'method', 'path', 'location', 'matched', 'blocked', 'count', 'last_seen_at', 'request_id'])
    .where('account_id', '=', accountId)
    .where('server_id', '=', serverId)
    .where('received_at', '=', receivedAt)
    .orderBy('id', 'asc')
    .limit(limit)
    .execute();
}
