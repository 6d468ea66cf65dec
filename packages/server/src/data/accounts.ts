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

/**
 * The account's billing state after a charge or a failed one: active or frozen, and when the next
 * charge falls due. The balance is not written here: it moves only with a ledger row
 * (data/transactions.ts, postEntry).
 */
export async function setBillingState(db: Database | Tx, accountId: string, state: 'active' | 'frozen', nextChargeAt?: Date): Promise<void> {
  await db
    .updateTable('accounts')
    .set({ state, ...(nextChargeAt ? { next_charge_at: nextChargeAt } : {}) })
    .where('id', '=', accountId)
    .execute();
}

export async function setPlan(db: Database | Tx, accountId: string, plan: string): Promise<void> {
  await db.updateTable('accounts').set({ plan }).where('id', '=', accountId).execute();
}

/** What a plan change checks against the new plan: the account's API keys, its domains with DNS failover on, its live shield servers and its custom rules. */
export async function planUsage(db: Database | Tx, accountId: string): Promise<{ apiKeys: number; dnsFailoverDomains: number; servers: number; customRules: number }> {
  const failover = await db
    .selectFrom('domains')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('account_id', '=', accountId)
    .where('dns_failover', '=', true)
    .executeTakeFirstOrThrow();
  return {
    apiKeys: await countOwned(db, 'api_keys', accountId),
    dnsFailoverDomains: Number(failover.n),
    servers: await countOwned(db, 'servers', accountId),
    customRules: await countOwned(db, 'custom_rules', accountId),
  };
}

/** The version of the account's rule set, read fresh by GET /api/waf (see the rule-list cache in routes/waf.ts). */
export async function wafVersion(db: Database | Tx, accountId: string): Promise<number> {
  const { waf_version } = await db.selectFrom('accounts').select('waf_version').where('id', '=', accountId).executeTakeFirstOrThrow();
  return waf_version;
}

/** Marks the account's rule set as changed. */
export async function bumpWafVersion(db: Database | Tx, accountId: string): Promise<void> {
  await db
    .updateTable('accounts')
    .set({ waf_version: sql<number>`waf_version + 1` })
    .where('id', '=', accountId)
    .execute();
}

export type Counted = 'api_keys' | 'servers' | 'domains' | 'waf_rules' | 'custom_rules';

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

/**
 * Rotates the account's bot protection key: the current key becomes the previous one (accepted
 * until `previousUntil`), the new one signs from now on.
 */
export async function rotateBotKey(tx: Tx, accountId: string, key: { id: string; secret: string }, now: Date, previousUntil: Date) {
  return tx
    .updateTable('accounts')
    .set((eb) => ({
      bot_prev_key_id: eb.ref('bot_key_id'),
      bot_prev_secret: eb.ref('bot_secret'),
      bot_prev_until: previousUntil,
      bot_key_id: key.id,
      bot_secret: key.secret,
      bot_key_created_at: now,
    }))
    .where('id', '=', accountId)
    .returning(['bot_key_id', 'bot_key_created_at', 'bot_prev_key_id', 'bot_prev_until'])
    .executeTakeFirstOrThrow();
}

/** Accounts whose current bot key began signing before `before`, oldest first (at most `limit`). */
export async function accountsWithOldBotKeys(db: Database | Tx, before: Date, limit: number): Promise<string[]> {
  const rows = await db.selectFrom('accounts').select('id').where('bot_key_created_at', '<', before).orderBy('bot_key_created_at').limit(limit).execute();
  return rows.map((r) => r.id);
}

/** Forgets previous bot keys whose cookies have all expired by `now`; returns their accounts. */
export async function retireBotKeys(db: Database | Tx, now: Date): Promise<string[]> {
  const rows = await db.updateTable('accounts').set({ bot_prev_key_id: null, bot_prev_secret: null, bot_prev_until: null }).where('bot_prev_until', '<=', now).returning('id').execute();
  return rows.map((r) => r.id);
}
