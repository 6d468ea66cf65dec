import type { Insertable, SelectQueryBuilder, Updateable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { CustomRulesTable, DB } from '../db/schema.js';

// The custom_rules table.

/** Rules in the order agents apply them: priority, then age (id breaks ties). */
export function inRuleOrder<O>(q: SelectQueryBuilder<DB, 'custom_rules', O>): SelectQueryBuilder<DB, 'custom_rules', O> {
  return q.orderBy('priority').orderBy('created_at').orderBy('id');
}

export function listCustomRules(db: Database | Tx, accountId: string) {
  return db.selectFrom('custom_rules').selectAll().where('account_id', '=', accountId).$call(inRuleOrder).execute();
}

export function findCustomRule(db: Database | Tx, accountId: string, id: string) {
  return db.selectFrom('custom_rules').selectAll().where('id', '=', id).where('account_id', '=', accountId).executeTakeFirst();
}

/** One rule of the account, locked for the rest of the transaction. */
export function lockCustomRule(db: Database | Tx, accountId: string, id: string) {
  return db.selectFrom('custom_rules').selectAll().where('id', '=', id).where('account_id', '=', accountId).forUpdate().executeTakeFirst();
}

export function insertCustomRule(db: Database | Tx, row: Insertable<CustomRulesTable>) {
  return db.insertInto('custom_rules').values(row).returningAll().executeTakeFirstOrThrow();
}

/** The caller has found and locked the rule in its account. */
export function updateCustomRuleFields(db: Database | Tx, id: string, set: Updateable<CustomRulesTable>) {
  return db.updateTable('custom_rules').set(set).where('id', '=', id).returningAll().executeTakeFirstOrThrow();
}

/** The caller has found and locked the rule in its account. */
export async function deleteCustomRule(db: Database | Tx, id: string): Promise<void> {
  await db.deleteFrom('custom_rules').where('id', '=', id).execute();
}

/** The enabled rules of these accounts, in the order agents apply them (for snapshots). */
export function enabledCustomRules(db: Database | Tx, accountIds: readonly string[]) {
  return db
    .selectFrom('custom_rules')
    .select(['id', 'account_id', 'domain_id', 'expression', 'action', 'rate_limit', 'priority'])
    .where('account_id', 'in', [...accountIds])
    .where('enabled', '=', true)
    .$call(inRuleOrder)
    .execute();
}
