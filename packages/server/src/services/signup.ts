import type { ServiceContext } from '../context.js';
import { iso } from '../values.js';
import { newId, newInvitationToken, sha256 } from '../crypto.js';
import type { Tx } from '../db/database.js';
import { findUsableInvitation, insertInvitation, useInvitation } from '../data/invitations.js';
import { AppError } from '../errors.js';

// Who may create an account through POST /api/auth/register (docs/api.md "Sign-up"): nobody
// (closed: the operator creates accounts), holders of a single-use invitation the operator issued
// (invite), or anyone (open).

export const SIGNUP_MODES = ['closed', 'invite', 'open'] as const;
export type SignupMode = (typeof SIGNUP_MODES)[number];

export const INVITATION_DAYS = { default: 7, max: 90 } as const;

/** RAMPART_SIGNUP's value, or `fallback` when unset; anything else is an error naming the variable. */
export function signupModeFrom(value: string | undefined, fallback: SignupMode): SignupMode {
  if (value === undefined || value === '') return fallback;
  if ((SIGNUP_MODES as readonly string[]).includes(value)) return value as SignupMode;
  throw new Error(`RAMPART_SIGNUP must be one of ${SIGNUP_MODES.join(', ')} (got ${JSON.stringify(value)})`);
}

/** An invitation for one sign-up; its token is shown only here and stored as SHA-256. */
export async function createInvitation(ctx: ServiceContext, input: { email?: string | undefined; expiresInDays?: number | undefined }) {
  const now = ctx.now();
  const token = newInvitationToken();
  const expires = new Date(now.getTime() + (input.expiresInDays ?? INVITATION_DAYS.default) * 86_400_000);
  const row = { id: newId(), token_hash: sha256(token), email: input.email?.toLowerCase() ?? null, created_at: now, expires_at: expires };
  await insertInvitation(ctx.db, row);
  return { id: row.id, invitation: token, email: row.email, expiresAt: iso(expires)! };
}

/**
 * Whether this sign-up may go ahead, checked before the password is hashed. Returns what to run
 * in the account's transaction (invite: use the invitation, once), or throws 403.
 */
export async function admitSignup(ctx: ServiceContext, mode: SignupMode, email: string, invitation: string | undefined): Promise<((tx: Tx, accountId: string) => Promise<void>) | undefined> {
  if (mode === 'open') return undefined;
  if (mode === 'closed') throw new AppError('signup_closed');
  if (invitation === undefined) throw new AppError('invitation_required');
  const found = await findUsableInvitation(ctx.db, sha256(invitation), ctx.now());
  if (!found || (found.email !== null && found.email !== email.toLowerCase())) throw new AppError('invitation_invalid');
  return async (tx, accountId) => {
    if (!(await useInvitation(tx, found.id, accountId, ctx.now()))) throw new AppError('invitation_invalid');
  };
}
