import { CUSTOM_RULE_ACTIONS, parseRuleExpression, rateLimitProblem, type CustomRuleAction, type RuleRateLimit } from '@rampart/protocol';
import type { Tx } from '../db/database.js';
import type { ServiceContext } from '../context.js';
import { isUuid, iso } from '../values.js';
import { newId } from '../crypto.js';
import { lockAccount } from '../data/accounts.js';
import { deleteCustomRule as deleteRow, findCustomRule, insertCustomRule, listCustomRules, lockCustomRule, ruleHits, updateCustomRuleFields, type RuleHits } from '../data/custom-rules.js';
import { domainExists, serversOfDomain } from '../data/domains.js';
import { AppError, invalidField } from '../errors.js';
import { planName, type Plan } from '../plans.js';
import { enforceLimit } from './limits.js';
import { recordAudit, SYSTEM_ACTOR, type Actor } from './audit.js';
import { bumpForChange } from './rollouts.js';

// Custom rules (/api/rules, docs/rules.md): an expression of the rule language (@rampart/protocol
// rule-language.ts), checked here (syntax, types, limits, and every regular expression for
// catastrophic backtracking), then pushed to the shield servers of its scope, whose proxy compiles
// it to native HAProxy rules (packages/proxy custom-rules.ts).

export const DEFAULT_RULE_PRIORITY = 100;
/** How long the backtracking check of one regular expression may take before it is refused as unproven. */
const REGEX_CHECK_MS = 2000;

export interface CustomRuleInput {
  name: string;
  expression: string;
  action: CustomRuleAction;
  rateLimit?: RuleRateLimit | null | undefined;
  domainId?: string | null | undefined;
  priority?: number | undefined;
  enabled?: boolean | undefined;
}
export type CustomRulePatch = Partial<Omit<CustomRuleInput, 'domainId'>> & { domainId?: string | null | undefined };

type Row = {
  id: string;
  name: string;
  expression: string;
  action: string;
  rate_limit: string | null;
  domain_id: string | null;
  priority: number;
  enabled: boolean;
  created_at: Date | string;
  updated_at: Date | string;
};

const NO_HITS: RuleHits = { hour: 0, day: 0, week: 0 };

export function customRuleView(r: Row, hits: RuleHits = NO_HITS) {
  return {
    id: r.id,
    name: r.name,
    expression: r.expression,
    action: r.action as CustomRuleAction,
    rateLimit: r.rate_limit === null ? null : (JSON.parse(r.rate_limit) as RuleRateLimit),
    domainId: r.domain_id,
    priority: r.priority,
    enabled: r.enabled,
    createdAt: iso(r.created_at)!,
    updatedAt: iso(r.updated_at)!,
    hits,
  };
}

/**
 * The expression's problem as a 400 naming the field, or nothing: a parse error with its column
 * and what was expected there, a field we do not support, a size limit, or a regular expression
 * that can backtrack catastrophically (recheck) or could not be proven safe in time.
 */
async function checkExpression(expression: string): Promise<void> {
  const parsed = parseRuleExpression(expression);
  if (!parsed.ok) throw invalidField('expression', parsed.message);
  if (parsed.regexes.length === 0) return;
  // recheck is loaded with the first rule that has a regular expression: the 0.1 to 0.2 s of CPU
  // its bundled checker takes to load is not paid by a control plane that never sees one.
  const { check: checkRegex } = await import('recheck');
  for (const source of parsed.regexes) {
    const result = await checkRegex(source, '', { timeout: REGEX_CHECK_MS });
    if (result.status === 'safe') continue;
    const shown = JSON.stringify(source.length > 60 ? `${source.slice(0, 60)}…` : source);
    if (result.status === 'vulnerable') {
      const kind = result.complexity.type === 'exponential' ? 'exponential' : 'polynomial';
      throw invalidField(
        'expression',
        `the regular expression ${shown} can backtrack catastrophically (${kind} time on inputs like ${JSON.stringify(result.attack.pattern.slice(0, 60))}); rewrite it without nested or overlapping repetition`,
      );
    }
    throw invalidField('expression', `the regular expression ${shown} could not be proven safe from catastrophic backtracking; simplify it`);
  }
}

/** A rate_limit rule has its settings (checked), any other action none: the stored column, or a 400 naming the field. */
function rateLimitColumn(action: CustomRuleAction, rateLimit: RuleRateLimit | null | undefined): string | null {
  if (action !== 'rate_limit') {
    if (rateLimit != null) throw invalidField('rateLimit', 'only a rule with the action rate_limit takes it');
    return null;
  }
  if (rateLimit == null) throw invalidField('rateLimit', 'is required with the action rate_limit');
  const problem = rateLimitProblem(rateLimit);
  if (problem) throw new AppError('invalid_body', problem);
  const { requests, period, characteristics, mitigation, duration } = rateLimit;
  return JSON.stringify({ requests, period, characteristics, mitigation, duration });
}

/** The servers a rule reaches: its domain's, or every server of the account. */
function bumpForScope(tx: Tx, accountId: string, domainId: string | null): Promise<string[]> {
  return domainId ? serversOfDomain(tx, domainId).then((ids) => bumpForChange(tx, accountId, ids)) : bumpForChange(tx, accountId);
}

async function checkDomain(tx: Tx, accountId: string, domainId: string | null): Promise<void> {
  if (domainId !== null && (!isUuid(domainId) || !(await domainExists(tx, accountId, domainId)))) throw new AppError('domain_not_found');
}

export async function listRules(ctx: ServiceContext, accountId: string) {
  const [rows, hits] = await Promise.all([listCustomRules(ctx.db, accountId), ruleHits(ctx.db, accountId, ctx.now())]);
  return rows.map((r) => customRuleView(r, hits.get(r.id)));
}

export async function getRule(ctx: ServiceContext, accountId: string, id: string) {
  const row = isUuid(id) ? await findCustomRule(ctx.db, accountId, id) : undefined;
  if (!row) throw new AppError('custom_rule_not_found');
  return customRuleView(row, (await ruleHits(ctx.db, accountId, ctx.now(), id)).get(id));
}

export async function createRule(ctx: ServiceContext, accountId: string, input: CustomRuleInput, actor: Actor = SYSTEM_ACTOR) {
  if (!(CUSTOM_RULE_ACTIONS as readonly string[]).includes(input.action)) throw invalidField('action', `must be one of ${CUSTOM_RULE_ACTIONS.join(', ')}`);
  const rateLimit = rateLimitColumn(input.action, input.rateLimit);
  await checkExpression(input.expression);
  const domainId = input.domainId ?? null;
  const { view, touched } = await ctx.db.transaction().execute(async (tx) => {
    const account = await lockAccount(tx, accountId);
    if (!account) throw new AppError('account_not_found');
    await checkDomain(tx, accountId, domainId);
    const max = ctx.plans[account.plan as Plan].maxCustomRules;
    await enforceLimit(tx, accountId, 'custom_rules', max, 'custom_rule_limit', `Maximum ${max} custom rules allowed on the ${planName(account.plan)} plan`);
    const now = ctx.now();
    const row = await insertCustomRule(tx, {
      id: newId(),
      account_id: accountId,
      domain_id: domainId,
      name: input.name,
      expression: input.expression,
      action: input.action,
      rate_limit: rateLimit,
      enabled: input.enabled ?? true,
      priority: input.priority ?? DEFAULT_RULE_PRIORITY,
      created_at: now,
      updated_at: now,
    });
    await recordAudit(tx, ctx, accountId, actor, { objectType: 'custom_rule', objectId: row.id, action: 'create', after: customRuleView(row) });
    return { view: customRuleView(row), touched: await bumpForScope(tx, accountId, domainId) };
  });
  ctx.serversChanged(touched);
  return view;
}

export async function updateRule(ctx: ServiceContext, accountId: string, id: string, patch: CustomRulePatch, actor: Actor = SYSTEM_ACTOR) {
  if (patch.expression !== undefined) await checkExpression(patch.expression);
  const { view, touched } = await ctx.db.transaction().execute(async (tx) => {
    const current = isUuid(id) ? await lockCustomRule(tx, accountId, id) : undefined;
    if (!current) throw new AppError('custom_rule_not_found');
    const domainId = patch.domainId === undefined ? current.domain_id : patch.domainId;
    await checkDomain(tx, accountId, domainId);
    // The action and its settings are checked together: a rule turned into rate_limit brings them, one turned away drops them.
    const action = patch.action ?? (current.action as CustomRuleAction);
    const settings = patch.rateLimit !== undefined ? patch.rateLimit : action === 'rate_limit' ? (current.rate_limit === null ? null : (JSON.parse(current.rate_limit) as RuleRateLimit)) : null;
    const rateLimit = rateLimitColumn(action, settings);
    const row = await updateCustomRuleFields(tx, id, {
      ...(patch.name !== undefined ? { name: patch.name } : {}),
      ...(patch.expression !== undefined ? { expression: patch.expression } : {}),
      action,
      rate_limit: rateLimit,
      ...(patch.priority !== undefined ? { priority: patch.priority } : {}),
      ...(patch.enabled !== undefined ? { enabled: patch.enabled } : {}),
      domain_id: domainId,
      updated_at: ctx.now(),
    });
    // A rule moved between scopes leaves the servers of the old one too.
    const touched = new Set([...(await bumpForScope(tx, accountId, current.domain_id)), ...(domainId !== current.domain_id ? await bumpForScope(tx, accountId, domainId) : [])]);
    await recordAudit(tx, ctx, accountId, actor, { objectType: 'custom_rule', objectId: id, action: 'update', before: customRuleView(current), after: customRuleView(row) });
    return { view: customRuleView(row, (await ruleHits(tx, accountId, ctx.now(), id)).get(id)), touched: [...touched] };
  });
  ctx.serversChanged(touched);
  return view;
}

export async function deleteRule(ctx: ServiceContext, accountId: string, id: string, actor: Actor = SYSTEM_ACTOR) {
  const touched = await ctx.db.transaction().execute(async (tx) => {
    const current = isUuid(id) ? await lockCustomRule(tx, accountId, id) : undefined;
    if (!current) throw new AppError('custom_rule_not_found');
    await recordAudit(tx, ctx, accountId, actor, { objectType: 'custom_rule', objectId: id, action: 'delete', before: customRuleView(current) });
    await deleteRow(tx, id);
    return bumpForScope(tx, accountId, current.domain_id);
  });
  ctx.serversChanged(touched);
  return { success: true as const, id };
}
