// Billing: crediting a balance (docs/billing.md). A deposit row credited with a payment, keyed by
// what paid it (creditDeposit, for billing-deposits.ts and billing-chain.ts), each credit's
// transaction (runCredit: one credit per payment, whatever races it), and the operator's
// adjustments; a credit that covers a frozen account's price makes it active again.
import type { ServiceContext } from '../context.js';
import { isUniqueViolation } from '../context.js';
import { isUuid } from '../values.js';
import { credentialsChanged } from '../credential-cache.js';
import { newId } from '../crypto.js';
import { lockAccount } from '../data/accounts.js';
import { postEntry, type PaymentKey, type TransactionRow } from '../data/transactions.js';
import type { Tx } from '../db/database.js';
import { AppError } from '../errors.js';
import { dollars, money } from '../plans.js';
import { notificationMessages } from './notifications.js';
import { OPERATOR_ACTOR, recordAudit, SYSTEM_ACTOR, type Actor } from './audit.js';
import { notifyIn, transactionView } from './billing.js';
import { reactivateIfCovered } from './billing-charge.js';

// ---------------------------------------------------------------------------------------------
// Credits: deposits, adjustments

export interface CreditResult {
  deposit: ReturnType<typeof transactionView>;
  account: { id: string; state: 'active' | 'frozen'; balance: number };
}

/**
 * Credits a locked deposit row with a payment (keyed by `paid`, null for none named): a pending
 * or expired one is settled with what arrived; a confirmed one (a second payment to its address)
 * gets a confirmed deposit row of its own.
 */
export async function creditDeposit(
  ctx: ServiceContext,
  tx: Tx,
  dep: TransactionRow,
  o: { amountCents: number; paid: PaymentKey | null; actor?: Actor | undefined },
): Promise<CreditResult & { reactivated: boolean }> {
  const account = await lockAccount(tx, dep.account_id);
  if (!account) throw new AppError('account_not_found');
  const now = ctx.now();
  const requested = Number(dep.amount_cents);
  const key = { tx_hash: o.paid?.txHash ?? null, chain: o.paid?.chain ?? null, log_index: o.paid?.logIndex ?? null };
  const posted =
    dep.status === 'confirmed'
      ? await postEntry(tx, {
          insert: {
            id: newId(),
            account_id: dep.account_id,
            kind: 'deposit',
            amount_cents: o.amountCents,
            delta_cents: o.amountCents,
            status: 'confirmed',
            ...key,
            network: dep.network,
            token: dep.token,
            description: `Another payment to ${dep.address ?? 'the address'} of deposit ${dep.id}`,
            created_at: now,
            confirmed_at: now,
          },
        })
      : await postEntry(tx, {
          settle: {
            id: dep.id,
            amount_cents: o.amountCents,
            ...key,
            confirmed_at: now,
            ...(o.amountCents !== requested ? { description: `Requested ${money(requested)}, received ${money(o.amountCents)}` } : {}),
          },
        });
  if (!posted) throw new AppError('deposit_not_pending');
  await recordAudit(tx, ctx, account.id, o.actor ?? SYSTEM_ACTOR, {
    objectType: 'deposit',
    objectId: dep.id,
    action: 'confirm',
    before: { status: dep.status, balance: dollars(Number(account.balance_cents)) },
    after: { status: 'confirmed', amount: dollars(o.amountCents), txHash: o.paid?.txHash ?? null, balance: dollars(posted.balanceCents) },
  });
  await notifyIn(ctx, tx, account.id, 'deposit_confirmed', notificationMessages.depositConfirmed(o.amountCents, posted.balanceCents, o.paid?.txHash));
  const after = await reactivateIfCovered(ctx, tx, account, posted.balanceCents);
  return {
    deposit: transactionView(posted.row),
    account: { id: account.id, state: after.state, balance: dollars(after.balanceCents) },
    reactivated: after.state !== account.state,
  };
}

/** Runs a credit's transaction; after the commit, every process drops what it cached of a reactivated account. */
export async function runCredit<T extends { reactivated: boolean; account: { id: string } }>(ctx: ServiceContext, fn: (tx: Tx) => Promise<T>): Promise<T> {
  let r: T;
  try {
    r = await ctx.db.transaction().execute(fn);
  } catch (err) {
    // One credit per payment (transactions_transfer, transactions_payment), whatever raced us to it.
    if (isUniqueViolation(err)) throw new AppError('tx_hash_used');
    throw err;
  }
  if (r.reactivated) await credentialsChanged(ctx, { kind: 'account-changed', accountIds: [r.account.id] });
  return r;
}

/** An operator's credit (positive) or debit (negative); a credit can make a frozen account active. */
export async function adjustBalance(ctx: ServiceContext, accountId: string, amountCents: number, description: string | undefined) {
  if (!isUuid(accountId)) throw new AppError('account_not_found');
  const r = await runCredit(ctx, async (tx) => {
    const account = await lockAccount(tx, accountId);
    if (!account) throw new AppError('account_not_found');
    const balance = Number(account.balance_cents);
    if (balance + amountCents < 0) {
      throw new AppError('balance_negative', `amount: the adjustment would take the balance below 0 (it is ${money(balance)})`);
    }
    const now = ctx.now();
    const posted = (await postEntry(tx, {
      insert: {
        id: newId(),
        account_id: accountId,
        kind: 'adjustment',
        amount_cents: amountCents,
        delta_cents: amountCents,
        status: 'confirmed',
        description: description ?? (amountCents >= 0 ? 'Credit by the operator' : 'Debit by the operator'),
        created_at: now,
        confirmed_at: now,
      },
    }))!;
    const after = amountCents > 0 ? await reactivateIfCovered(ctx, tx, account, posted.balanceCents) : { state: account.state as 'active' | 'frozen', balanceCents: posted.balanceCents };
    await recordAudit(tx, ctx, accountId, OPERATOR_ACTOR, {
      objectType: 'transaction',
      objectId: posted.row.id,
      action: 'adjust',
      before: { state: account.state, balance: dollars(balance) },
      after: { state: after.state, balance: dollars(after.balanceCents), amount: dollars(amountCents), description: posted.row.description },
    });
    return {
      transaction: transactionView(posted.row),
      account: { id: accountId, state: after.state, balance: dollars(after.balanceCents) },
      reactivated: after.state !== account.state,
    };
  });
  return { transaction: r.transaction, account: r.account };
}
