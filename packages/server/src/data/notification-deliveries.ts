import type { Insertable, Updateable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { NotificationDeliveriesTable } from '../db/schema.js';

// The notification_deliveries table: one row per notification and channel, with its attempts.

export async function insertDeliveries(db: Database | Tx, rows: Insertable<NotificationDeliveriesTable>[]): Promise<void> {
  if (rows.length === 0) return;
  await db.insertInto('notification_deliveries').values(rows).execute();
}

/**
 * What an attempt needs for this delivery: the delivery, its notification, the account's channels
 * as they are now (absent when the account has no settings row) and its endpoint's circuit.
 */
export function deliveryWork(db: Database | Tx, id: string) {
  return db
    .selectFrom('notification_deliveries as d')
    .innerJoin('notifications as n', (j) => j.onRef('n.id', '=', 'd.notification_id').onRef('n.account_id', '=', 'd.account_id'))
    .leftJoin('notification_settings as s', 's.account_id', 'd.account_id')
    .leftJoin('notification_endpoints as e', (j) => j.onRef('e.account_id', '=', 'd.account_id').onRef('e.channel', '=', 'd.channel'))
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
      's.email_confirmed_at',
      'e.consecutive_failures',
      'e.failing_since',
      'e.paused_until',
      'e.disabled_at',
      'e.last_error as endpoint_error',
    ])
    .where('d.id', '=', id)
    .executeTakeFirst();
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
