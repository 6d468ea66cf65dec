import type { ServiceContext } from '../context.js';
import { iso } from '../context.js';
import { newId } from '../crypto.js';
import { insertNotification, latestNotifications } from '../data/notifications.js';
import type { Database } from '../db/database.js';
import { agentChannelStore, type AgentChannelStore } from './agent-channel.js';

export const NOTIFICATION_KINDS = [
  'server_down',
  'server_recovered',
  'server_error',
  'ssl_expiring',
  'proxy_crash',
  'proxy_reload_failed',
  'account_frozen',
  'account_active',
  'deposit_confirmed',
] as const;
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
  n: { accountId: string; kind: NotificationKind; message: string; serverId?: string | null; domainId?: string | null },
): Promise<void> {
  await insertNotification(ctx.db, {
    id: newId(),
    account_id: n.accountId,
    kind: n.kind,
    message: n.message,
    server_id: n.serverId ?? null,
    domain_id: n.domainId ?? null,
    created_at: ctx.now(),
  });
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
  ctx: { db: Database; now(): Date },
  n: { accountId: string; serverId: string; kind: NotificationKind; message: string },
  store: AgentChannelStore = agentChannelStore,
): Promise<ServerNotifyOutcome> {
  if (!ctx.db.isTransaction) return ctx.db.transaction().execute((tx) => notifyFromServer({ ...ctx, db: tx }, n, store));
  const db = ctx.db;
  const now = ctx.now();
  const window = { serverId: n.serverId, kind: n.kind, since: new Date(now.getTime() - SERVER_NOTIFICATION_LIMIT.windowMs) };
  await store.lockServer(db, n.serverId);
  const insert = (message: string) =>
    store.insertNotification(db, { id: newId(), account_id: n.accountId, kind: n.kind, message, server_id: n.serverId, created_at: now });

  if (await store.foldNotification(db, window, n.message, now)) return 'folded';
  if ((await store.countNotifications(db, window)) < SERVER_NOTIFICATION_LIMIT.perWindow) {
    await insert(n.message);
    return 'created';
  }
  const notice = droppedNotice(n.kind);
  if (!(await store.foldNotification(db, window, notice, now))) await insert(notice);
  return 'dropped';
}

export async function listNotifications(ctx: ServiceContext, accountId: string) {
  const rows = await latestNotifications(ctx.db, accountId, 200);
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
export async function recordStatusReport(
  ctx: ServiceContext,
  server: { accountId: string; serverId: string },
  report: StatusReport,
  store: AgentChannelStore = agentChannelStore,
): Promise<number> {
  let dropped = 0;
  const kinds: NotificationKind[] = report.kind === 'proxy_crash' ? ['proxy_crash', 'server_error'] : [report.kind];
  for (const kind of kinds) {
    if ((await notifyFromServer(ctx, { ...server, kind, message: report.message }, store)) === 'dropped') dropped++;
  }
  return dropped;
}
