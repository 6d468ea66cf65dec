import type { Insertable, SelectQueryBuilder, Updateable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { DB, WafRulesTable } from '../db/schema.js';

// The waf_rules table.

/** Rules in the order agents apply them: priority, then age (id breaks ties). */
export function inApplyOrder<O>(q: SelectQueryBuilder<DB, 'waf_rules', O>): SelectQueryBuilder<DB, 'waf_rules', O> {
  return q.orderBy('priority').orderBy('created_at').orderBy('id');
}

export function listRules(db: Database | Tx, accountId: string) {
  return db
    .selectFrom('waf_rules')
    .select(['id', 'rule_type', 'value', 'domain_id', 'enabled', 'priority', 'created_at', 'updated_at'])
    .where('account_id', '=', accountId)
    .$call(inApplyOrder)
    .execute();
}

/** The rules the portable export carries: IP blacklist and rate limits. */
export function portableRules(db: Database | Tx, accountId: string) {
  return db.selectFrom('waf_rules').select(['rule_type', 'value', 'enabled']).where('account_id', '=', accountId).where('rule_type', 'in', ['block_ip', 'rate_limit']).$call(inApplyOrder).execute();
}

export function insertRule(db: Database | Tx, row: Insertable<WafRulesTable>) {
  return db.insertInto('waf_rules').values(row).returningAll().executeTakeFirstOrThrow();
}

/** One rule of the account, locked for the rest of the transaction. */
export function lockRule(db: Database | Tx, accountId: string, id: string) {
  return db.selectFrom('waf_rules').selectAll().where('id', '=', id).where('account_id', '=', accountId).forUpdate().executeTakeFirst();
}

/** The caller has found and locked the rule in its account. */
export function updateRuleFields(db: Database | Tx, id: string, set: Updateable<WafRulesTable>) {
  return db.updateTable('waf_rules').set(set).where('id', '=', id).returningAll().executeTakeFirstOrThrow();
}

/** The caller has found and locked the rule in its account. */
export async function deleteRule(db: Database | Tx, id: string): Promise<void> {
  await db.deleteFrom('waf_rules').where('id', '=', id).execute();
}

/** The id of the account's rule with this type, value and scope (null: global), other than `exceptId`; undefined when none. */
export async function findSameRule(db: Database | Tx, accountId: string, rule: { ruleType: string; value: string; domainId: string | null }, exceptId?: string): Promise<string | undefined> {
  let q = db
    .selectFrom('waf_rules')
    .select('id')
    .where('account_id', '=', accountId)
    .where('rule_type', '=', rule.ruleType)
    .where('value', '=', rule.value)
    .where('domain_id', rule.domainId === null ? 'is' : '=', rule.domainId);
  if (exceptId !== undefined) q = q.where('id', '<>', exceptId);
  return (await q.executeTakeFirst())?.id;
}
