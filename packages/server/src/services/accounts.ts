import { findAccount, insertAccount } from '../data/accounts.js';
import { insertApiKey } from '../data/api-keys.js';
import { postEntry } from '../data/transactions.js';
import { hashPassword, newApiKey, newBotKeyId, newId, newSecret, sha256 } from '../crypto.js';
import type { ServiceContext } from '../context.js';
import type { Tx } from '../db/database.js';
import { isUniqueViolation } from '../context.js';
import { iso } from '../values.js';
import { AppError } from '../errors.js';
import { dollars, type Plan } from '../plans.js';
import { addMonth } from './billing.js';
import { recordAudit, SYSTEM_ACTOR, type Actor } from './audit.js';

export interface NewAccount {
  email: string;
  password?: string | undefined;
  plan: Plan;
  balanceCents: number;
}

/**
 * Creates an account; on a plan with API keys it also creates a first key and returns it once.
 * `within` runs in the same transaction once the account row exists (an invitation is used
 * there); when it throws, nothing is created.
 */
export async function createAccount(
  ctx: ServiceContext,
  input: NewAccount,
  within?: (tx: Tx, accountId: string) => Promise<void>,
  actor: Actor = SYSTEM_ACTOR,
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
        balance_cents: 0,
        state: 'active',
        bot_secret: newSecret(),
        bot_key_id: newBotKeyId(),
        bot_key_created_at: now,
        next_charge_at: addMonth(now),
        created_at: now,
      });
      // An opening balance is a ledger row like any other (docs/billing.md, "The ledger").
      if (input.balanceCents !== 0) {
        await postEntry(tx, {
          insert: {
            id: newId(),
            account_id: accountId,
            kind: 'adjustment',
            amount_cents: input.balanceCents,
            delta_cents: input.balanceCents,
            status: 'confirmed',
            description: 'Opening balance',
            created_at: now,
            confirmed_at: now,
          },
        });
      }
      await within?.(tx, accountId);
      await recordAudit(tx, ctx, accountId, actor, {
        objectType: 'account',
        objectId: accountId,
        action: 'create',
        after: { email: input.email.toLowerCase(), plan: input.plan, balance: dollars(input.balanceCents), password: passwordHash },
        secrets: ['password'],
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

/** The demo account of `rampart up`: Pro plan with a $100 balance, so every feature is open. */
export async function createDemoAccount(ctx: ServiceContext, input: { email: string; password: string }) {
  const r = await createAccount(ctx, { email: input.email, password: input.password, plan: 'pro', balanceCents: 10_000 });
  return { accountId: r.accountId, apiKey: r.apiKey! };
}
