import type { Kysely } from 'kysely';
import type { ServiceContext } from '../context.js';
import { iso } from '../context.js';
import { newId } from '../crypto.js';
import type { DB } from '../db/schema.js';

export const NOTIFICATION_KINDS = ['server_down', 'server_error', 'ssl_expiring', 'proxy_crash', 'proxy_reload_failed', 'account_frozen'] as const;
export type NotificationKind = (typeof NOTIFICATION_KINDS)[number];

/**
 * Notifications a shield server causes (its agent's reports and acks, its disconnects): within
 * one window, an identical one (same server, kind and message) is folded into the first with a
 * count, and at most `perWindow` distinct ones of a kind are kept for a server; the ones past
 * that are counted in one notice of that kind saying they were dropped.
 */
export const SERVER_NOTIFICATION_LIMIT = { perWindow: 10, windowMs: 60_000 } as const;

export type ServerNotifyOutcome = 'created' | 'folded' | 'dropped';

export async function notify(
  ctx: ServiceContext,
  n: { accountId: string; kind: NotificationKind; message: string; serverId?: string | null },
): Promise<void> {
  await ctx.db
    .insertInto('notifications')
    .values({ id: newId(), account_id: n.accountId, kind: n.kind, message: n.message, server_id: n.serverId ?? null, created_at: ctx.now() })
    .execute();
}

const droppedNotice = (kind: NotificationKind) =>
  `More ${kind} notifications from this server were dropped: at most ${SERVER_NOTIFICATION_LIMIT.perWindow} a minute are kept (count: how many were dropped)`;

/**
 * A notification caused by a shield server, under SERVER_NOTIFICATION_LIMIT. Runs in the given
 * transaction when `db` is one (server_down is raised in the one that clears the connection),
 * otherwise in its own; the server's row is locked, so processes sharing the database count
 * the same rows.
 */
export async function notifyFromServer(
  ctx: { db: Kysely<DB>; now(): Date },
  n: { accountId: string; serverId: string; kind: NotificationKind; message: string },
): Promise<ServerNotifyOutcome> {
  if (!ctx.db.isTransaction) return ctx.db.transaction().execute((tx) => notifyFromServer({ ...ctx, db: tx }, n));
  const db = ctx.db;
  const now = ctx.now();
  const since = new Date(now.getTime() - SERVER_NOTIFICATION_LIMIT.windowMs);
  await db.selectFrom('servers').select('id').where('id', '=', n.serverId).forUpdate().executeTakeFirst();
  const fold = async (message: string): Promise<boolean> => {
    const res = await db
      .updateTable('notifications')
      .set((eb) => ({ count: eb('count', '+', 1), updated_at: now }))
      .where('id', '=', (eb) =>
        eb
          .selectFrom('notifications')
          .select('id')
          .where('server_id', '=', n.serverId)
          .where('kind', '=', n.kind)
          .where('message', '=', message)
          .where('created_at', '>', since)
          .orderBy('created_at', 'desc')
          .limit(1),
      )
      .executeTakeFirst();
    return Number(res.numUpdatedRows) > 0;
  };
  const insert = (message: string) =>
    db.insertInto('notifications').values({ id: newId(), account_id: n.accountId, kind: n.kind, message, server_id: n.serverId, created_at: now }).execute();

  if (await fold(n.message)) return 'folded';
  const { recent } = await db
    .selectFrom('notifications')
    .select((eb) => eb.fn.countAll<number>().as('recent'))
    .where('server_id', '=', n.serverId)
    .where('kind', '=', n.kind)
    .where('created_at', '>', since)
    .executeTakeFirstOrThrow();
  if (Number(recent) < SERVER_NOTIFICATION_LIMIT.perWindow) {
    await insert(n.message);
    return 'created';
  }
  const notice = droppedNotice(n.kind);
  if (!(await fold(notice))) await insert(notice);
  return 'dropped';
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
  return rows.map((n) => ({
    id: n.id,
    kind: n.kind,
    message: n.message,
    serverId: n.server_id,
    count: n.count,
    createdAt: iso(n.created_at)!,
    updatedAt: iso(n.updated_at ?? n.created_at)!,
  }));
}

export interface StatusReport {
  kind: 'proxy_crash' | 'proxy_reload_failed' | 'server_error';
  message: string;
}

/**
 * status/report: the agent's own notification. A proxy crash is a server error too (docs/api.md).
 * Returns the notifications dropped by the limit (0, 1 or 2).
 */
export async function recordStatusReport(ctx: ServiceContext, server: { accountId: string; serverId: string }, report: StatusReport): Promise<number> {
  let dropped = 0;
  const kinds: NotificationKind[] = report.kind === 'proxy_crash' ? ['proxy_crash', 'server_error'] : [report.kind];
  for (const kind of kinds) {
    if ((await notifyFromServer(ctx, { ...server, kind, message: report.message })) === 'dropped') dropped++;
  }
  return dropped;
}
