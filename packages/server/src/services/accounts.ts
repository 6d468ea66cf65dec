import { credentialsChanged } from '../credential-cache.js';
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
      await tx
        .insertInto('accounts')
        .values({
          id: accountId,
          email: input.email.toLowerCase(),
          password_hash: passwordHash,
          plan: input.plan,
          balance_cents: input.balanceCents,
          state: 'active',
          bot_secret: newSecret(),
          next_charge_at: addMonth(now),
          created_at: now,
        })
        .execute();
      if (apiKey) {
        await tx
          .insertInto('api_keys')
          .values({
            id: newId(),
            account_id: accountId,
            name: 'default',
            key_hash: sha256(apiKey),
            key_prefix: apiKey.slice(0, 12),
            created_at: now,
          })
          .execute();
      }
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw new AppError('email_taken');
    throw err;
  }
  return { accountId, apiKey };
}

export async function getAccount(ctx: ServiceContext, accountId: string) {
  const a = await ctx.db.selectFrom('accounts').selectAll().where('id', '=', accountId).executeTakeFirst();
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


async function lockAccount(tx: Tx, accountId: string) {
  return tx.selectFrom('accounts').selectAll().where('id', '=', accountId).forUpdate().executeTakeFirst();
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
    await tx.updateTable('accounts').set({ state: 'frozen' }).where('id', '=', account.id).execute();
    await tx
      .insertInto('transactions')
      .values({ id: newId(), account_id: account.id, kind: 'charge', amount_cents: price, status: 'failed', created_at: now })
      .execute();
    return { accountId: account.id, charged: false, state: 'frozen', balance: dollars(balance) };
  }
  const due = new Date(account.next_charge_at);
  await tx
    .updateTable('accounts')
    .set({ state: 'active', balance_cents: balance - price, next_charge_at: addMonth(due > now ? due : now) })
    .where('id', '=', account.id)
    .execute();
  await tx
    .insertInto('transactions')
    .values({
      id: newId(),
      account_id: account.id,
      kind: 'charge',
      amount_cents: price,
      status: 'confirmed',
      created_at: now,
      confirmed_at: now,
    })
    .execute();
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
  const due = await ctx.db
    .selectFrom('accounts')
    .select('id')
    .where('state', '=', 'active')
    .where('next_charge_at', '<=', ctx.now())
    .execute();
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
  const row = await ctx.db
    .insertInto('transactions')
    .values({ id: newId(), account_id: accountId, kind: 'deposit', amount_cents: amountCents, status: 'pending', created_at: ctx.now() })
    .returningAll()
    .executeTakeFirstOrThrow();
  return depositView(row);
}

/**
 * Marks a pending deposit confirmed and credits it. A frozen account whose new balance covers its
 * plan's price is charged and active again at once.
 */
export async function confirmDeposit(ctx: ServiceContext, depositId: string, txHash: string | undefined) {
  if (!isUuid(depositId)) throw new AppError('deposit_not_found');
  const result = await ctx.db.transaction().execute(async (tx) => {
    const dep = await tx
      .selectFrom('transactions')
      .selectAll()
      .where('id', '=', depositId)
      .where('kind', '=', 'deposit')
      .forUpdate()
      .executeTakeFirst();
    if (!dep) throw new AppError('deposit_not_found');
    if (dep.status !== 'pending') throw new AppError('deposit_not_pending');
    const account = await lockAccount(tx, dep.account_id);
    if (!account) throw new AppError('account_not_found');
    const now = ctx.now();
    const confirmed = await tx
      .updateTable('transactions')
      .set({ status: 'confirmed', confirmed_at: now, tx_hash: txHash ?? null })
      .where('id', '=', depositId)
      .returningAll()
      .executeTakeFirstOrThrow();
    const balance = Number(account.balance_cents) + Number(dep.amount_cents);
    await tx.updateTable('accounts').set({ balance_cents: balance }).where('id', '=', account.id).execute();
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
  const rows = await ctx.db
    .selectFrom('transactions')
    .selectAll()
    .where('account_id', '=', accountId)
    .orderBy('created_at', 'desc')
    .orderBy('id')
    .limit(500)
    .execute();
  return rows.map((t) => ({ kind: t.kind, ...depositView(t) }));
}

/** The demo account of `rampart up`: Pro plan with a $100 balance, so every feature is open. */
export async function createDemoAccount(ctx: ServiceContext, input: { email: string; password: string }) {
  const r = await createAccount(ctx, { email: input.email, password: input.password, plan: 'pro', balanceCents: 10_000 });
  return { accountId: r.accountId, apiKey: r.apiKey! };
}
