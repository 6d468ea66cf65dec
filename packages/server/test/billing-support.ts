import { sql } from 'kysely';
import type { ServiceContext } from '../src/context.js';

// What the billing tests check of the ledger (docs/billing.md, "The ledger").

/** Per account (these, or all): the cached balance, the sum of the ledger, and any period charged twice. */
export async function ledgerProblems(t: { ctx: Pick<ServiceContext, 'db'> }, accountIds?: string[]): Promise<string[]> {
  const only = accountIds ? sql`where a.id in (${sql.join(accountIds)})` : sql``;
  const { rows } = await sql<{ id: string; balance: number; sum: number }>`
    select a.id, a.balance_cents::bigint as balance, coalesce(sum(t.delta_cents), 0)::bigint as sum
    from accounts a left join transactions t on t.account_id = a.id ${only} group by a.id, a.balance_cents`.execute(t.ctx.db);
  const problems = rows.filter((r) => Number(r.balance) !== Number(r.sum) || Number(r.balance) < 0).map((r) => `account ${r.id}: balance ${r.balance}, ledger sum ${r.sum}`);
  const twice = await sql<{ account_id: string; period_start: Date; n: number }>`
    select account_id, period_start, count(*)::int as n from transactions
    where kind = 'charge' and status = 'confirmed' and period_start is not null
    group by account_id, period_start having count(*) > 1`.execute(t.ctx.db);
  problems.push(...twice.rows.map((r) => `account ${r.account_id} charged ${r.n} times for ${String(r.period_start)}`));
  const nonZero = await sql<{ id: string }>`select id from transactions where status <> 'confirmed' and delta_cents <> 0`.execute(t.ctx.db);
  problems.push(...nonZero.rows.map((r) => `row ${r.id} is not confirmed but moves the balance`));
  return problems;
}
