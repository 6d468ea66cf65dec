import type { Insertable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { SessionsTable } from '../db/schema.js';

// The sessions table.

export async function insertSession(db: Database | Tx, row: Insertable<SessionsTable>): Promise<void> {
  await db.insertInto('sessions').values(row).execute();
}

/** What a session cookie (by its SHA-256) authenticates as, unless the session has expired. */
export function findLiveSession(db: Database | Tx, tokenHash: string, now: Date) {
  return db
    .selectFrom('sessions')
    .innerJoin('accounts', 'accounts.id', 'sessions.account_id')
    .select(['sessions.expires_at', 'accounts.email', 'accounts.id as accountId', 'accounts.plan', 'accounts.state'])
    .where('sessions.token_hash', '=', tokenHash)
    .where('sessions.expires_at', '>', now)
    .executeTakeFirst();
}

/** Returns how many rows went (0 or 1). */
export async function deleteSession(db: Database | Tx, tokenHash: string): Promise<number> {
  const res = await db.deleteFrom('sessions').where('token_hash', '=', tokenHash).executeTakeFirst();
  return Number(res.numDeletedRows);
}
