import { countOwned, type Counted } from '../data/accounts.js';
import type { Tx } from '../db/database.js';
import { AppError, type ErrorCode } from '../errors.js';

/**
 * Refuses a creation that would pass an account's limit. Callers hold the account row lock
 * (lockAccount) first, so concurrent creations are serialized and the limit holds under races.
 */
export async function enforceLimit(tx: Tx, accountId: string, table: Counted, max: number, error: ErrorCode, message?: string): Promise<void> {
  if ((await countOwned(tx, table, accountId)) >= max) throw new AppError(error, message);
}
