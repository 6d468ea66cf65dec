import { newId } from '../crypto.js';
import { insertDeliveries } from '../data/notification-deliveries.js';
import { endpointsOf, ensureEndpoints } from '../data/notification-endpoints.js';
import { notificationSettings } from '../data/notification-settings.js';
import type { Database, Tx } from '../db/database.js';

// Queueing a new notification's deliveries (docs/notifications.md, "Settings and delivery log"),
// in the transaction that stores it; services/notification-delivery.ts attempts them.

export type DeliveryChannel = 'webhook' | 'email';

/** What the log shows of a webhook URL: its origin and path, never its query (it may hold a token). */
export function webhookTarget(url: string): string {
  const u = new URL(url);
  return `${u.origin}${u.pathname}`;
}

/** Whether settings with these kinds deliver this kind (an empty list: every kind). */
export function deliversKind(kinds: readonly string[], kind: string): boolean {
  return kinds.length === 0 || kinds.includes(kind);
}

/**
 * Queues the deliveries of a notification just created, in the caller's transaction: one per
 * channel the account has set whose kinds include this one, due at once; none to a disabled
 * endpoint, nor to an e-mail address not confirmed. Returns how many.
 */
export async function queueDeliveries(db: Database | Tx, n: { id: string; account_id: string; kind: string; created_at: Date | string }): Promise<number> {
  const settings = await notificationSettings(db, n.account_id);
  if (!settings || !deliversKind(settings.kinds, n.kind)) return 0;
  const createdAt = new Date(n.created_at);
  const disabled = new Set((await endpointsOf(db, n.account_id)).filter((e) => e.disabled_at !== null).map((e) => e.channel));
  const channels: { channel: DeliveryChannel; target: string }[] = [
    ...(settings.webhook_url && !disabled.has('webhook') ? [{ channel: 'webhook' as const, target: webhookTarget(settings.webhook_url) }] : []),
    ...(settings.email && settings.email_confirmed_at && !disabled.has('email') ? [{ channel: 'email' as const, target: settings.email }] : []),
  ];
  await ensureEndpoints(
    db,
    n.account_id,
    channels.map((c) => c.channel),
  );
  await insertDeliveries(
    db,
    channels.map((c) => ({
      id: newId(),
      notification_id: n.id,
      account_id: n.account_id,
      channel: c.channel,
      target: c.target,
      status: 'pending',
      attempts: 0,
      next_attempt_at: createdAt,
      created_at: createdAt,
      updated_at: createdAt,
    })),
  );
  return channels.length;
}
