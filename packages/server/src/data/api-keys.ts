import type { Insertable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { ApiKeysTable } from '../db/schema.js';

// The api_keys table.

export function insertApiKey(db: Database | Tx, row: Insertable<ApiKeysTable>) {
  return db.insertInto('api_keys').values(row).returningAll().executeTakeFirstOrThrow();
}

/** The account's keys, oldest first, without their hashes. */
export function listApiKeys(db: Database | Tx, accountId: string) {
  return db.selectFrom('api_keys').select(['id', 'name', 'key_prefix', 'last_used_at', 'created_at']).where('account_id', '=', accountId).orderBy('created_at').orderBy('id').execute();
}

/** The key that went (its name and prefix), or undefined when the account has no such key. */
export function deleteApiKey(db: Database | Tx, accountId: string, id: string) {
  return db.deleteFrom('api_keys').where('id', '=', id).where('account_id', '=', accountId).returning(['name', 'key_prefix']).executeTakeFirst();
}

/** What a presented key (by its SHA-256, through the unique index) authenticates as. */
export function findKeyCredential(db: Database | Tx, keyHash: string) {
  return db
    .selectFrom('api_keys')
    .innerJoin('accounts', 'accounts.id', 'api_keys.account_id')
    .select(['api_keys.id as keyId', 'api_keys.name as keyName', 'api_keys.key_prefix as keyPrefix', 'api_keys.last_used_at', 'accounts.id as accountId', 'accounts.plan', 'accounts.state'])
    .where('api_keys.key_hash', '=', keyHash)
    .executeTakeFirst();
}

export async function touchApiKey(db: Database | Tx, keyId: string, now: Date): Promise<void> {
  await db.updateTable('api_keys').set({ last_used_at: now }).where('id', '=', keyId).execute();
}
