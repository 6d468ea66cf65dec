// Billing: the monthly charge (docs/billing.md). One locked account charged for its due period,
// or frozen when its balance falls short; the charge job over every due account, a batch at a
// time; the operator's charge; a frozen account charged and active again once a credit covers its
// price (reactivateIfCovered, for billing-credit.ts); plan changes, pro rata.
import { credentialsChanged } from '../credential-cache.js';
import type { ServiceContext } from '../context.js';
import { isUuid } from '../values.js';
import { newId } from '../crypto.js';
import { lockAccount, planUsage, setBillingState, setPlan } from '../data/accounts.js';
import { chargeDueAccounts, insertTransaction, postEntry } from '../data/transactions.js';
import type { Tx } from '../db/database.js';
import { AppError } from '../errors.js';
import { dollars, money, planName, PLANS, type Plan } from '../plans.js';
import { notificationMessages } from './notifications.js';
import { recordAudit, SYSTEM_ACTOR, type Actor } from './audit.js';
import { addMonth, nextChargeAfter, notifyIn, transactionView } from './billing.js';

type LockedAccount = NonNullable<Awaited<ReturnType<typeof lockAccount>>>;

const chargeDescription = (plan: string): string => `Monthly charge, ${planName(plan)} plan`;

// ---------------------------------------------------------------------------------------------
// The monthly charge

export interface ChargeResult {
  accountId: string;
  charged: boolean;
  state: 'active' | 'frozen';
  balance: number;
}

/**
 * The monthly charge of one locked account, for the period starting at its due date, inside the
 * caller's transaction: a balance below the price records a failed charge and freezes the account
 * (account_frozen the first time); otherwise the price is debited, the account is active, and the
 * next charge falls a month later. A period already charged is not charged again.
 */
async function chargeLocked(ctx: ServiceContext, tx: Tx, account: LockedAccount, actor: Actor = SYSTEM_ACTOR): Promise<ChargeResult> {
  const now = ctx.now();
  const price = ctx.plans[account.plan as Plan].priceCents;
  const balance = Number(account.balance_cents);
  const due = new Date(account.next_charge_at);
  const description = chargeDescription(account.plan);
  if (balance < price) {
    await insertTransaction(tx, { id: newId(), account_id: account.id, kind: 'charge', amount_cents: price, status: 'failed', period_start: due, description, created_at: now });
    if (account.state !== 'frozen') {
      await setBillingState(tx, account.id, 'frozen');
      await notifyIn(ctx, tx, account.id, 'account_frozen', notificationMessages.accountFrozen(account.plan, price, balance));
    }
    await recordAudit(tx, ctx, account.id, actor, {
      objectType: 'account',
      objectId: account.id,
      action: 'charge_failed',
      before: { state: account.state, balance: dollars(balance) },
      after: { state: 'frozen', balance: dollars(balance), price: dollars(price) },
    });
    return { accountId: account.id, charged: false, state: 'frozen', balance: dollars(balance) };
  }
  const posted = await postEntry(tx, {
    insert: { id: newId(), account_id: account.id, kind: 'charge', amount_cents: price, delta_cents: -price, status: 'confirmed', period_start: due, description, created_at: now, confirmed_at: now },
  });
  await setBillingState(tx, account.id, 'active', nextChargeAfter(due, now));
  if (posted) {
    await recordAudit(tx, ctx, account.id, actor, {
      objectType: 'transaction',
      objectId: posted.row.id,
      action: 'charge',
      before: { state: account.state, balance: dollars(balance) },
      after: { state: 'active', balance: dollars(posted.balanceCents), amount: dollars(price), description },
    });
  }
  return { accountId: account.id, charged: posted !== undefined, state: 'active', balance: dollars(posted?.balanceCents ?? balance) };
}

/** Accounts charged per statement of the monthly charge job. */
export const CHARGE_BATCH = 2_000;

/**
 * The monthly charge job: every active account whose charge is due, a batch of CHARGE_BATCH at a
 * time, one statement and one transaction per batch (data/transactions.ts, chargeDueAccounts).
 * The accounts it freezes get account_frozen, and every process drops what it cached of them
 * before this returns. Accounts held by another transaction meanwhile are left to the next run.
 */
export async function runChargeJob(ctx: ServiceContext, batchSize = CHARGE_BATCH): Promise<ChargeResult[]> {
  const plans = PLANS.map((plan) => ({ plan, priceCents: ctx.plans[plan].priceCents, description: chargeDescription(plan) }));
  const results: ChargeResult[] = [];
  for (;;) {
    const now = ctx.now();
    const rows = await ctx.db.transaction().execute(async (tx) => {
      const charged = await chargeDueAccounts(tx, { now, limit: batchSize, plans });
      for (const r of charged) {
        if (!r.charged) await notifyIn(ctx, tx, r.id, 'account_frozen', notificationMessages.accountFrozen(r.plan, r.price_cents, r.balance_cents));
      }
      return charged;
    });
    for (const r of rows) results.push({ accountId: r.id, charged: r.charged, state: r.charged ? 'active' : 'frozen', balance: dollars(r.balance_cents) });
    const frozen = rows.filter((r) => !r.charged).map((r) => r.id);
    // Every process sees the frozen accounts before this goes on (src/credential-cache.ts).
    if (frozen.length > 0) await credentialsChanged(ctx, { kind: 'account-changed', accountIds: frozen });
    if (rows.length < batchSize) return results;
  }
}

/**
 * The operator's charge (POST /admin/billing/charge): one account now, whatever its due date
 * (it pays the period starting at its due date, so calling it again pays the next one), or the
 * monthly charge job at once.
 */
export async function runMonthlyCharge(ctx: ServiceContext, accountId?: string, actor: Actor = SYSTEM_ACTOR): Promise<ChargeResult[]> {
  if (accountId === undefined) return runChargeJob(ctx);
  if (!isUuid(accountId)) throw new AppError('account_not_found');
  const { result, changed } = await ctx.db.transaction().execute(async (tx) => {
    const account = await lockAccount(tx, accountId);
    if (!account) throw new AppError('account_not_found');
    const r = await chargeLocked(ctx, tx, account, actor);
    if (r.state === 'active' && account.state === 'frozen') await notifyIn(ctx, tx, account.id, 'account_active', notificationMessages.accountActive(account.plan, Math.round(r.balance * 100)));
    return { result: r, changed: r.state !== account.state };
  });
  if (changed) await credentialsChanged(ctx, { kind: 'account-changed', accountIds: [accountId] });
  return [result];
}

// ---------------------------------------------------------------------------------------------
// Reactivation

/**
 * After a credit to a locked account: a frozen account whose balance now covers its price is
 * charged for its due period and active again, in the same transaction (account_active).
 */
export async function reactivateIfCovered(ctx: ServiceContext, tx: Tx, account: LockedAccount, balanceCents: number): Promise<{ state: 'active' | 'frozen'; balanceCents: number }> {
  const price = ctx.plans[account.plan as Plan].priceCents;
  if (account.state !== 'frozen') return { state: account.state as 'active', balanceCents };
  if (balanceCents < price) return { state: 'frozen', balanceCents };
  const r = await chargeLocked(ctx, tx, { ...account, balance_cents: balanceCents });
  await notifyIn(ctx, tx, account.id, 'account_active', notificationMessages.accountActive(account.plan, Math.round(r.balance * 100)));
  return { state: r.state, balanceCents: Math.round(r.balance * 100) };
}

// ---------------------------------------------------------------------------------------------
// Plan changes

/**
 * What moving from one price to another costs for the rest of the current period (the month
 * before the next charge): (new - old) x remaining / period length, rounded to the cent in the
 * operator's favour (a charge up, a credit down: changing and changing back at once costs at most
 * a cent). Positive: a charge; negative: a credit. 0 when the charge is already due.
 */
export function proRataCents(oldPriceCents: number, newPriceCents: number, nextChargeAt: Date, now: Date): number {
  const periodStart = addMonth(nextChargeAt, -1);
  const length = nextChargeAt.getTime() - periodStart.getTime();
  const remaining = Math.min(Math.max(nextChargeAt.getTime() - now.getTime(), 0), length);
  const diff = newPriceCents - oldPriceCents;
  // In the operator's favour: a charge rounded up, a credit down. Rounded half away from zero both
  // ways, changes timed around a rounding step (or a cycle through three plans) were credited more
  // than they were charged, a cent at a time, as often as scripted.
  const exact = (Math.abs(diff) * remaining) / length;
  return diff > 0 ? Math.ceil(exact) : diff < 0 ? 0 - Math.floor(exact) : 0; // 0 - 0 is 0, not -0
}

/**
 * PUT /api/account/plan: the new plan at once, with a pro-rata charge (refused with 402 when the
 * balance does not cover it) or credit for the rest of the period; the next monthly charge is at
 * the new price. Refused (409) when the account uses what the new plan does not have, or has more
 * shield servers or custom rules than it allows (the account row is locked, so no server or rule
 * is added meanwhile: createServer and createRule lock it too).
 */
export async function changePlan(ctx: ServiceContext, accountId: string, plan: Plan, actor: Actor = SYSTEM_ACTOR) {
  const r = await ctx.db.transaction().execute(async (tx) => {
    const account = await lockAccount(tx, accountId);
    if (!account) throw new AppError('account_not_found');
    if (account.state === 'frozen') throw new AppError('account_frozen');
    const from = account.plan as Plan;
    if (from === plan) return { transaction: null, changed: false };
    const target = ctx.plans[plan];
    const usage = await planUsage(tx, accountId);
    if (!target.apiKeys && usage.apiKeys > 0) {
      throw new AppError('plan_usage', `plan: the ${planName(plan)} plan has no API keys and this account has ${usage.apiKeys}; delete them first (sign in with a password to do so)`);
    }
    if (!target.dnsFailover && usage.dnsFailoverDomains > 0) {
      throw new AppError('plan_usage', `plan: the ${planName(plan)} plan has no DNS failover and ${usage.dnsFailoverDomains} domain(s) of this account use it; turn it off first`);
    }
    // Over the new plan's numbers: refused, naming how many to remove (nothing is removed or stopped for the account).
    if (usage.servers > target.maxServers) {
      throw new AppError(
        'plan_usage',
        `plan: the ${planName(plan)} plan allows ${target.maxServers} shield servers and this account has ${usage.servers}; decommission ${usage.servers - target.maxServers} first (DELETE /api/servers/{id})`,
      );
    }
    if (usage.customRules > target.maxCustomRules) {
      throw new AppError(
        'plan_usage',
        `plan: the ${planName(plan)} plan allows ${target.maxCustomRules} custom rules and this account has ${usage.customRules}; delete ${usage.customRules - target.maxCustomRules} first`,
      );
    }
    const now = ctx.now();
    const amount = proRataCents(ctx.plans[from].priceCents, target.priceCents, new Date(account.next_charge_at), now);
    const balance = Number(account.balance_cents);
    if (amount > balance) {
      throw new AppError(
        'insufficient_balance',
        `plan: moving to ${planName(plan)} costs ${money(amount)} now (pro rata for the rest of the period) and the balance is ${money(balance)}; deposit at least ${money(amount - balance)} first`,
      );
    }
    const description = `Plan change ${planName(from)} -> ${planName(plan)}, pro rata for the rest of the period`;
    let posted: Awaited<ReturnType<typeof postEntry>>;
    if (amount > 0) {
      posted = await postEntry(tx, {
        insert: { id: newId(), account_id: accountId, kind: 'charge', amount_cents: amount, delta_cents: -amount, status: 'confirmed', description, created_at: now, confirmed_at: now },
      });
    } else if (amount < 0) {
      posted = await postEntry(tx, {
        insert: { id: newId(), account_id: accountId, kind: 'adjustment', amount_cents: -amount, delta_cents: -amount, status: 'confirmed', description, created_at: now, confirmed_at: now },
      });
    }
    await setPlan(tx, accountId, plan);
    await recordAudit(tx, ctx, accountId, actor, {
      objectType: 'account',
      objectId: accountId,
      action: 'change_plan',
      before: { plan: from, balance: dollars(balance) },
      after: { plan, balance: dollars(posted?.balanceCents ?? balance), transactionId: posted?.row.id ?? null },
    });
    return { transaction: posted ? transactionView(posted.row) : null, changed: true };
  });
  // The plan is part of what every process caches of a credential.
  if (r.changed) await credentialsChanged(ctx, { kind: 'account-changed', accountIds: [accountId] });
  return { transaction: r.transaction };
}
