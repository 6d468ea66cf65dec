// Billing (docs/billing.md): the ledger, the monthly charge on a schedule, freezing and
// reactivation, plan changes pro rata, deposits (a few open per account, expiring) and their three
// confirmation paths (the chain watcher, the operator API, a payment processor's webhook), each
// credit keyed by what paid it, operator adjustments.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { depositAddress } from '../chain/addresses.js';
import { toCents, type ChainConfig } from '../chain/config.js';
import { ChainWatcher, type ConfirmedTransfer } from '../chain/watcher.js';
import type { ServiceContext } from '../context.js';
import { isUniqueViolation } from '../context.js';
import { isUuid, iso } from '../values.js';
import { credentialsChanged } from '../credential-cache.js';
import { newId } from '../crypto.js';
import { lockAccount, planUsage, setBillingState, setPlan } from '../data/accounts.js';
import { readJobState, writeJobState } from '../data/job-state.js';
import { recordPaymentEvent } from '../data/payment-events.js';
import {
  chargeDueAccounts,
  expireDeposits,
  findCredit,
  findDeposit,
  findDepositByAddress,
  insertTransaction,
  lockDeposit,
  nextDepositAddressIndex,
  openDepositCount,
  postEntry,
  transactionCursor,
  transactionsPage,
  watchedDepositAddresses,
  type PaymentKey,
  type TransactionRow,
} from '../data/transactions.js';
import type { Tx } from '../db/database.js';
import { AppError, invalidField } from '../errors.js';
import { jobIntervalFromEnv } from '../jobs.js';
import { dollars, money, planName, PLANS, type Plan } from '../plans.js';
import { notificationMessages, notify, type NotificationKind } from './notifications.js';
import { listPage, type PageParams } from './paging.js';
import { OPERATOR_ACTOR, recordAudit, SYSTEM_ACTOR, type Actor } from './audit.js';

type LockedAccount = NonNullable<Awaited<ReturnType<typeof lockAccount>>>;

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

const chargeDescription = (plan: string): string => `Monthly charge, ${planName(plan)} plan`;

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

const notifyIn = (ctx: ServiceContext, tx: Tx, accountId: string, kind: NotificationKind, message: string) => notify({ ...ctx, db: tx }, { accountId, kind, message });

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
    await recordAudit(tx, ctx, account.id, actor, { objectType: 'account', objectId: account.id, action: 'charge_failed', before: { state: account.state, balance: dollars(balance) }, after: { state: 'frozen', balance: dollars(balance), price: dollars(price) } });
    return { accountId: account.id, charged: false, state: 'frozen', balance: dollars(balance) };
  }
  const posted = await postEntry(tx, {
    insert: { id: newId(), account_id: account.id, kind: 'charge', amount_cents: price, delta_cents: -price, status: 'confirmed', period_start: due, description, created_at: now, confirmed_at: now },
  });
  await setBillingState(tx, account.id, 'active', nextChargeAfter(due, now));
  if (posted) {
    await recordAudit(tx, ctx, account.id, actor, { objectType: 'transaction', objectId: posted.row.id, action: 'charge', before: { state: account.state, balance: dollars(balance) }, after: { state: 'active', balance: dollars(posted.balanceCents), amount: dollars(price), description } });
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
// Credits: deposits, adjustments, reactivation

/**
 * After a credit to a locked account: a frozen account whose balance now covers its price is
 * charged for its due period and active again, in the same transaction (account_active).
 */
async function reactivateIfCovered(ctx: ServiceContext, tx: Tx, account: LockedAccount, balanceCents: number): Promise<{ state: 'active' | 'frozen'; balanceCents: number }> {
  const price = ctx.plans[account.plan as Plan].priceCents;
  if (account.state !== 'frozen') return { state: account.state as 'active', balanceCents };
  if (balanceCents < price) return { state: 'frozen', balanceCents };
  const r = await chargeLocked(ctx, tx, { ...account, balance_cents: balanceCents });
  await notifyIn(ctx, tx, account.id, 'account_active', notificationMessages.accountActive(account.plan, Math.round(r.balance * 100)));
  return { state: r.state, balanceCents: Math.round(r.balance * 100) };
}

export interface CreditResult {
  deposit: ReturnType<typeof transactionView>;
  account: { id: string; state: 'active' | 'frozen'; balance: number };
}

/**
 * Credits a locked deposit row with a payment (keyed by `paid`, null for none named): a pending
 * or expired one is settled with what arrived; a confirmed one (a second payment to its address)
 * gets a confirmed deposit row of its own.
 */
async function creditDeposit(
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
  const posted = dep.status === 'confirmed'
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
  await notifyIn(
    ctx,
    tx,
    account.id,
    'deposit_confirmed',
    notificationMessages.depositConfirmed(o.amountCents, posted.balanceCents, o.paid?.txHash),
  );
  const after = await reactivateIfCovered(ctx, tx, account, posted.balanceCents);
  return {
    deposit: transactionView(posted.row),
    account: { id: account.id, state: after.state, balance: dollars(after.balanceCents) },
    reactivated: after.state !== account.state,
  };
}

/** Runs a credit's transaction; after the commit, every process drops what it cached of a reactivated account. */
async function runCredit<T extends { reactivated: boolean; account: { id: string } }>(ctx: ServiceContext, fn: (tx: Tx) => Promise<T>): Promise<T> {
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

export interface ConfirmOptions {
  /** What paid it: the transaction's hash (on-chain deposits, required), or the processor's payment id. */
  txHash?: string | undefined;
  /** On-chain deposits: the one transfer of that transaction meant; default every transfer of it to the deposit's address. */
  logIndex?: number | undefined;
  /** Off-chain deposits: what arrived, in cents; default the amount asked for. */
  amountCents?: number | undefined;
  /** A payment processor's event id: applied once (payment_events). */
  eventId?: string | undefined;
  /** Who confirms it (the audit log): the system (payment webhook, chain watcher) unless said. */
  actor?: Actor | undefined;
}

type Confirmed = CreditResult | { duplicate: true };

const TX_HASH = /^0x[0-9a-fA-F]{64}$/;

/**
 * Confirms a deposit off-chain (the operator API, the payment webhook), naming what paid it. An
 * on-chain deposit (one with an address) names the transaction: the control plane reads it from
 * the chain and credits its transfers to the deposit's address as the chain watcher does, keyed
 * by (chain, hash, log index), so whichever of the two sees a transfer first credits it and the
 * other finds it credited; what is credited is what arrived. An off-chain deposit is settled once
 * (a 409 after), with what the caller says arrived; a payment id it names is credited once.
 * A frozen account whose new balance covers its price is charged and active again in the same
 * transaction. An event id already applied answers `duplicate`.
 */
export async function confirmDeposit(ctx: ServiceContext, depositId: string, o: ConfirmOptions = {}): Promise<Confirmed> {
  if (!isUuid(depositId)) throw new AppError('deposit_not_found');
  const dep = await findDeposit(ctx.db, depositId);
  if (!dep) throw new AppError('deposit_not_found');
  return dep.address === null ? confirmOffChain(ctx, dep.id, o) : confirmOnChain(ctx, dep, o);
}

/** One confirmation's credits in one transaction, its event id recorded with them (seen before: nothing done). */
async function confirmIn(ctx: ServiceContext, depositId: string, eventId: string | undefined, credit: (tx: Tx) => Promise<CreditResult & { reactivated: boolean }>): Promise<Confirmed> {
  const r = await runCredit(ctx, async (tx) => {
    if (eventId !== undefined && !(await recordPaymentEvent(tx, { id: eventId, deposit_id: depositId, received_at: ctx.now() }))) {
      return { duplicate: true as const, reactivated: false, account: { id: '' } };
    }
    return credit(tx);
  });
  if ('duplicate' in r) return { duplicate: true };
  return { deposit: r.deposit, account: r.account };
}

async function confirmOffChain(ctx: ServiceContext, depositId: string, o: ConfirmOptions): Promise<Confirmed> {
  if (o.logIndex !== undefined) throw invalidField('logIndex', 'is only for on-chain deposits (those with an address)');
  // A 0x hash in lower case, as chains and explorers mostly write it, whatever case it was given in.
  const txHash = o.txHash !== undefined && TX_HASH.test(o.txHash) ? o.txHash.toLowerCase() : o.txHash;
  const paid: PaymentKey | null = txHash === undefined ? null : { chain: null, txHash, logIndex: null };
  return confirmIn(ctx, depositId, o.eventId, async (tx) => {
    const dep = await lockDeposit(tx, depositId);
    if (!dep) throw new AppError('deposit_not_found');
    if (dep.status !== 'pending' && dep.status !== 'expired') throw new AppError('deposit_not_pending');
    if (paid && (await findCredit(tx, paid))) throw new AppError('tx_hash_used');
    return creditDeposit(ctx, tx, dep, { amountCents: o.amountCents ?? Number(dep.amount_cents), paid, actor: o.actor });
  });
}

async function confirmOnChain(ctx: ServiceContext, dep: TransactionRow, o: ConfirmOptions): Promise<Confirmed> {
  if (o.txHash === undefined) throw invalidField('txHash', 'is required to confirm an on-chain deposit: the hash of the transaction that paid it');
  if (!TX_HASH.test(o.txHash)) throw invalidField('txHash', 'must be the hash of the transaction that paid an on-chain deposit: 0x and 64 hex digits');
  if (o.amountCents !== undefined) throw invalidField('amount', 'an on-chain deposit is credited what arrived on-chain: leave amount out');
  const chain = ctx.billing?.chain;
  if (!chain) throw new AppError('chain_unavailable');
  const credits = await transfersToDeposit(chain, dep, o.txHash.toLowerCase() as `0x${string}`, o.logIndex);
  return confirmIn(ctx, dep.id, o.eventId, async (tx) => {
    const done: (CreditResult & { reactivated: boolean })[] = [];
    for (const c of credits) {
      const r = await creditTransfer(ctx, tx, c);
      if (typeof r !== 'string') done.push(r);
    }
    if (done.length === 0) throw new AppError('tx_hash_used');
    return { deposit: done[0]!.deposit, account: done.at(-1)!.account, reactivated: done.some((r) => r.reactivated) };
  });
}

/**
 * The transfers of a named transaction to an on-chain deposit's address (or the one at
 * `logIndex`), read from the chain: refused while the transaction is not as deep as the watcher
 * needs (a reorganisation could still drop it), or when it pays the address nothing.
 */
async function transfersToDeposit(chain: ChainConfig, dep: TransactionRow, hash: `0x${string}`, logIndex: number | undefined): Promise<ChainCredit[]> {
  const seen = await askChain(() => chainWatcher(chain).transaction(hash));
  if (seen.state === 'unknown') throw invalidField('txHash', `no such transaction on ${dep.network ?? 'the chain'} (or not mined yet)`);
  if (seen.state === 'shallow') {
    throw new AppError('transfer_not_final', `txHash: the transaction is ${seen.depth} block(s) deep and counts at ${chain.confirmations}: confirm it then`);
  }
  const paysDeposit = seen.transfers.filter((t) => t.to.toLowerCase() === dep.address!.toLowerCase() && (logIndex === undefined || t.logIndex === logIndex));
  if (paysDeposit.length === 0) {
    const other = logIndex === undefined ? undefined : seen.transfers.find((t) => t.logIndex === logIndex);
    if (other) throw invalidField('logIndex', `transfer ${logIndex} of that transaction pays ${other.to}, not this deposit's address ${dep.address}`);
    throw invalidField('txHash', `that transaction pays no ${chain.symbol} to this deposit's address ${dep.address}`);
  }
  const credits = chainCredits(paysDeposit, await askChain(() => chainKey(chain)), chain.decimals).filter((c) => c.amountCents > 0);
  if (credits.length === 0) throw invalidField('txHash', `that transaction pays this deposit's address less than a cent`);
  return credits;
}

/** The operator's confirmation (POST /admin/deposits/:id/confirm). */
export async function confirmDepositByOperator(ctx: ServiceContext, depositId: string, o: { txHash?: string | undefined; logIndex?: number | undefined }): Promise<CreditResult> {
  const r = await confirmDeposit(ctx, depositId, { ...o, actor: OPERATOR_ACTOR });
  if ('duplicate' in r) throw new AppError('deposit_not_pending'); // no event id: never a duplicate
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

// ---------------------------------------------------------------------------------------------
// Deposits

/** How long a deposit waits for the RPC to name the network before answering 503. */
const NETWORK_NAME_TIMEOUT_MS = 5_000;

/** The network's display name for payment details: configured, else from the RPC's chain id (asked once). */
const networkNames = new Map<string, Promise<string>>();
async function chainNetwork(chain: ChainConfig): Promise<string> {
  if (chain.network) return chain.network;
  let name = networkNames.get(chain.rpcUrl);
  if (!name) {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('no answer')), NETWORK_NAME_TIMEOUT_MS)));
    name = Promise.race([chainWatcher(chain).network(), late]).finally(() => clearTimeout(timer));
    networkNames.set(chain.rpcUrl, name);
    name.catch(() => networkNames.delete(chain.rpcUrl)); // asked again next time
  }
  try {
    return await name;
  } catch {
    throw new AppError('chain_unavailable');
  }
}

/** Deposits an account may have open (pending, not expired) at once. */
export const MAX_OPEN_DEPOSITS = 5;
/** A deposit stays open this long; then it expires (docs/billing.md, "Deposits"). */
export const DEPOSIT_TTL_MS = 24 * 3_600_000;

/**
 * A pending deposit, open for DEPOSIT_TTL_MS; an account with MAX_OPEN_DEPOSITS open already gets
 * a 409 (counted under the account's lock, so requests at once cannot pass it). With on-chain
 * deposits configured it gets payment details: its own address (child `i` of the operator's
 * xpub, `i` the next value of deposit_address_index), the network and the token;
 * `tokenContract` is the ERC-20 contract to pay with.
 */
export async function createDeposit(ctx: ServiceContext, accountId: string, amountCents: number, actor: Actor = SYSTEM_ACTOR) {
  const chain = ctx.billing?.chain;
  const network = chain ? await chainNetwork(chain) : undefined;
  const row = await ctx.db.transaction().execute(async (tx) => {
    if (!(await lockAccount(tx, accountId))) throw new AppError('account_not_found');
    const now = ctx.now();
    if ((await openDepositCount(tx, accountId, now)) >= MAX_OPEN_DEPOSITS) throw new AppError('deposit_limit');
    const base = { id: newId(), account_id: accountId, kind: 'deposit', amount_cents: amountCents, status: 'pending', created_at: now, expires_at: new Date(now.getTime() + DEPOSIT_TTL_MS) };
    await recordAudit(tx, ctx, accountId, actor, { objectType: 'deposit', objectId: base.id, action: 'create', after: { amount: dollars(amountCents), status: 'pending' } });
    if (!chain || network === undefined) return insertTransaction(tx, base);
    const index = await nextDepositAddressIndex(tx);
    const address = depositAddress(chain.xpub, index);
    return insertTransaction(tx, {
      ...base,
      address,
      address_index: index,
      network,
      token: chain.symbol,
      description: `Pay ${money(amountCents).slice(1)} ${chain.symbol} on ${network} to ${address}`,
    });
  });
  return { ...transactionView(row), tokenContract: chain ? (chain.token as string) : null };
}

/** The deposit-expiry job: pending deposits past their time become `expired` (no longer open). */
export function runDepositExpiry(ctx: ServiceContext): Promise<number> {
  return expireDeposits(ctx.db, ctx.now());
}

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
      posted = await postEntry(tx, { insert: { id: newId(), account_id: accountId, kind: 'charge', amount_cents: amount, delta_cents: -amount, status: 'confirmed', description, created_at: now, confirmed_at: now } });
    } else if (amount < 0) {
      posted = await postEntry(tx, { insert: { id: newId(), account_id: accountId, kind: 'adjustment', amount_cents: -amount, delta_cents: -amount, status: 'confirmed', description, created_at: now, confirmed_at: now } });
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

// ---------------------------------------------------------------------------------------------
// The payment processor's webhook

/** How far a webhook's timestamp may be from the server's clock. */
export const WEBHOOK_TOLERANCE_SECONDS = 300;
export const SIGNATURE_HEADER = 'X-Rampart-Payment-Signature';

/** The signature a processor sends: hex HMAC-SHA256 of `<t>.<raw body>` under the shared secret. */
export function paymentSignature(secret: string, timestamp: number | string, rawBody: Buffer | string): string {
  return createHmac('sha256', secret).update(`${timestamp}.`).update(rawBody).digest('hex');
}

/**
 * Checks `X-Rampart-Payment-Signature: t=<unix seconds>,v1=<hex>` (several v1 allowed, for a
 * secret being rotated) against the raw body. 503 when no secret is configured, 400 for a missing
 * or malformed header, 401 for a timestamp more than 5 minutes away or a signature that does not match.
 */
export function verifyPaymentSignature(ctx: ServiceContext, header: unknown, rawBody: Buffer): void {
  const secret = ctx.billing?.webhookSecret;
  if (!secret) throw new AppError('payment_webhook_off');
  const expected = `expected t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`;
  if (typeof header !== 'string' || header === '') throw invalidField(SIGNATURE_HEADER, `missing; ${expected}`);
  let t: number | undefined;
  const v1: Buffer[] = [];
  for (const part of header.split(',')) {
    const [k, v = ''] = part.trim().split('=', 2) as [string, string?];
    if (k === 't' && /^\d{1,12}$/.test(v)) t = Number(v);
    else if (k === 'v1' && /^[0-9a-fA-F]{64}$/.test(v)) v1.push(Buffer.from(v, 'hex'));
  }
  if (t === undefined || v1.length === 0 || header.length > 2000) throw invalidField(SIGNATURE_HEADER, `malformed; ${expected}`);
  if (Math.abs(ctx.now().getTime() / 1000 - t) > WEBHOOK_TOLERANCE_SECONDS) {
    throw new AppError('payment_signature', `${SIGNATURE_HEADER}: the timestamp is more than ${WEBHOOK_TOLERANCE_SECONDS / 60} minutes away from the server's clock`);
  }
  const want = Buffer.from(paymentSignature(secret, t, rawBody), 'hex');
  if (!v1.some((sig) => timingSafeEqual(sig, want))) throw new AppError('payment_signature');
}

export interface PaymentEvent {
  id: string;
  type: string;
  depositId?: string | undefined;
  amountCents?: number | undefined;
  txHash?: string | undefined;
  logIndex?: number | undefined;
}

/**
 * A verified processor event: `deposit.confirmed` confirms the deposit through confirmDeposit,
 * once per event id; other types are acknowledged and ignored.
 */
export async function applyPaymentEvent(ctx: ServiceContext, e: PaymentEvent) {
  if (e.type !== 'deposit.confirmed') return { received: true, applied: false };
  if (e.depositId === undefined) throw invalidField('depositId', 'is required for deposit.confirmed');
  const r = await confirmDeposit(ctx, e.depositId, { eventId: e.id, txHash: e.txHash, logIndex: e.logIndex, amountCents: e.amountCents });
  if ('duplicate' in r) return { received: true, applied: false, duplicate: true };
  return { received: true, applied: true, deposit: r.deposit, account: r.account };
}

// ---------------------------------------------------------------------------------------------
// The chain watcher

/** job_state: the next block the watcher reads. */
export const CHAIN_CURSOR = 'chain-watcher.cursor';
/** A deposit's address stays watched this long after its confirmation: a second payment is credited too. */
export const REPAYMENT_WATCH_MS = 30 * 86_400_000;
/**
 * An unpaid deposit's address stays watched this long after it expired: a payment made in its
 * last minutes is credited once deep enough. After that it is not looked for (docs/billing.md).
 */
export const EXPIRED_WATCH_MS = 3_600_000;

/** A transfer to a deposit address as a credit, keyed by the transfer itself. */
export interface ChainCredit extends PaymentKey {
  /** CAIP-2: `eip155:<chain id>`. */
  chain: string;
  logIndex: number;
  address: string;
  amountCents: number;
}

/**
 * Transfers as credits: one per transfer, keyed by its chain, transaction hash and log index (a
 * multisend paying several deposit addresses, or one address twice, is several credits), in cents
 * rounded down.
 */
export function chainCredits(transfers: readonly ConfirmedTransfer[], chain: string, decimals: number): ChainCredit[] {
  return transfers.map((t) => ({ chain, txHash: t.txHash.toLowerCase(), logIndex: t.logIndex, address: t.to, amountCents: toCents(t.amount, decimals) }));
}

export type ChainCreditOutcome = 'credited' | 'duplicate' | 'unknown-address' | 'dust';

/**
 * One transfer credited in the caller's transaction, unless credited before: a pending or expired
 * deposit at its address is settled with what arrived (less or more than asked); a confirmed one
 * gets the payment as a confirmed deposit row of its own.
 */
async function creditTransfer(ctx: ServiceContext, tx: Tx, c: ChainCredit): Promise<(CreditResult & { reactivated: boolean }) | 'duplicate' | 'unknown-address'> {
  if (await findCredit(tx, c)) return 'duplicate';
  const found = await findDepositByAddress(tx, c.address);
  const dep = found && (await lockDeposit(tx, found.id));
  if (!dep) return 'unknown-address';
  return creditDeposit(ctx, tx, dep, { amountCents: c.amountCents, paid: c });
}

/** A payment the chain watcher saw: credited once per transfer, whichever path (or process) gets there first. */
export async function creditChainPayment(ctx: ServiceContext, c: ChainCredit): Promise<ChainCreditOutcome> {
  if (c.amountCents <= 0) return 'dust';
  try {
    const r = await runCredit(ctx, async (tx) => {
      const r = await creditTransfer(ctx, tx, c);
      if (typeof r === 'string') return { outcome: r, reactivated: false, account: { id: '' } };
      return { ...r, outcome: 'credited' as const };
    });
    return r.outcome;
  } catch (err) {
    if (err instanceof AppError && err.code === 'tx_hash_used') return 'duplicate';
    throw err;
  }
}

/** A watcher of the configured chain, reading from `fromBlock` (the stored cursor) when given. */
function chainWatcher(chain: ChainConfig, fromBlock?: bigint): ChainWatcher {
  return new ChainWatcher({ rpcUrl: chain.rpcUrl, token: chain.token, confirmations: chain.confirmations, network: chain.network, fromBlock });
}

/** The chain's part of every on-chain credit's key, `eip155:<chain id>` (CAIP-2), asked of the RPC once per process. */
const chainKeys = new Map<string, Promise<string>>();
function chainKey(chain: ChainConfig): Promise<string> {
  let key = chainKeys.get(chain.rpcUrl);
  if (!key) {
    key = chainWatcher(chain)
      .chainId()
      .then((id) => `eip155:${id}`);
    chainKeys.set(chain.rpcUrl, key);
    key.catch(() => chainKeys.delete(chain.rpcUrl)); // asked again next time
  }
  return key;
}

/** An RPC call on behalf of a request: the chain not answering is a 503, not a 500. */
async function askChain<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch {
    throw new AppError('chain_unavailable');
  }
}

/**
 * One look at the chain (the chain-watcher job): the transfers to watched deposit addresses in the
 * blocks from the stored cursor up to the newest deep enough, each credited once; then the cursor
 * moves on. A failure leaves the cursor, so the next run reads the same blocks again (what was
 * credited meanwhile is not credited twice: one credit per transfer).
 */
export async function pollChainDeposits(ctx: ServiceContext, chain: ChainConfig | undefined = ctx.billing?.chain): Promise<ChainCreditOutcome[]> {
  if (!chain) return [];
  const key = await chainKey(chain);
  const stored = await readJobState(ctx.db, CHAIN_CURSOR);
  const watcher = chainWatcher(chain, stored !== undefined && /^\d+$/.test(stored) ? BigInt(stored) : undefined);
  // Read just before the poll (see ChainWatcher.poll).
  const now = ctx.now().getTime();
  const addresses = await watchedDepositAddresses(ctx.db, { expiresAfter: new Date(now - EXPIRED_WATCH_MS), confirmedSince: new Date(now - REPAYMENT_WATCH_MS) });
  const transfers = await watcher.poll(addresses);
  const outcomes: ChainCreditOutcome[] = [];
  for (const credit of chainCredits(transfers, key, chain.decimals)) outcomes.push(await creditChainPayment(ctx, credit));
  if (watcher.cursor !== undefined) await writeJobState(ctx.db, CHAIN_CURSOR, watcher.cursor.toString());
  return outcomes;
}
