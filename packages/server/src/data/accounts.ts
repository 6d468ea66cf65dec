import { sql, type Insertable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { AccountsTable } from '../db/schema.js';

// The accounts table, and what an account owns counted against its plan's limits.

export async function insertAccount(db: Database | Tx, row: Insertable<AccountsTable>): Promise<void> {
  await db.insertInto('accounts').values(row).execute();
}

export function findAccount(db: Database | Tx, accountId: string) {
  return db.selectFrom('accounts').selectAll().where('id', '=', accountId).executeTakeFirst();
}

/** By email, as stored (lower case): what a sign-in checks. */
export function findAccountByEmail(db: Database | Tx, email: string) {
  return db.selectFrom('accounts').select(['id', 'email', 'plan', 'password_hash']).where('email', '=', email).executeTakeFirst();
}

/**
 * The account row, locked for the rest of the transaction: creations counted against a limit,
 * and charges, of one account are serialized by it.
 */
export function lockAccount(db: Database | Tx, accountId: string) {
  return db.selectFrom('accounts').selectAll().where('id', '=', accountId).forUpdate().executeTakeFirst();
}

/** Active accounts whose monthly charge is due. */
export function accountsDueForCharge(db: Database | Tx, now: Date) {
  return db.selectFrom('accounts').select('id').where('state', '=', 'active').where('next_charge_at', '<=', now).execute();
}

export async function freezeAccount(db: Database | Tx, accountId: string): Promise<void> {
  await db.updateTable('accounts').set({ state: 'frozen' }).where('id', '=', accountId).execute();
}

/** A charge went through: the new balance, the account active, the next charge due then. */
export async function recordCharge(db: Database | Tx, accountId: string, balanceCents: number, nextChargeAt: Date): Promise<void> {
  await db.updateTable('accounts').set({ state: 'active', balance_cents: balanceCents, next_charge_at: nextChargeAt }).where('id', '=', accountId).execute();
}

export async function setBalance(db: Database | Tx, accountId: string, balanceCents: number): Promise<void> {
  await db.updateTable('accounts').set({ balance_cents: balanceCents }).where('id', '=', accountId).execute();
}

/** The version of the account's rule set, read fresh by GET /api/waf (see the rule-list cache in routes/waf.ts). */
export async function wafVersion(db: Database | Tx, accountId: string): Promise<number> {
  const { waf_version } = await db.selectFrom('accounts').select('waf_version').where('id', '=', accountId).executeTakeFirstOrThrow();
  return waf_version;
}

/** Marks the account's rule set as changed. */
export async function bumpWafVersion(db: Database | Tx, accountId: string): Promise<void> {
  await db.updateTable('accounts').set({ waf_version: sql<number>`waf_version + 1` }).where('id', '=', accountId).execute();
}

export type Counted = 'api_keys' | 'servers' | 'domains' | 'waf_rules';

/** How many rows of a table the account owns; decommissioned servers do not count. */
export async function countOwned(db: Database | Tx, table: Counted, accountId: string): Promise<number> {
  const { count } = await db
    .selectFrom(table)
    .select((eb) => eb.fn.countAll<number>().as('count'))
    .where('account_id', '=', accountId)
    .$if(table === 'servers', (q) => q.where(sql.ref('status'), '<>', 'decommissioned'))
    .executeTakeFirstOrThrow();
  return Number(count);
}
