import { checkRuleValue, DOMAIN_ONLY_RULE_TYPES, SERVER_WIDE_RULE_TYPES, type RuleType } from '@rampart/protocol';
import type { Tx } from '../db/database.js';
import type { ServiceContext } from '../context.js';
import { isUuid, iso } from '../values.js';
import { newId } from '../crypto.js';
import { bumpWafVersion, lockAccount, wafVersion } from '../data/accounts.js';
import { domainExists, serversOfDomain } from '../data/domains.js';
import { deleteRule as deleteRuleRow, findSameRule, insertRule, listRules as listRuleRows, lockRule, updateRuleFields } from '../data/waf-rules.js';
import { AppError, ERRORS, invalidField } from '../errors.js';
import { enforceLimit } from './limits.js';
import { recordAudit, SYSTEM_ACTOR, type Actor } from './audit.js';
import { bumpForChange } from './rollouts.js';

export const MAX_RULES = 10_000;
export const DEFAULT_PRIORITY = 100;

export interface RuleInput {
  rule_type: RuleType;
  value: string;
  domain_id?: string | undefined;
  enabled?: boolean | undefined;
  priority?: number | undefined;
}

export interface RulePatch {
  value?: string | undefined;
  enabled?: boolean | undefined;
  priority?: number | undefined;
}

type RuleRow = {
  id: string;
  rule_type: string;
  value: string;
  domain_id: string | null;
  enabled: boolean;
  priority: number;
  created_at: Date | string;
  updated_at: Date | string;
};

export function ruleView(r: RuleRow) {
  return {
    id: r.id,
    rule_type: r.rule_type,
    value: r.value,
    domain_id: r.domain_id,
    enabled: r.enabled,
    priority: r.priority,
    created_at: iso(r.created_at)!,
    updated_at: iso(r.updated_at)!,
  };
}

/** The servers a rule reaches: its domain's, or every server of the account for a global rule. */
async function bumpForRule(tx: Tx, accountId: string, domainId: string | null): Promise<string[]> {
  await bumpWafVersion(tx, accountId);
  return domainId ? bumpForChange(tx, accountId, await serversOfDomain(tx, domainId)) : bumpForChange(tx, accountId);
}

export async function listRules(ctx: ServiceContext, accountId: string) {
  return (await listRuleRows(ctx.db, accountId)).map(ruleView);
}

export async function createRule(ctx: ServiceContext, accountId: string, input: RuleInput, actor: Actor = SYSTEM_ACTOR) {
  const problems: string[] = [];
  const checked = checkRuleValue(input.rule_type, input.value);
  if (!checked.ok) problems.push(checked.message);
  const domainId = input.domain_id ?? null;
  if (domainId !== null && SERVER_WIDE_RULE_TYPES.includes(input.rule_type)) {
    problems.push(`domain_id: must be omitted for ${input.rule_type} rules, which apply to the whole server`);
  }
  if (domainId === null && DOMAIN_ONLY_RULE_TYPES.includes(input.rule_type)) {
    problems.push(`domain_id: is required for ${input.rule_type} rules, which apply to one domain`);
  }
  if (problems.length) throw new AppError('invalid_body', problems.join('; '));
  if (domainId !== null && !isUuid(domainId)) throw new AppError('domain_not_found');
  const { view, touched } = await ctx.db.transaction().execute(async (tx) => {
    await lockAccount(tx, accountId);
    if (domainId !== null && !(await domainExists(tx, accountId, domainId))) throw new AppError('domain_not_found');
    await enforceLimit(tx, accountId, 'waf_rules', MAX_RULES, 'rule_limit');
    const value = checked.ok ? checked.value : input.value;
    // Values are canonical, so a repeat is found by equality (serialized under the account lock).
    const same = await findSameRule(tx, accountId, { ruleType: input.rule_type, value, domainId });
    if (same) throw new AppError('rule_exists', `${ERRORS.rule_exists.message} (rule ${same})`);
    const now = ctx.now();
    const row = await insertRule(tx, {
      id: newId(),
      account_id: accountId,
      domain_id: domainId,
      rule_type: input.rule_type,
      value,
      enabled: input.enabled ?? true,
      priority: input.priority ?? DEFAULT_PRIORITY,
      created_at: now,
      updated_at: now,
    });
    await recordAudit(tx, ctx, accountId, actor, { objectType: 'waf_rule', objectId: row.id, action: 'create', after: ruleView(row) });
    return { view: ruleView(row), touched: await bumpForRule(tx, accountId, domainId) };
  });
  ctx.serversChanged(touched);
  return view;
}

async function ownedRule(tx: Tx, accountId: string, id: string) {
  if (!isUuid(id)) throw new AppError('rule_not_found');
  const row = await lockRule(tx, accountId, id);
  if (!row) throw new AppError('rule_not_found');
  return row;
}

export async function updateRule(ctx: ServiceContext, accountId: string, id: string, patch: RulePatch, actor: Actor = SYSTEM_ACTOR) {
  const { view, touched } = await ctx.db.transaction().execute(async (tx) => {
    const current = await ownedRule(tx, accountId, id);
    let value = current.value;
    if (patch.value !== undefined) {
      const checked = checkRuleValue(current.rule_type as RuleType, patch.value);
      if (!checked.ok) throw invalidField('value', checked.message.replace(/^value /, ''));
      value = checked.value;
      await lockAccount(tx, accountId);
      const same = await findSameRule(tx, accountId, { ruleType: current.rule_type, value, domainId: current.domain_id }, id);
      if (same) throw new AppError('rule_exists', `${ERRORS.rule_exists.message} (rule ${same})`);
    }
    const row = await updateRuleFields(tx, id, {
      value,
      ...(patch.enabled !== undefined ? { enabled: patch.enabled } : {}),
      ...(patch.priority !== undefined ? { priority: patch.priority } : {}),
      updated_at: ctx.now(),
    });
    await recordAudit(tx, ctx, accountId, actor, { objectType: 'waf_rule', objectId: id, action: 'update', before: ruleView(current), after: ruleView(row) });
    return { view: ruleView(row), touched: await bumpForRule(tx, accountId, current.domain_id) };
  });
  ctx.serversChanged(touched);
  return view;
}

export async function deleteRule(ctx: ServiceContext, accountId: string, id: string, actor: Actor = SYSTEM_ACTOR) {
  const touched = await ctx.db.transaction().execute(async (tx) => {
    const current = await ownedRule(tx, accountId, id);
    await recordAudit(tx, ctx, accountId, actor, { objectType: 'waf_rule', objectId: id, action: 'delete', before: ruleView(current) });
    await deleteRuleRow(tx, id);
    return bumpForRule(tx, accountId, current.domain_id);
  });
  ctx.serversChanged(touched);
  return { success: true as const, id };
}

/** The version of the account's rule set, read fresh (one row by primary key): a list cached under it is current. */
export function ruleSetVersion(ctx: ServiceContext, accountId: string) {
  return wafVersion(ctx.db, accountId);
}
