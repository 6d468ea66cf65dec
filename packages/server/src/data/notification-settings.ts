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

/** Stores the hash of the account's confirmation token (null: none), until when it works, and when it was sent. */
export async function setEmailToken(db: Database | Tx, accountId: string, t: { hash: string | null; expiresAt: Date | null; sentAt: Date }): Promise<void> {
  await db.updateTable('notification_settings').set({ email_token_hash: t.hash, email_token_expires_at: t.expiresAt, email_token_sent_at: t.sentAt }).where('account_id', '=', accountId).execute();
}

/** Confirms the address whose token has this hash, if it has not expired; the token is used up. Returns the address. */
export async function confirmEmailByToken(db: Database | Tx, tokenHash: string, now: Date): Promise<string | undefined> {
  const row = await db
    .updateTable('notification_settings')
    .set({ email_confirmed_at: now, email_token_hash: null, email_token_expires_at: null })
    .where('email_token_hash', '=', tokenHash)
    .where('email_token_expires_at', '>', now)
    .where('email', 'is not', null)
    .returning('email')
    .executeTakeFirst();
  return row?.email ?? undefined;
}

/** Every stored webhook signing secret (encrypted), locked until the transaction ends (rampart rekey). */
export function lockAllWebhookSecrets(db: Tx) {
  return db.selectFrom('notification_settings').select(['account_id', 'webhook_secret_enc']).where('webhook_secret_enc', 'is not', null).forUpdate().execute();
}

/** Replaces an account's encrypted webhook secret with the same secret encrypted under another key. */
export function setWebhookSecretEnc(db: Tx, accountId: string, webhookSecretEnc: string) {
  return db.updateTable('notification_settings').set({ webhook_secret_enc: webhookSecretEnc }).where('account_id', '=', accountId).execute();
}
