import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ServiceContext } from './context.js';
import { secretsEqual, sha256 } from './crypto.js';
import { AppError } from './errors.js';
import type { Plan } from './plans.js';

export const SESSION_COOKIE = 'rampart_session';

export interface Principal {
  accountId: string;
  plan: Plan;
  state: 'active' | 'frozen';
  via: 'api_key' | 'session';
  /** accounts.waf_version, read with the credentials at no extra cost. */
  wafVersion: number;
}

/** How often lastUsedAt is refreshed: a key used every second does not write every second. */
const LAST_USED_RESOLUTION_MS = 60_000;

function principal(row: { accountId: string; plan: string; state: string; waf_version: number }, via: Principal['via']): Principal {
  return { accountId: row.accountId, plan: row.plan as Plan, state: row.state as Principal['state'], via, wafVersion: row.waf_version };
}

/**
 * Resolves x-api-key (by SHA-256, through the unique index) or the session cookie to an account,
 * fresh from the database on every request, so a deleted key or a changed account state is seen
 * at once by every control-plane process. Any failure is the same 401.
 */
export async function authenticate(ctx: ServiceContext, request: FastifyRequest): Promise<Principal> {
  const header = request.headers['x-api-key'];
  if (header !== undefined) {
    if (typeof header !== 'string' || header.length > 200) throw new AppError('unauthorized');
    const row = await ctx.db
      .selectFrom('api_keys')
      .innerJoin('accounts', 'accounts.id', 'api_keys.account_id')
      .select(['api_keys.id as keyId', 'api_keys.last_used_at', 'accounts.id as accountId', 'accounts.plan', 'accounts.state', 'accounts.waf_version'])
      .where('api_keys.key_hash', '=', sha256(header))
      .executeTakeFirst();
    if (!row) throw new AppError('unauthorized');
    const now = ctx.now();
    if (!row.last_used_at || now.getTime() - new Date(row.last_used_at).getTime() > LAST_USED_RESOLUTION_MS) {
      await ctx.db.updateTable('api_keys').set({ last_used_at: now }).where('id', '=', row.keyId).execute();
    }
    return principal(row, 'api_key');
  }
  const cookie = request.cookies?.[SESSION_COOKIE];
  if (cookie) {
    const row = await ctx.db
      .selectFrom('sessions')
      .innerJoin('accounts', 'accounts.id', 'sessions.account_id')
      .select(['accounts.id as accountId', 'accounts.plan', 'accounts.state', 'accounts.waf_version'])
      .where('sessions.token_hash', '=', sha256(cookie))
      .where('sessions.expires_at', '>', ctx.now())
      .executeTakeFirst();
    if (row) return principal(row, 'session');
  }
  throw new AppError('unauthorized');
}

export function checkAdmin(adminToken: string | undefined, request: FastifyRequest): void {
  const header = request.headers.authorization;
  const presented = typeof header === 'string' && header.startsWith('Bearer ') ? header.slice(7) : '';
  if (!adminToken || !presented || !secretsEqual(presented, adminToken)) throw new AppError('unauthorized', 'Invalid or missing admin token');
}

export function setSessionCookie(reply: FastifyReply, token: string, expires: Date, secure: boolean): void {
  reply.setCookie(SESSION_COOKIE, token, { httpOnly: true, sameSite: 'strict', path: '/', expires, secure });
}

export function clearSessionCookie(reply: FastifyReply): void {
  reply.clearCookie(SESSION_COOKIE, { path: '/' });
}
