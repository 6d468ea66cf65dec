import type { Insertable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { NotificationSettingsTable } from '../db/schema.js';

// The notification_settings table: one row per account, its delivery channels.

/** The account's settings, if it has any; `lock` holds the row until the transaction ends. */
export function notificationSettings(db: Database | Tx, accountId: string, lock = false) {
  return db
    .selectFrom('notification_settings')
    .selectAll()
    .where('account_id', '=', accountId)
    .$if(lock, (q) => q.forUpdate())
    .executeTakeFirst();
}

/** Writes the account's row (a new one, or over the one there). */
export async function saveNotificationSettings(db: Database | Tx, row: Insertable<NotificationSettingsTable>): Promise<void> {
  const { account_id: _accountId, ...fields } = row;
  await db
    .insertInto('notification_settings')
    .values(row)
    .onConflict((oc) => oc.column('account_id').doUpdateSet(fields))
    .execute();
}
