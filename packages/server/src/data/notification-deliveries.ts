import type { Insertable, Updateable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { NotificationDeliveriesTable } from '../db/schema.js';

// The notification_deliveries table: one row per notification and channel, with its attempts.

export async function insertDeliveries(db: Database | Tx, rows: Insertable<NotificationDeliveriesTable>[]): Promise<void> {
  if (rows.length === 0) return;
  await db.insertInto('notification_deliveries').values(rows).execute();
}

/**
 * Claims up to `limit` pending deliveries due at `now`, oldest due first: their next attempt
 * moves to `leaseUntil`, so no other run takes them meanwhile, and a run that dies holding them
 * lets them go again then. Rows another run is claiming are skipped, not waited for (one
 * statement, FOR UPDATE SKIP LOCKED). Returns the claimed ids.
 */
export async function claimDueDeliveries(db: Database | Tx, now: Date, leaseUntil: Date, limit: number): Promise<string[]> {
  const rows = await db
    .updateTable('notification_deliveries')
    .set({ next_attempt_at: leaseUntil })
    .where('id', 'in', (eb) =>
      eb
        .selectFrom('notification_deliveries')
        .select('id')
        .where('status', '=', 'pending')
        .where('next_attempt_at', '<=', now)
        .orderBy('next_attempt_at')
        .limit(limit)
        .forUpdate()
        .skipLocked(),
    )
    .returning('id')
    .execute();
  return rows.map((r) => r.id);
}

/**
 * What an attempt needs for each of these deliveries: the delivery, its notification, and the
 * account's channels as they are now (absent when the account has no settings row).
 */
export function deliveryWork(db: Database | Tx, ids: readonly string[]) {
  if (ids.length === 0) return Promise.resolve([]);
  return db
    .selectFrom('notification_deliveries as d')
    .innerJoin('notifications as n', (j) => j.onRef('n.id', '=', 'd.notification_id').onRef('n.account_id', '=', 'd.account_id'))
    .leftJoin('notification_settings as s', 's.account_id', 'd.account_id')
    .select([
      'd.id',
      'd.account_id',
      'd.channel',
      'd.target',
      'd.attempts',
      'd.created_at',
      'n.id as notification_id',
      'n.kind',
      'n.message',
      'n.server_id',
      'n.domain_id',
      'n.created_at as notification_created_at',
      's.webhook_url',
      's.webhook_secret_enc',
      's.email',
    ])
    .where('d.id', 'in', [...ids])
    .execute();
}

/** Records the outcome of an attempt on one of the account's deliveries. */
export async function updateDelivery(db: Database | Tx, accountId: string, id: string, set: Updateable<NotificationDeliveriesTable>): Promise<void> {
  await db.updateTable('notification_deliveries').set(set).where('id', '=', id).where('account_id', '=', accountId).execute();
}

/** Where a page of the delivery log continues: after this entry, newest first. */
export interface DeliveryCursor {
  createdAt: Date;
  id: string;
}

/** The account's deliveries with their notification's kind, newest first, those after `before` when given. */
export function latestDeliveries(db: Database | Tx, accountId: string, limit: number, before?: DeliveryCursor) {
  return db
    .selectFrom('notification_deliveries as d')
    .innerJoin('notifications as n', (j) => j.onRef('n.id', '=', 'd.notification_id').onRef('n.account_id', '=', 'd.account_id'))
    .selectAll('d')
    .select('n.kind')
    .where('d.account_id', '=', accountId)
    .$if(before !== undefined, (q) => q.where((eb) => eb(eb.refTuple('d.created_at', 'd.id'), '<', eb.tuple(before!.createdAt, before!.id))))
    .orderBy('d.created_at', 'desc')
    .orderBy('d.id', 'desc')
    .limit(limit)
    .execute();
}

/** The paging position of one of the account's deliveries; undefined when it has no such one. */
export async function deliveryCursor(db: Database | Tx, accountId: string, id: string): Promise<DeliveryCursor | undefined> {
  const row = await db.selectFrom('notification_deliveries').select(['id', 'created_at']).where('account_id', '=', accountId).where('id', '=', id).executeTakeFirst();
  return row && { createdAt: new Date(row.created_at), id: row.id };
}
