// Billing, what its modules share (docs/billing.md): calendar months and the charge dates
// (addMonth, nextChargeAfter), the charge job's interval, a ledger row as the API shows it, a
// notification inside a billing transaction, and the ledger listed. The rest: billing-charge.ts
// (the monthly charge, reactivation, plan changes), billing-credit.ts (crediting a balance,
// operator adjustments), billing-deposits.ts (deposits, their confirmation, the payment webhook),
// billing-chain.ts (the chain watcher and what is read from the chain).
import type { ServiceContext } from '../context.js';
import { iso } from '../values.js';
import { transactionCursor, transactionsPage, type TransactionRow } from '../data/transactions.js';
import type { Tx } from '../db/database.js';
import { jobIntervalFromEnv } from '../jobs.js';
import { dollars } from '../plans.js';
import { notify, type NotificationKind } from './notifications.js';
import { listPage, type PageParams } from './paging.js';

// ---------------------------------------------------------------------------------------------
// Dates and money

/**
 * One calendar month later, in UTC, the day clamped to the month's last (Jan 31 -> Feb 28 or 29),
 * the time of day kept: what PostgreSQL's `timestamp + interval '1 month'` gives, so the monthly
 * charge computes the same dates in SQL (data/transactions.ts) and here. Negative `months` go back.
 */
export function addMonth(d: Date, months = 1): Date {
  const day = d.getUTCDate();
  const next = new Date(d);
  next.setUTCDate(1);
  next.setUTCMonth(next.getUTCMonth() + months);
  const lastDay = new Date(Date.UTC(next.getUTCFullYear(), next.getUTCMonth() + 1, 0)).getUTCDate();
  next.setUTCDate(Math.min(day, lastDay));
  return next;
}

/**
 * When the charge after the one for the period starting at `due` falls: a month after `due`, or,
 * when that is already past (the account was frozen, or the control plane down, for longer than a
 * month), a month after now: missed months are not charged at once.
 */
export function nextChargeAfter(due: Date, now: Date): Date {
  const next = addMonth(due);
  return next > now ? next : addMonth(now);
}

/** RAMPART_BILLING_INTERVAL: seconds between two runs of the monthly charge job (default 60). */
export const DEFAULT_BILLING_INTERVAL_SECONDS = 60;

export function billingIntervalFromEnv(raw: string | undefined): number {
  return jobIntervalFromEnv('RAMPART_BILLING_INTERVAL', raw, DEFAULT_BILLING_INTERVAL_SECONDS);
}

// ---------------------------------------------------------------------------------------------
// Views

/** A ledger row as the API shows it: dollars, the signed delta, and a deposit's payment details. */
export function transactionView(t: TransactionRow) {
  return {
    id: t.id,
    kind: t.kind,
    amount: dollars(Number(t.amount_cents)),
    delta: dollars(Number(t.delta_cents)),
    status: t.status,
    description: t.description,
    txHash: t.tx_hash,
    periodStart: iso(t.period_start),
    logIndex: t.log_index,
    address: t.address,
    network: t.network,
    token: t.token,
    createdAt: iso(t.created_at),
    confirmedAt: iso(t.confirmed_at),
    expiresAt: iso(t.expires_at),
  };
}

export const notifyIn = (ctx: ServiceContext, tx: Tx, accountId: string, kind: NotificationKind, message: string) => notify({ ...ctx, db: tx }, { accountId, kind, message });

// ---------------------------------------------------------------------------------------------
// The ledger, listed

/**
 * One page of the account's ledger, newest first: `limit` rows (default 50, at most 200), those
 * after the row `before` when given (services/paging.ts).
 */
export function listTransactions(ctx: ServiceContext, accountId: string, query: PageParams = {}) {
  return listPage(
    query,
    (id) => transactionCursor(ctx.db, accountId, id),
    (limit, before) => transactionsPage(ctx.db, accountId, limit, before?.id),
    transactionView,
  );
}
