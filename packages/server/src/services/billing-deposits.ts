// Billing: deposits (docs/billing.md, "Deposits"). Created a few open per account, each with its
// own address when on-chain deposits are configured, expiring; confirmed off-chain (the operator
// API, the payment webhook: settled with what the caller says arrived) or on-chain (the named
// transaction's transfers, read from the chain and credited as the chain watcher does); and the
// payment processor's webhook: its signature and its events.
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { ServiceContext } from '../context.js';
import { isUuid } from '../values.js';
import { newId } from '../crypto.js';
import { lockAccount } from '../data/accounts.js';
import { recordPaymentEvent } from '../data/payment-events.js';
import { expireDeposits, findCredit, findDeposit, insertTransaction, lockDeposit, nextDepositAddressIndex, openDepositCount, type PaymentKey, type TransactionRow } from '../data/transactions.js';
import type { Tx } from '../db/database.js';
import { AppError, invalidField } from '../errors.js';
import { dollars, money } from '../plans.js';
import { OPERATOR_ACTOR, recordAudit, SYSTEM_ACTOR, type Actor } from './audit.js';
import { transactionView } from './billing.js';
import { chainNetwork, creditTransfer, transfersToDeposit } from './billing-chain.js';
import { creditDeposit, runCredit, type CreditResult } from './billing-credit.js';

// ---------------------------------------------------------------------------------------------
// Deposits

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
  // Loaded with a chain only, not with this module: it brings viem (chain/config.ts says why).
  const depositAddress = chain ? (await import('../chain/addresses.js')).depositAddress : undefined;
  const row = await ctx.db.transaction().execute(async (tx) => {
    if (!(await lockAccount(tx, accountId))) throw new AppError('account_not_found');
    const now = ctx.now();
    if ((await openDepositCount(tx, accountId, now)) >= MAX_OPEN_DEPOSITS) throw new AppError('deposit_limit');
    const base = { id: newId(), account_id: accountId, kind: 'deposit', amount_cents: amountCents, status: 'pending', created_at: now, expires_at: new Date(now.getTime() + DEPOSIT_TTL_MS) };
    await recordAudit(tx, ctx, accountId, actor, { objectType: 'deposit', objectId: base.id, action: 'create', after: { amount: dollars(amountCents), status: 'pending' } });
    if (!chain || network === undefined || !depositAddress) return insertTransaction(tx, base);
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
// Confirmations

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

/** The operator's confirmation (POST /admin/deposits/:id/confirm). */
export async function confirmDepositByOperator(ctx: ServiceContext, depositId: string, o: { txHash?: string | undefined; logIndex?: number | undefined }): Promise<CreditResult> {
  const r = await confirmDeposit(ctx, depositId, { ...o, actor: OPERATOR_ACTOR });
  if ('duplicate' in r) throw new AppError('deposit_not_pending'); // no event id: never a duplicate
  return r;
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
