import type { Database, Tx } from '../db/database.js';

// A payment processor's webhook events (POST /api/billing/webhook), each applied once.

/**
 * Records the event unless it was recorded before: true the first time. In the transaction that
 * applies it, so an event whose application fails is not recorded and its retry is applied.
 */
export async function recordPaymentEvent(db: Database | Tx, row: { id: string; deposit_id: string | null; received_at: Date }): Promise<boolean> {
  const r = await db
    .insertInto('payment_events')
    .values(row)
    .onConflict((oc) => oc.column('id').doNothing())
    .returning('id')
    .executeTakeFirst();
  return r !== undefined;
}
