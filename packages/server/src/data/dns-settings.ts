import type { Insertable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { DnsSettingsTable } from '../db/schema.js';

// The dns_settings table: each account's DNS provider for DNS failover, its credentials encrypted.

export function findDnsSettings(db: Database | Tx, accountId: string, lock = false) {
  return db
    .selectFrom('dns_settings')
    .select(['provider', 'credentials_enc', 'updated_at'])
    .where('account_id', '=', accountId)
    .$if(lock, (q) => q.forUpdate())
    .executeTakeFirst();
}

export async function upsertDnsSettings(db: Database | Tx, row: Insertable<DnsSettingsTable>): Promise<void> {
  await db
    .insertInto('dns_settings')
    .values(row)
    .onConflict((oc) => oc.column('account_id').doUpdateSet({ provider: row.provider, credentials_enc: row.credentials_enc, updated_at: row.updated_at }))
    .execute();
}

/** Whether the account had settings. */
export async function deleteDnsSettings(db: Database | Tx, accountId: string): Promise<boolean> {
  const rows = await db.deleteFrom('dns_settings').where('account_id', '=', accountId).returning('account_id').execute();
  return rows.length > 0;
}

/** The settings of these accounts (the health cycle's DNS step). */
export function dnsSettingsOfAccounts(db: Database | Tx, accountIds: readonly string[]) {
  if (accountIds.length === 0) return Promise.resolve([]);
  return db
    .selectFrom('dns_settings')
    .select(['account_id', 'provider', 'credentials_enc'])
    .where('account_id', 'in', [...accountIds])
    .execute();
}

/** Every account's encrypted DNS provider credentials, locked until the transaction ends (rampart rekey). */
export function lockAllDnsCredentials(db: Tx) {
  return db.selectFrom('dns_settings').select(['account_id', 'credentials_enc']).forUpdate().execute();
}

/** Replaces an account's encrypted credentials with the same credentials encrypted under another key. */
export function setDnsCredentialsEnc(db: Tx, accountId: string, credentialsEnc: string) {
  return db.updateTable('dns_settings').set({ credentials_enc: credentialsEnc }).where('account_id', '=', accountId).execute();
}
