import { ACCOUNT_LIMITS } from '@rampart/protocol';
import { credentialsChanged } from '../credential-cache.js';
import { newApiKey, newId, sha256 } from '../crypto.js';
import type { ServiceContext } from '../context.js';
import { iso, isUuid } from '../context.js';
import { lockAccount } from '../data/accounts.js';
import { deleteApiKey as deleteKeyRow, insertApiKey, listApiKeys as listKeyRows } from '../data/api-keys.js';
import { AppError } from '../errors.js';
import type { Plan } from '../plans.js';
import { enforceLimit } from './limits.js';

export const MAX_API_KEYS = ACCOUNT_LIMITS.apiKeys;

export async function createApiKey(ctx: ServiceContext, accountId: string, name: string) {
  return ctx.db.transaction().execute(async (tx) => {
    const account = await lockAccount(tx, accountId);
    if (!account) throw new AppError('account_not_found');
    if (!ctx.plans[account.plan as Plan].apiKeys) throw new AppError('plan_no_api_keys');
    await enforceLimit(tx, accountId, 'api_keys', MAX_API_KEYS, 'api_key_limit');
    const key = newApiKey();
    const row = await insertApiKey(tx, { id: newId(), account_id: accountId, name, key_hash: sha256(key), key_prefix: key.slice(0, 12), created_at: ctx.now() });
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

export async function deleteApiKey(ctx: ServiceContext, accountId: string, id: string) {
  if (!isUuid(id)) throw new AppError('api_key_not_found');
  if ((await deleteKeyRow(ctx.db, accountId, id)) === 0) throw new AppError('api_key_not_found');
  // Every process forgets the key before this answers (src/credential-cache.ts).
  await credentialsChanged(ctx, { kind: 'key-revoked', keyIds: [id] });
  return { success: true as const };
}
