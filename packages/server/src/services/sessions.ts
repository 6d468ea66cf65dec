import { credentialsChanged } from '../credential-cache.js';
import { newSessionToken, sha256, verifyPassword } from '../crypto.js';
import type { ServiceContext } from '../context.js';
import { findAccountByEmail } from '../data/accounts.js';
import { deleteSession, insertSession } from '../data/sessions.js';
import { AppError } from '../errors.js';
import type { LoginLimiter, LoginOutcome } from '../login-limiter.js';
import { createAccount } from './accounts.js';
import { admitSignup, type SignupMode } from './signup.js';

export const SESSION_DAYS = 30;

async function startSession(ctx: ServiceContext, accountId: string) {
  const token = newSessionToken();
  const now = ctx.now();
  const expires = new Date(now.getTime() + SESSION_DAYS * 86_400_000);
  await insertSession(ctx.db, { token_hash: sha256(token), account_id: accountId, created_at: now, expires_at: expires });
  return { token, expires };
}

/**
 * Self-service sign-up, as far as the operator's RAMPART_SIGNUP allows it (services/signup.ts): a
 * free account with a zero balance, signed in at once.
 */
export async function register(ctx: ServiceContext, input: { email: string; password: string; invitation?: string | undefined }, mode: SignupMode) {
  const { email, password } = input;
  const within = await admitSignup(ctx, mode, email, input.invitation);
  const { accountId } = await createAccount(ctx, { email, password, plan: 'free', balanceCents: 0 }, within, { type: 'user', name: email.toLowerCase(), keyPrefix: null });
  return { accountId, email: email.toLowerCase(), plan: 'free' as const, session: await startSession(ctx, accountId) };
}

export interface LoginGuard {
  limiter: LoginLimiter;
  /** The address the attempt comes from (the socket's, unless the app trusts a proxy). */
  address: string | undefined;
}

/**
 * Signs in with email and password. With a guard, failures are counted per account and per
 * address, and an attempt over a limit is refused (429) before any password is hashed.
 */
export async function login(ctx: ServiceContext, email: string, password: string, guard?: LoginGuard) {
  const end = guard?.limiter.begin(email, guard.address);
  let outcome: LoginOutcome = 'aborted';
  try {
    const account = await findAccountByEmail(ctx.db, email.toLowerCase());
    // verifyPassword does the same work for a missing account, so timing does not reveal which emails exist.
    const ok = await verifyPassword(password, account?.password_hash ?? null);
    if (!account || !ok) {
      outcome = 'failure';
      throw new AppError('invalid_credentials');
    }
    outcome = 'success';
    return { accountId: account.id, email: account.email, plan: account.plan, session: await startSession(ctx, account.id) };
  } finally {
    end?.(outcome);
  }
}

export async function logout(ctx: ServiceContext, token: string | undefined): Promise<void> {
  if (!token) return;
  const tokenHash = sha256(token);
  const ended = await deleteSession(ctx.db, tokenHash);
  // Every process forgets the session before this answers; an unknown cookie publishes nothing.
  if (ended > 0) await credentialsChanged(ctx, { kind: 'session-ended', tokenHashes: [tokenHash] });
}
