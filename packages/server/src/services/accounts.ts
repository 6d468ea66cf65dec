import { credentialsChanged } from '../credential-cache.js';
import { accountsDueForCharge, findAccount, freezeAccount, insertAccount, lockAccount, recordCharge, setBalance } from '../data/accounts.js';
import { insertApiKey } from '../data/api-keys.js';
import { confirmTransaction, insertTransaction, latestTransactions, lockDeposit } from '../data/transactions.js';
import type { Tx } from '../db/database.js';
import { hashPassword, newApiKey, newId, newSecret, sha256 } from '../crypto.js';
import type { ServiceContext } from '../context.js';
import { iso, isUniqueViolation, isUuid } from '../context.js';
import { AppError } from '../errors.js';
import { dollars, type Plan } from '../plans.js';

export function addMonth(d: Date): Date {
  const next = new Date(d);
  next.setUTCMonth(next.getUTCMonth() + 1);
  return next;
}

export interface NewAccount {
  email: string;
  password?: string | undefined;
  plan: Plan;
  balanceCents: number;
}

/** Creates an account; on a plan with API keys it also creates a first key and returns it once. */
export async function createAccount(
  ctx: ServiceContext,
  input: NewAccount,
): Promise<{ accountId: string; apiKey: string | null }> {
  const now = ctx.now();
  const accountId = newId();
  const passwordHash = input.password ? await hashPassword(input.password) : null;
  const apiKey = ctx.plans[input.plan].apiKeys ? newApiKey() : null;
  try {
    await ctx.db.transaction().execute(async (tx) => {
      await insertAccount(tx, {
        id: accountId,
        email: input.email.toLowerCase(),
        password_hash: passwordHash,
        plan: input.plan,
        balance_cents: input.balanceCents,
        state: 'active',
        bot_secret: newSecret(),
        next_charge_at: addMonth(now),
        created_at: now,
      });
      if (apiKey) {
        await insertApiKey(tx, { id: newId(), account_id: accountId, name: 'default', key_hash: sha256(apiKey), key_prefix: apiKey.slice(0, 12), created_at: now });
      }
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw new AppError('email_taken');
    throw err;
  }
  return { accountId, apiKey };
}

export async function getAccount(ctx: ServiceContext, accountId: string) {
  const a = await findAccount(ctx.db, accountId);
  if (!a) throw new AppError('account_not_found');
  const plan = a.plan as Plan;
  return {
    id: a.id,
    email: a.email,
    plan,
    price: dollars(ctx.plans[plan].priceCents),
    balance: dollars(Number(a.balance_cents)),
    state: a.state,
    nextChargeAt: iso(a.next_charge_at),
    createdAt: iso(a.created_at),
  };
}


/**
 * The monthly charge of one account, inside the caller's transaction: a balance below the price
 * freezes the account; otherwise the price is debited, the account is active, and the next charge
 * falls one month later.
 */
async function chargeLocked(ctx: ServiceContext, tx: Tx, account: NonNullable<Awaited<ReturnType<typeof lockAccount>>>) {
  const now = ctx.now();
  const price = ctx.plans[account.plan as Plan].priceCents;
  const balance = Number(account.balance_cents);
  if (balance < price) {
    await freezeAccount(tx, account.id);
    await insertTransaction(tx, { id: newId(), account_id: account.id, kind: 'charge', amount_cents: price, status: 'failed', created_at: now });
    return { accountId: account.id, charged: false, state: 'frozen', balance: dollars(balance) };
  }
  const due = new Date(account.next_charge_at);
  await recordCharge(tx, account.id, balance - price, addMonth(due > now ? due : now));
  await insertTransaction(tx, { id: newId(), account_id: account.id, kind: 'charge', amount_cents: price, status: 'confirmed', created_at: now, confirmed_at: now });
  return { accountId: account.id, charged: true, state: 'active', balance: dollars(balance - price) };
}

export type ChargeResult = Awaited<ReturnType<typeof chargeLocked>>;

/** Charges one account now whatever its due date, or every active account whose charge is due. */
export async function runMonthlyCharge(ctx: ServiceContext, accountId?: string): Promise<ChargeResult[]> {
  if (accountId !== undefined) {
    if (!isUuid(accountId)) throw new AppError('account_not_found');
    const { result, changed } = await ctx.db.transaction().execute(async (tx) => {
      const account = await lockAccount(tx, accountId);
      if (!account) throw new AppError('account_not_found');
      const r = await chargeLocked(ctx, tx, account);
      return { result: r, changed: r.state !== account.state };
    });
    if (changed) await credentialsChanged(ctx, { kind: 'account-changed', accountIds: [accountId] });
    return [result];
  }
  const due = await accountsDueForCharge(ctx.db, ctx.now());
  const results: ChargeResult[] = [];
  const frozen: string[] = [];
  for (const { id } of due) {
    const r = await ctx.db.transaction().execute(async (tx) => {
      const account = await lockAccount(tx, id);
      // Re-checked under the lock: another process may have charged it meanwhile.
      if (!account || account.state !== 'active' || new Date(account.next_charge_at) > ctx.now()) return null;
      return chargeLocked(ctx, tx, account);
    });
    if (r) results.push(r);
    if (r?.state === 'frozen') frozen.push(r.accountId);
  }
  // Every process sees the frozen accounts before this answers (src/credential-cache.ts).
  await credentialsChanged(ctx, { kind: 'account-changed', accountIds: frozen });
  return results;
}

function depositView(t: { id: string; amount_cents: unknown; status: string; tx_hash: string | null; created_at: Date | string; confirmed_at: Date | string | null }) {
  return {
    id: t.id,
    amount: dollars(Number(t.amount_cents)),
    status: t.status,
    txHash: t.tx_hash,
    createdAt: iso(t.created_at),
    confirmedAt: iso(t.confirmed_at),
  };
}

export async function createDeposit(ctx: ServiceContext, accountId: string, amountCents: number) {
  const row = await insertTransaction(ctx.db, { id: newId(), account_id: accountId, kind: 'deposit', amount_cents: amountCents, status: 'pending', created_at: ctx.now() });
  return depositView(row);
}

/**
 * Marks a pending deposit confirmed and credits it. A frozen account whose new balance covers its
 * plan's price is charged and active again at once.
 */
export async function confirmDeposit(ctx: ServiceContext, depositId: string, txHash: string | undefined) {
  if (!isUuid(depositId)) throw new AppError('deposit_not_found');
  const result = await ctx.db.transaction().execute(async (tx) => {
    const dep = await lockDeposit(tx, depositId);
    if (!dep) throw new AppError('deposit_not_found');
    if (dep.status !== 'pending') throw new AppError('deposit_not_pending');
    const account = await lockAccount(tx, dep.account_id);
    if (!account) throw new AppError('account_not_found');
    const now = ctx.now();
    const confirmed = await confirmTransaction(tx, depositId, now, txHash ?? null);
    const balance = Number(account.balance_cents) + Number(dep.amount_cents);
    await setBalance(tx, account.id, balance);
    let state = account.state;
    let finalBalance = balance;
    if (account.state === 'frozen' && balance >= ctx.plans[account.plan as Plan].priceCents) {
      const r = await chargeLocked(ctx, tx, { ...account, balance_cents: balance });
      state = r.state;
      if (r.charged) finalBalance = balance - ctx.plans[account.plan as Plan].priceCents;
    }
    return { deposit: depositView(confirmed), account: { id: account.id, state, balance: dollars(finalBalance) }, changed: state !== account.state };
  });
  if (result.changed) await credentialsChanged(ctx, { kind: 'account-changed', accountIds: [result.account.id] });
  return { deposit: result.deposit, account: result.account };
}

export async function listTransactions(ctx: ServiceContext, accountId: string) {
  const rows = await latestTransactions(ctx.db, accountId, 500);
  return rows.map((t) => ({ kind: t.kind, ...depositView(t) }));
}

/** The demo account of `rampart up`: Pro plan with a $100 balance, so every feature is open. */
export async function createDemoAccount(ctx: ServiceContext, input: { email: string; password: string }) {
  const r = await createAccount(ctx, { email: input.email, password: input.password, plan: 'pro', balanceCents: 10_000 });
  return { accountId: r.accountId, apiKey: r.apiKey! };
}
