import { sql, type Updateable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { NotificationEndpointsTable } from '../db/schema.js';

// The notification_endpoints table: one row per account and channel (its webhook, its e-mail
// address) with the endpoint's turn (busy_until, last_turn) and its circuit breaker.

/** Makes sure the account has a row for each of these channels. */
export async function ensureEndpoints(db: Database | Tx, accountId: string, channels: readonly string[]): Promise<void> {
  if (channels.length === 0) return;
  await db
    .insertInto('notification_endpoints')
    .values(channels.map((channel) => ({ account_id: accountId, channel })))
    .onConflict((oc) => oc.columns(['account_id', 'channel']).doNothing())
    .execute();
}

/** The account's endpoint rows. */
export function endpointsOf(db: Database | Tx, accountId: string) {
  return db.selectFrom('notification_endpoints').selectAll().where('account_id', '=', accountId).execute();
}

export async function updateEndpoint(db: Database | Tx, accountId: string, channel: string, set: Updateable<NotificationEndpointsTable>): Promise<void> {
  await db.updateTable('notification_endpoints').set(set).where('account_id', '=', accountId).where('channel', '=', channel).execute();
}

/**
 * Claims the next attempt to make at `now`, in the caller's transaction: among the endpoints that
 * are free (no attempt under way), not paused and not disabled, with a due delivery, the one
 * served least recently; then that endpoint's oldest due delivery. Both move to `leaseUntil` (the
 * endpoint is busy, the delivery is not due) so that no other run takes them meanwhile; rows
 * another run is claiming are skipped, not waited for. One endpoint never has two attempts
 * under way, and a backlog waits its turn behind every other account's endpoint.
 */
export async function claimNextAttempt(tx: Tx, now: Date, leaseUntil: Date): Promise<{ id: string; account_id: string; channel: string } | undefined> {
  const endpoint = await tx
    .selectFrom('notification_endpoints as e')
    .select(['e.account_id', 'e.channel'])
    .where((eb) => eb.or([eb('e.busy_until', 'is', null), eb('e.busy_until', '<=', now)]))
    .where((eb) => eb.or([eb('e.paused_until', 'is', null), eb('e.paused_until', '<=', now)]))
    .where('e.disabled_at', 'is', null)
    .where((eb) =>
      eb.exists(
        eb
          .selectFrom('notification_deliveries as d')
          .select(sql`1`.as('one'))
          .whereRef('d.account_id', '=', 'e.account_id')
          .whereRef('d.channel', '=', 'e.channel')
          .where('d.status', '=', 'pending')
          .where('d.next_attempt_at', '<=', now),
      ),
    )
    .orderBy('e.last_turn')
    .limit(1)
    .forUpdate()
    .skipLocked()
    .executeTakeFirst();
  if (!endpoint) return undefined;
  const delivery = await tx
    .updateTable('notification_deliveries')
    .set({ next_attempt_at: leaseUntil })
    .where('id', 'in', (eb) =>
      eb
        .selectFrom('notification_deliveries')
        .select('id')
        .where('account_id', '=', endpoint.account_id)
        .where('channel', '=', endpoint.channel)
        .where('status', '=', 'pending')
        .where('next_attempt_at', '<=', now)
        .orderBy('next_attempt_at')
        .orderBy('created_at')
        .limit(1)
        .forUpdate()
        .skipLocked(),
    )
    .returning(['id', 'account_id', 'channel'])
    .executeTakeFirst();
  if (!delivery) return undefined;
  await tx
    .updateTable('notification_endpoints')
    .set({ busy_until: leaseUntil, last_turn: sql<string>`nextval('notification_endpoint_turns')` })
    .where('account_id', '=', endpoint.account_id)
    .where('channel', '=', endpoint.channel)
    .execute();
  return delivery;
}

/** Gives up the endpoint's pending deliveries (all, or those queued before `queuedBefore`), saying why. */
export async function giveUpPendingOf(db: Database | Tx, endpoint: { accountId: string; channel: string }, now: Date, error: string, queuedBefore?: Date): Promise<number> {
  const rows = await db
    .updateTable('notification_deliveries')
    .set({ status: 'given_up', next_attempt_at: null, last_error: error, updated_at: now })
    .where('account_id', '=', endpoint.accountId)
    .where('channel', '=', endpoint.channel)
    .where('status', '=', 'pending')
    .$if(queuedBefore !== undefined, (q) => q.where('created_at', '<=', queuedBefore!))
    .returning('id')
    .execute();
  return rows.length;
}
