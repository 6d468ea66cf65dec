import type { ServiceContext } from '../context.js';
import { findKeyCredential, touchApiKey } from '../data/api-keys.js';
import { findLiveSession } from '../data/sessions.js';

/**
 * The database reads and writes of authentication (auth.ts resolves credentials through them and
 * caches the answers), on an object so tests can count them: the management API must not pay a
 * round trip for authentication on every request.
 */
export const credentialStore = {
  findKey: (ctx: ServiceContext, keyHash: string) => findKeyCredential(ctx.db, keyHash),
  findSession: (ctx: ServiceContext, tokenHash: string) => findLiveSession(ctx.db, tokenHash, ctx.now()),
  touchKey: (ctx: ServiceContext, keyId: string, now: Date) => touchApiKey(ctx.db, keyId, now),
};
