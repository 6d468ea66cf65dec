import { ACCOUNT_LIMITS } from '@rampart/protocol';
import { credentialsChanged } from '../credential-cache.js';
import { newApiKey, newId, sha256 } from '../crypto.js';
import type { ServiceContext } from '../context.js';
import { isUuid, iso } from '../values.js';
import { lockAccount } from '../data/accounts.js';
import { deleteApiKey as deleteKeyRow, insertApiKey, listApiKeys as listKeyRows } from '../data/api-keys.js';
import { AppError } from '../errors.js';
import type { Plan } from '../plans.js';
import { enforceLimit } from './limits.js';
import { recordAudit, SYSTEM_ACTOR, type Actor } from './audit.js';

export const MAX_API_KEYS = ACCOUNT_LIMITS.apiKeys;

export async function createApiKey(ctx: ServiceContext, accountId: string, name: string, actor: Actor = SYSTEM_ACTOR) {
  return ctx.db.transaction().execute(async (tx) => {
    const account = await lockAccount(tx, accountId);
    if (!account) throw new AppError('account_not_found');
    if (!ctx.plans[account.plan as Plan].apiKeys) throw new AppError('plan_no_api_keys');
    await enforceLimit(tx, accountId, 'api_keys', MAX_API_KEYS, 'api_key_limit');
    const key = newApiKey();
    const row = await insertApiKey(tx, { id: newId(), account_id: accountId, name, key_hash: sha256(key), key_prefix: key.slice(0, 12), created_at: ctx.now() });
    await recordAudit(tx, ctx, accountId, actor, { objectType: 'api_key', objectId: row.id, action: 'create', after: { name: row.name, keyPrefix: row.key_prefix, key }, secrets: ['key'] });
    return { id: row.id, name: row.name, key, key_prefix: row.key_prefix, created_at: iso(row.created_at)! };
  });
}

export async function listApiKeys(ctx: ServiceContext, accountId: string) {
  const rows = await listKeyRows(ctx.db, accountId);
  return rows.map((r) => ({
    id: r.id,
    name: r.name,
    keyPrefix: r.key_prefix,
    lastUsedAt: iso(r.last_used_at),
    createdAt: iso(r.created_at)!,
  }));
}

export async function deleteApiKey(ctx: ServiceContext, accountId: string, id: string, actor: Actor = SYSTEM_ACTOR) {
  if (!isUuid(id)) throw new AppError('api_key_not_found');
  await ctx.db.transaction().execute(async (tx) => {
    const gone = await deleteKeyRow(tx, accountId, id);
    if (!gone) throw new AppError('api_key_not_found');
    await recordAudit(tx, ctx, accountId, actor, { objectType: 'api_key', objectId: id, action: 'delete', before: { name: gone.name, keyPrefix: gone.key_prefix } });
  });
  // Every process forgets the key before this answers (src/credential-cache.ts).
  await credentialsChanged(ctx, { kind: 'key-revoked', keyIds: [id] });
  return { success: true as const };
}
