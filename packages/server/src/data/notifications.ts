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

/** The account's most recent notifications, newest first. */
export function latestNotifications(db: Database | Tx, accountId: string, limit: number) {
  return db.selectFrom('notifications').selectAll().where('account_id', '=', accountId).orderBy('created_at', 'desc').orderBy('id').limit(limit).execute();
}
