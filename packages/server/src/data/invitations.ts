import type { Insertable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { InvitationsTable } from '../db/schema.js';

// The invitations table (RAMPART_SIGNUP=invite).

export async function insertInvitation(db: Database | Tx, row: Insertable<InvitationsTable>): Promise<void> {
  await db.insertInto('invitations').values(row).execute();
}

/** The invitation with this token hash, if it is unused and not expired. */
export function findUsableInvitation(db: Database | Tx, tokenHash: string, now: Date) {
  return db.selectFrom('invitations').select(['id', 'email']).where('token_hash', '=', tokenHash).where('used_at', 'is', null).where('expires_at', '>', now).executeTakeFirst();
}

/**
 * Marks the invitation used by this account, if it still is unused and not expired; returns
 * whether it did. One statement, so two registrations with one invitation cannot both succeed.
 */
export async function useInvitation(tx: Tx, id: string, accountId: string, now: Date): Promise<boolean> {
  const res = await tx.updateTable('invitations').set({ used_at: now, account_id: accountId }).where('id', '=', id).where('used_at', 'is', null).where('expires_at', '>', now).executeTakeFirst();
  return Number(res.numUpdatedRows) === 1;
}
