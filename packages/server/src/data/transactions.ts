import type { Insertable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { TransactionsTable } from '../db/schema.js';

// The transactions table: charges and deposits.

export function insertTransaction(db: Database | Tx, row: Insertable<TransactionsTable>) {
  return db.insertInto('transactions').values(row).returningAll().executeTakeFirstOrThrow();
}

/** A deposit, locked for the rest of the transaction (confirming it twice must not credit twice). */
export function lockDeposit(db: Database | Tx, depositId: string) {
  return db.selectFrom('transactions').selectAll().where('id', '=', depositId).where('kind', '=', 'deposit').forUpdate().executeTakeFirst();
}

export function confirmTransaction(db: Database | Tx, id: string, now: Date, txHash: string | null) {
  return db
    .updateTable('transactions')
    .set({ status: 'confirmed', confirmed_at: now, tx_hash: txHash })
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** The account's most recent transactions, newest first. */
export function latestTransactions(db: Database | Tx, accountId: string, limit: number) {
  return db.selectFrom('transactions').selectAll().where('account_id', '=', accountId).orderBy('created_at', 'desc').orderBy('id').limit(limit).execute();
}
