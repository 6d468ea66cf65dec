import type { Insertable, Updateable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { WafRulesTable } from '../db/schema.js';

// The waf_rules table. Rules are listed in the order agents apply them: priority, then age.

export function listRules(db: Database | Tx, accountId: string) {
  return db
    .selectFrom('waf_rules')
    .select(['id', 'rule_type', 'value', 'domain_id', 'enabled', 'priority', 'created_at', 'updated_at'])
    .where('account_id', '=', accountId)
    .orderBy('priority')
    .orderBy('created_at')
    .orderBy('id')
    .execute();
}

/** The rules the portable export carries: IP blacklist and rate limits. */
export function portableRules(db: Database | Tx, accountId: string) {
  return db
    .selectFrom('waf_rules')
    .select(['rule_type', 'value', 'enabled'])
    .where('account_id', '=', accountId)
    .where('rule_type', 'in', ['block_ip', 'rate_limit'])
    .orderBy('priority')
    .orderBy('created_at')
    .orderBy('id')
    .execute();
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
