import type { ServiceContext } from '../context.js';
import { iso } from '../context.js';
import { newId } from '../crypto.js';

export const NOTIFICATION_KINDS = ['server_down', 'server_error', 'ssl_expiring', 'proxy_crash', 'proxy_reload_failed', 'account_frozen'] as const;
export type NotificationKind = (typeof NOTIFICATION_KINDS)[number];

export async function notify(
  ctx: ServiceContext,
  n: { accountId: string; kind: NotificationKind; message: string; serverId?: string | null },
): Promise<void> {
  await ctx.db
    .insertInto('notifications')
    .values({ id: newId(), account_id: n.accountId, kind: n.kind, message: n.message, server_id: n.serverId ?? null, created_at: ctx.now() })
    .execute();
}

export async function listNotifications(ctx: ServiceContext, accountId: string) {
  const rows = await ctx.db
    .selectFrom('notifications')
    .selectAll()
    .where('account_id', '=', accountId)
    .orderBy('created_at', 'desc')
    .orderBy('id')
    .limit(200)
    .execute();
  return rows.map((n) => ({ id: n.id, kind: n.kind, message: n.message, serverId: n.server_id, createdAt: iso(n.created_at)! }));
}
