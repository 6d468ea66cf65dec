import { sql, type Insertable, type SelectQueryBuilder, type Updateable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { CustomRulesTable, DB } from '../db/schema.js';
import { MINUTE_COUNT_MAX } from './analytics.js';

// The custom_rules table, and the hits of its rules (custom_rule_hits_minute and _hour).

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

/** Requests a rule acted on in the last hour, day and week (docs/rules.md "Hits"). */
export interface RuleHits {
  hour: number;
  day: number;
  week: number;
}

const MINUTE_MS = 60_000;
const HOUR_MS = 3_600_000;

/**
 * Adds one minute's hits (and to its hour) for the rules named that are the account's and apply
 * to one of `domainIds` or to every domain (the rules the reporting server has); others are left
 * out. Each rule once in `hits`; every sum stops at MINUTE_COUNT_MAX.
 */
export async function addRuleHits(db: Database | Tx, accountId: string, domainIds: readonly string[], minute: Date, hits: readonly { ruleId: string; hits: number }[]): Promise<void> {
  if (hits.length === 0) return;
  const values = sql.join(hits.map((h) => sql`(${h.ruleId}::uuid, ${Math.min(h.hits, MINUTE_COUNT_MAX)}::bigint)`));
  const scope = domainIds.length ? sql`(r.domain_id is null or r.domain_id in (${sql.join(domainIds.map((d) => sql`${d}::uuid`))}))` : sql`r.domain_id is null`;
  const hour = new Date(Math.floor(minute.getTime() / HOUR_MS) * HOUR_MS);
  for (const [table, column, at] of [
    ['custom_rule_hits_minute', 'minute', minute],
    ['custom_rule_hits_hour', 'hour', hour],
  ] as const) {
    await sql`
      insert into ${sql.table(table)} (rule_id, account_id, ${sql.ref(column)}, hits)
      select r.id, r.account_id, ${at}, v.hits from (values ${values}) as v(rule_id, hits)
      join custom_rules r on r.id = v.rule_id and r.account_id = ${accountId} and ${scope}
      on conflict (rule_id, ${sql.ref(column)}) do update set hits = least(${sql.ref(`${table}.hits`)} + excluded.hits, ${sql.lit(MINUTE_COUNT_MAX)})
    `.execute(db);
  }
}

/**
 * Each rule's hits (of the account; one rule with `ruleId`): the last hour and day are the current
 * UTC minute and the 59 (1,439) before it; the week, the current UTC hour and the 167 before it.
 * Rules without hits are absent.
 */
export async function ruleHits(db: Database | Tx, accountId: string, now: Date, ruleId?: string): Promise<Map<string, RuleHits>> {
  const minute = Math.floor(now.getTime() / MINUTE_MS) * MINUTE_MS;
  const hourAgo = new Date(minute - 59 * MINUTE_MS);
  const dayAgo = new Date(minute - 1439 * MINUTE_MS);
  const weekAgo = new Date(Math.floor(now.getTime() / HOUR_MS) * HOUR_MS - 167 * HOUR_MS);
  const one = ruleId === undefined ? sql`` : sql`and rule_id = ${ruleId}`;
  const [minutes, hours] = await Promise.all([
    sql<{ rule_id: string; hour: string; day: string }>`
      select rule_id, coalesce(sum(hits) filter (where minute >= ${hourAgo}), 0) as hour, sum(hits) as day
      from custom_rule_hits_minute where account_id = ${accountId} and minute >= ${dayAgo} ${one} group by rule_id`.execute(db),
    sql<{ rule_id: string; week: string }>`
      select rule_id, sum(hits) as week from custom_rule_hits_hour where account_id = ${accountId} and hour >= ${weekAgo} ${one} group by rule_id`.execute(db),
  ]);
  const out = new Map<string, RuleHits>();
  for (const r of hours.rows) out.set(r.rule_id, { hour: 0, day: 0, week: Number(r.week) });
  for (const r of minutes.rows) {
    const h = out.get(r.rule_id) ?? { hour: 0, day: 0, week: 0 };
    out.set(r.rule_id, { ...h, hour: Number(r.hour), day: Number(r.day) });
  }
  return out;
}

/** Minutes of hits before `minutesBefore` and hours before `hoursBefore` go; returns how many rows. */
export async function deleteRuleHitsBefore(db: Database | Tx, minutesBefore: Date, hoursBefore: Date): Promise<number> {
  const m = await db.deleteFrom('custom_rule_hits_minute').where('minute', '<', minutesBefore).executeTakeFirst();
  const h = await db.deleteFrom('custom_rule_hits_hour').where('hour', '<', hoursBefore).executeTakeFirst();
  return Number(m.numDeletedRows) + Number(h.numDeletedRows);
}
