import { BOT_COOKIE_TTL_SECONDS } from '@rampart/protocol';
import type { ServiceContext } from '../context.js';
import { iso } from '../values.js';
import { newBotKeyId, newSecret } from '../crypto.js';
import { accountsWithOldBotKeys, bumpWafVersion, lockAccount, retireBotKeys, rotateBotKey } from '../data/accounts.js';
import { AppError } from '../errors.js';
import { recordAudit, SYSTEM_ACTOR, type Actor } from './audit.js';
import { bumpForChange } from './rollouts.js';

/**
 * The account's bot protection keys (docs/bots.md): the current key signs challenges and pass
 * cookies on every shield server of the account; a rotation makes a new one current and keeps the
 * old one accepted for one cookie lifetime, so nobody who passed is challenged again by it.
 */

/** Default age at which the scheduled job rotates a key: 7 days. */
export const BOT_KEY_MAX_AGE_DEFAULT = 7 * 86_400;
// At least one cookie lifetime: a scheduled rotation never retires a key whose cookies still live.
const BOT_KEY_MAX_AGE_MIN = BOT_COOKIE_TTL_SECONDS;
const BOT_KEY_MAX_AGE_MAX = 365 * 86_400;
/** Accounts rotated per job run: a backlog is worked through over the following runs. */
const ROTATIONS_PER_RUN = 500;

/** RAMPART_BOT_KEY_MAX_AGE: seconds from a day (one cookie lifetime) to a year; the default when unset or blank. */
export function botKeyMaxAgeFromEnv(raw: string | undefined): number {
  if (raw === undefined || raw.trim() === '') return BOT_KEY_MAX_AGE_DEFAULT;
  const seconds = Number(raw);
  if (!Number.isInteger(seconds) || seconds < BOT_KEY_MAX_AGE_MIN || seconds > BOT_KEY_MAX_AGE_MAX) {
    throw new Error(`RAMPART_BOT_KEY_MAX_AGE must be a whole number of seconds from ${BOT_KEY_MAX_AGE_MIN} to ${BOT_KEY_MAX_AGE_MAX}, not ${JSON.stringify(raw)}`);
  }
  return seconds;
}

export interface BotKeyRotation {
  key_id: string;
  rotated_at: string;
  previous_key_id: string | null;
  previous_valid_until: string | null;
}

/** Rotates the account's key now and pushes the new pair to all its shield servers. */
export async function rotateBotSecret(ctx: ServiceContext, accountId: string, actor: Actor = SYSTEM_ACTOR): Promise<BotKeyRotation> {
  return (await rotate(ctx, accountId, undefined, actor))!;
}

/**
 * The rotation; with `dueBefore` (the job), only if the current key, read under the account's
 * lock, still began signing before then: a rotation that committed since the job listed the
 * account (by hand, or another run) is not rotated again, which would drop the key the cookies
 * out there were signed with. Null when skipped.
 */
async function rotate(ctx: ServiceContext, accountId: string, dueBefore?: Date, actor: Actor = SYSTEM_ACTOR): Promise<BotKeyRotation | null> {
  const now = ctx.now();
  const done = await ctx.db.transaction().execute(async (tx) => {
    const account = await lockAccount(tx, accountId);
    if (!account) throw new AppError('unauthorized');
    if (dueBefore && !(new Date(account.bot_key_created_at).getTime() < dueBefore.getTime())) return null;
    const row = await rotateBotKey(tx, accountId, { id: newBotKeyId(), secret: newSecret() }, now, new Date(now.getTime() + BOT_COOKIE_TTL_SECONDS * 1000));
    await bumpWafVersion(tx, accountId);
    await recordAudit(tx, ctx, accountId, actor, {
      objectType: 'waf_settings',
      objectId: null,
      action: 'rotate_bot_key',
      before: { botKeyId: account.bot_key_id },
      after: { botKeyId: row.bot_key_id },
    });
    return { row, touched: await bumpForChange(tx, accountId) };
  });
  if (!done) return null;
  const { row, touched } = done;
  ctx.serversChanged(touched);
  return {
    key_id: row.bot_key_id,
    rotated_at: iso(row.bot_key_created_at)!,
    previous_key_id: row.bot_prev_key_id,
    previous_valid_until: iso(row.bot_prev_until),
  };
}

/**
 * The scheduled part: rotates every key older than maxAgeSeconds, and retires previous keys
 * whose cookie lifetime has passed (their servers get a snapshot without them).
 */
export async function runBotKeyJob(ctx: ServiceContext, maxAgeSeconds: number): Promise<{ rotated: number; retired: number }> {
  const now = ctx.now();
  const dueBefore = new Date(now.getTime() - maxAgeSeconds * 1000);
  const due = await accountsWithOldBotKeys(ctx.db, dueBefore, ROTATIONS_PER_RUN);
  let rotated = 0;
  for (const accountId of due) if (await rotate(ctx, accountId, dueBefore)) rotated++;
  const retired = await ctx.db.transaction().execute(async (tx) => {
    const accounts = await retireBotKeys(tx, now);
    const touched: string[] = [];
    for (const accountId of accounts) touched.push(...(await bumpForChange(tx, accountId)));
    return { accounts, touched };
  });
  ctx.serversChanged(retired.touched);
  return { rotated, retired: retired.accounts.length };
}
