import { sql } from 'kysely';
import type { Database } from '../db/database.js';

// What the change bus (src/bus.ts) asks of the database through the pool; its listening
// connection (LISTEN) is its own, in src/bus.ts.

/** Publishes one payload on a NOTIFY channel. */
export async function pgNotify(db: Database, channel: string, payload: string): Promise<void> {
  await sql`select pg_notify(${channel}, ${payload})`.execute(db);
}

/**
 * How many connections of this application name are listening on the channel: the bus's
 * listening connections, one per process, found by the LISTEN statement they ran last.
 */
export async function countListeners(db: Database, applicationName: string, channel: string): Promise<number | undefined> {
  const r = await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity
    where datname = current_database() and application_name = ${applicationName} and query = ${`LISTEN "${channel}"`}`.execute(db);
  return r.rows[0]?.n;
}
