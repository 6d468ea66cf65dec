import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ServiceContext } from './context.js';
import { credentialCache, credentialCacheUsable, type CachedCredential } from './credential-cache.js';
import { secretsEqual, sha256 } from './crypto.js';
import { credentialStore } from './services/credentials.js';
import { AppError } from './errors.js';
import type { Plan } from './plans.js';
import type { Actor } from './services/audit.js';

export const SESSION_COOKIE = 'rampart_session';

export interface Principal {
  accountId: string;
  plan: Plan;
  state: 'active' | 'frozen';
  via: 'api_key' | 'session';
  /** Who is acting, as the audit log records it (services/audit.ts). */
  actor: Actor;
}

/** How often lastUsedAt is refreshed: a key used every second does not write every second. */
const LAST_USED_RESOLUTION_MS = 60_000;

function principal(c: CachedCredential): Principal {
  return {
    accountId: c.accountId,
    plan: c.plan as Plan,
    state: c.state as Principal['state'],
    via: c.kind === 'key' ? 'api_key' : 'session',
    actor: c.kind === 'key' ? { type: 'api_key', name: c.keyName ?? null, keyPrefix: c.keyPrefix ?? null } : { type: 'user', name: c.email ?? null, keyPrefix: null },
  };
}

const ms = (d: Date | string | null | undefined): number | null => (d == null ? null : new Date(d).getTime());

/**
 * Resolves x-api-key (by SHA-256, through the unique index) or the session cookie to an account.
 * A credential seen recently comes from this process's cache (src/credential-cache.ts), which
 * every process empties of a credential as soon as it is revoked or its account changes state, so
 * a deleted key, an ended session or a frozen account is seen at once everywhere. Any failure is
 * the same 401.
 */
export async function authenticate(ctx: ServiceContext, request: FastifyRequest): Promise<Principal> {
  const cache = credentialCache(ctx);
  const usable = credentialCacheUsable(ctx);
  const header = request.headers['x-api-key'];
  if (header !== undefined) {
    if (typeof header !== 'string' || header.length > 200) throw new AppError('unauthorized');
    const keyHash = sha256(header);
    const now = ctx.now();
    let c = usable ? cache.get(`k:${keyHash}`, now.getTime()) : undefined;
    if (!c) {
      const generation = cache.generation;
      const row = await credentialStore.findKey(ctx, keyHash);
      if (!row) throw new AppError('unauthorized');
      c = { kind: 'key', accountId: row.accountId, plan: row.plan, state: row.state, keyId: row.keyId, keyName: row.keyName, keyPrefix: row.keyPrefix, lastUsedMs: ms(row.last_used_at) };
      if (usable) cache.set(`k:${keyHash}`, c, now.getTime(), generation);
    }
    if (c.lastUsedMs == null || now.getTime() - c.lastUsedMs > LAST_USED_RESOLUTION_MS) {
      c.lastUsedMs = now.getTime();
      await credentialStore.touchKey(ctx, c.keyId!, now);
    }
    return principal(c);
  }
  const cookie = request.cookies?.[SESSION_COOKIE];
  if (cookie) {
    const tokenHash = sha256(cookie);
    const now = ctx.now().getTime();
    let c = usable ? cache.get(`s:${tokenHash}`, now) : undefined;
    if (c && !(now < c.expiresMs!))
      c = undefined; // expired while cached
    else if (!c) {
      const generation = cache.generation;
      const row = await credentialStore.findSession(ctx, tokenHash);
      if (row) {
        c = { kind: 'session', email: row.email, accountId: row.accountId, plan: row.plan, state: row.state, tokenHash, expiresMs: ms(row.expires_at)! };
        if (usable) cache.set(`s:${tokenHash}`, c, now, generation);
      }
    }
    if (c) return principal(c);
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
