import type { Insertable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { NotificationsTable } from '../db/schema.js';

// The notifications table.

export async function insertNotification(db: Database | Tx, row: Insertable<NotificationsTable>): Promise<void> {
  await db.insertInto('notifications').values(row).execute();
}

/** Identifies the notifications of one server and kind created after `since`. */
export interface ServerNotificationWindow {
  serverId: string;
  kind: string;
  since: Date;
}

/**
 * Folds one more occurrence into the latest notification of the window with this message (its
 * count and updated_at); false when there is none.
 */
export async function foldNotification(db: Database | Tx, w: ServerNotificationWindow, message: string, now: Date): Promise<boolean> {
  const res = await db
    .updateTable('notifications')
    .set((eb) => ({ count: eb('count', '+', 1), updated_at: now }))
    .where('id', '=', (eb) =>
      eb
        .selectFrom('notifications')
        .select('id')
        .where('server_id', '=', w.serverId)
        .where('kind', '=', w.kind)
        .where('message', '=', message)
        .where('created_at', '>', w.since)
        .orderBy('created_at', 'desc')
        .limit(1),
    )
    .executeTakeFirst();
  return Number(res.numUpdatedRows) > 0;
}

/** How many notifications the window holds. */
export async function countNotifications(db: Database | Tx, w: ServerNotificationWindow): Promise<number> {
  const { recent } = await db
    .selectFrom('notifications')
    .select((eb) => eb.fn.countAll<number>().as('recent'))
    .where('server_id', '=', w.serverId)
    .where('kind', '=', w.kind)
    .where('created_at', '>', w.since)
    .executeTakeFirstOrThrow();
  return Number(recent);
}

/** Where a page of notifications continues: after this one, in newest-first order. */
export interface NotificationCursor {
  createdAt: Date;
  id: string;
}

/**
 * The account's notifications, newest first (created_at, then id, both descending), the ones
 * after `before` when given.
 */
export function latestNotifications(db: Database | Tx, accountId: string, limit: number, before?: NotificationCursor) {
  return db
    .selectFrom('notifications')
    .selectAll()
    .where('account_id', '=', accountId)
    .$if(before !== undefined, (q) => q.where((eb) => eb(eb.refTuple('created_at', 'id'), '<', eb.tuple(before!.createdAt, before!.id))))
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(limit)
    .execute();
}

/** The paging position of one of the account's notifications; undefined when it has no such one. */
export async function notificationCursor(db: Database | Tx, accountId: string, id: string): Promise<NotificationCursor | undefined> {
  const row = await db.selectFrom('notifications').select(['id', 'created_at']).where('account_id', '=', accountId).where('id', '=', id).executeTakeFirst();
  return row && { createdAt: new Date(row.created_at), id: row.id };
}

/** Marks those of the ids that are the account's unread notifications read; returns how many. */
export async function markNotificationsRead(db: Database | Tx, accountId: string, ids: readonly string[], now: Date): Promise<number> {
  if (ids.length === 0) return 0;
  const res = await db
    .updateTable('notifications')
    .set({ read_at: now })
    .where('account_id', '=', accountId)
    .where('id', 'in', [...ids])
    .where('read_at', 'is', null)
    .executeTakeFirst();
  return Number(res.numUpdatedRows);
}

/** One of the account's notifications by id, or undefined. */
export function findNotification(db: Database | Tx, accountId: string, id: string) {
  return db.selectFrom('notifications').selectAll().where('account_id', '=', accountId).where('id', '=', id).executeTakeFirst();
}
