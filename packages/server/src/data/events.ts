import type { Insertable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { WafEventsTable } from '../db/schema.js';

// The waf_events table.

/** How many events of the server the service received since then (what the daily cap counts). */
export async function countEventsReceivedSince(db: Database | Tx, serverId: string, since: Date): Promise<number> {
  const { count } = await db
    .selectFrom('waf_events')
    .select((eb) => eb.fn.countAll<number>().as('count'))
    .where('server_id', '=', serverId)
    .where('received_at', '>=', since)
    .executeTakeFirstOrThrow();
  return Number(count);
}

export async function insertEvents(db: Database | Tx, rows: readonly Insertable<WafEventsTable>[]): Promise<void> {
  if (rows.length) await db.insertInto('waf_events').values([...rows]).execute();
}

/** Events that occurred before `cutoff` go; returns how many. */
export async function deleteEventsBefore(db: Database | Tx, cutoff: Date): Promise<number> {
  const res = await db.deleteFrom('waf_events').where('occurred_at', '<', cutoff).executeTakeFirst();
  return Number(res.numDeletedRows);
}

/** The account's most recent events, newest first. */
export function latestEvents(db: Database | Tx, accountId: string, limit: number) {
  return db
    .selectFrom('waf_events')
    .select(['occurred_at', 'source_ip', 'domain', 'reason', 'rule_id', 'server_id', 'method', 'path', 'location', 'matched', 'blocked'])
    .where('account_id', '=', accountId)
    .orderBy('occurred_at', 'desc')
    .orderBy('id', 'desc')
    .limit(limit)
    .execute();
}
