import { sql } from 'kysely';
import type { Tx } from '../db/database.js';
import { AppError, type ErrorCode } from '../errors.js';

type Counted = 'api_keys' | 'servers' | 'domains' | 'waf_rules';

/**
 * Refuses a creation that would pass an account's limit. Callers hold the account row lock
 * (lockAccount) first, so concurrent creations are serialized and the limit holds under races.
 */
export async function enforceLimit(tx: Tx, accountId: string, table: Counted, max: number, error: ErrorCode): Promise<void> {
  const { count } = await tx
    .selectFrom(table)
    .select((eb) => eb.fn.countAll<number>().as('count'))
    .where('account_id', '=', accountId)
    // decommissioned servers do not count
    .$if(table === 'servers', (q) => q.where(sql.ref('status'), '<>', 'decommissioned'))
    .executeTakeFirstOrThrow();
  if (Number(count) >= max) throw new AppError(error);
}

export async function lockAccount(tx: Tx, accountId: string) {
  return tx.selectFrom('accounts').select(['id', 'plan']).where('id', '=', accountId).forUpdate().executeTakeFirst();
}
