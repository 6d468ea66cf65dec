import { HOST_PROBLEM, isHostProblem } from '@rampart/protocol';
import type { LivePublisher } from '../bus.js';
import type { DeliveryContext, ServiceContext } from '../context.js';
import { isUuid, iso } from '../values.js';
import { newId } from '../crypto.js';
import { findNotification, latestNotifications, markNotificationsRead, notificationCursor } from '../data/notifications.js';
import type { Database } from '../db/database.js';
import { invalidField } from '../errors.js';
import { money, planName } from '../plans.js';
import { agentChannelStore, type AgentChannelStore } from './agent-channel.js';
import { listPage, type PageParams } from './paging.js';

export const NOTIFICATION_KINDS = [
  'server_down',
  'server_recovered',
  'server_error',
  'ssl_expiring',
  'ssl_failed',
  'origin_down',
  'origin_up',
  'proxy_crash',
  'proxy_reload_failed',
  'account_frozen',
  'account_active',
  'deposit_confirmed',
  'delivery_disabled',
  'rollout_halted',
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

/** What raising a notification needs: storage, the clock, delivery to kick, and the live streams. */
export interface NotifyContext {
  db: Database;
  now(): Date;
  delivery?: DeliveryContext | undefined;
  live?: LivePublisher | undefined;
}

/**
 * Raises a notification: the row and its deliveries (one per channel of the account's
 * notification settings that takes this kind), in the caller's transaction when `db` is one,
 * otherwise in one of its own. Write the message with notificationMessages.
 */
export async function notify(ctx: NotifyContext, n: { accountId: string; kind: NotificationKind; message: string; serverId?: string | null; domainId?: string | null }): Promise<void> {
  if (!ctx.db.isTransaction) return ctx.db.transaction().execute((tx) => notify({ ...ctx, db: tx }, n));
  const row = {
    id: newId(),
    account_id: n.accountId,
    kind: n.kind,
    message: n.message,
    server_id: n.serverId ?? null,
    domain_id: n.domainId ?? null,
    created_at: ctx.now(),
  };
  await storeNew(ctx, row);
}

/** Stores a new notification with its deliveries (in ctx.db, a transaction), and has them delivered soon. */
async function storeNew(
  ctx: NotifyContext,
  row: Parameters<AgentChannelStore['insertNotification']>[1] & { id: string; account_id: string; kind: string; created_at: Date },
  store: Pick<AgentChannelStore, 'insertNotification' | 'queueDeliveries'> = agentChannelStore,
): Promise<void> {
  await store.insertNotification(ctx.db, row);
  if ((await store.queueDeliveries(ctx.db, row)) > 0) ctx.delivery?.queued();
  await ctx.live?.(ctx.db, { kind: 'live-notification', accountId: row.account_id, id: row.id });
}

/**
 * A notification caused by a shield server, under SERVER_NOTIFICATION_LIMIT. Runs in the given
 * transaction when `db` is one (server_down is raised in the one that clears the connection),
 * otherwise in its own; the server's row is locked, so processes sharing the database count
 * the same rows.
 */
export async function notifyFromServer(
  ctx: NotifyContext,
  n: { accountId: string; serverId: string; kind: NotificationKind; message: string },
  store: AgentChannelStore = agentChannelStore,
): Promise<ServerNotifyOutcome> {
  if (!ctx.db.isTransaction) return ctx.db.transaction().execute((tx) => notifyFromServer({ ...ctx, db: tx }, n, store));
  const db = ctx.db;
  const now = ctx.now();
  const window = { serverId: n.serverId, kind: n.kind, since: new Date(now.getTime() - SERVER_NOTIFICATION_LIMIT.windowMs) };
  await store.lockServer(db, n.serverId);
  // A new row is delivered; an occurrence folded into one is not delivered again.
  const insert = (message: string) => storeNew(ctx, { id: newId(), account_id: n.accountId, kind: n.kind, message, server_id: n.serverId, created_at: now }, store);

  if (await store.foldNotification(db, window, n.message, now)) return 'folded';
  if ((await store.countNotifications(db, window)) < SERVER_NOTIFICATION_LIMIT.perWindow) {
    await insert(n.message);
    return 'created';
  }
  const notice = notificationMessages.dropped(n.kind);
  if (!(await store.foldNotification(db, window, notice, now))) await insert(notice);
  return 'dropped';
}

/** A stored notification as GET /api/notifications (and the live stream) shows it. */
const notificationView = (n: Awaited<ReturnType<typeof latestNotifications>>[number]) => ({
  id: n.id,
  kind: n.kind,
  message: n.message,
  serverId: n.server_id,
  domainId: n.domain_id,
  count: n.count,
  read: n.read_at !== null,
  createdAt: iso(n.created_at)!,
  updatedAt: iso(n.updated_at ?? n.created_at)!,
});

export async function listNotifications(ctx: ServiceContext, accountId: string, query: PageParams = {}) {
  return listPage(
    query,
    (id) => notificationCursor(ctx.db, accountId, id),
    (limit, before) => latestNotifications(ctx.db, accountId, limit, before),
    notificationView,
  );
}

/** One of the account's notifications as GET /api/notifications shows it (the live stream's), or undefined. */
export async function notificationOfAccount(db: Database, accountId: string, id: string) {
  if (!isUuid(id)) return undefined;
  const row = await findNotification(db, accountId, id);
  return row && notificationView(row);
}

/** At most this many ids in one POST /api/notifications/read. */
export const MARK_READ_MAX = 200;

/**
 * Marks the account's notifications with these ids read; ids of other accounts' notifications, or
 * of none, are ignored. Returns how many were marked (those already read are not counted).
 */
export async function markRead(ctx: ServiceContext, accountId: string, ids: readonly string[]): Promise<{ marked: number }> {
  if (ids.length > MARK_READ_MAX) throw invalidField('ids', `must have at most ${MARK_READ_MAX} ids`);
  const bad = ids.findIndex((id) => !isUuid(id));
  if (bad >= 0) throw invalidField(`ids[${bad}]`, 'must be a notification id (a UUID)');
  const unique = [...new Set(ids.map((id) => id.toLowerCase()))];
  return { marked: await markNotificationsRead(ctx.db, accountId, unique, ctx.now()) };
}

export interface StatusReport {
  kind: 'proxy_crash' | 'proxy_reload_failed' | 'server_error' | 'origin_down' | 'origin_up';
  message: string;
}

/**
 * status/report: the agent's own notification, told with the server's name and what to do: one
 * notification of the kind reported. Returns the notifications dropped by the limit (0 or 1).
 */
export async function recordStatusReport(ctx: ServiceContext, server: { accountId: string; serverId: string }, report: StatusReport, store: AgentChannelStore = agentChannelStore): Promise<number> {
  const name = (await store.findServer(ctx.db, server.accountId, server.serverId))?.name ?? server.serverId;
  let dropped = 0;
  // One report, one notification, of the kind the agent said (issue 24: a crash is not raised twice).
  const message = notificationMessages.fromAgent(report.kind, name, report.message);
  if ((await notifyFromServer(ctx, { ...server, kind: report.kind, message }, store)) === 'dropped') dropped++;
  return dropped;
}

/** The longest name a message shows; a longer one is cut, with `…`. */
export const NAME_MAX_IN_MESSAGE = 40;
/** Line breaks, control and formatting characters (bidirectional overrides among them), quotes and backslashes. */
const NAME_ESCAPED = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Co}\p{Cn}"\\]/u;

/**
 * A name an account chose (a server's, a domain's) as a message shows it: in double quotes, cut
 * to NAME_MAX_IN_MESSAGE characters, and with every character that could hide or rearrange the
 * text around it escaped (`\"`, `\\`, `\u{202e}`), so a name reads as a name and never as our
 * words. Subjects of e-mails carry no names at all (src/delivery/email.ts).
 */
export function quotedName(name: string): string {
  const chars = [...name.trim()];
  const cut = chars.length > NAME_MAX_IN_MESSAGE;
  const shown = (cut ? chars.slice(0, NAME_MAX_IN_MESSAGE - 1) : chars).map((ch) => (!NAME_ESCAPED.test(ch) ? ch : ch === '"' || ch === '\\' ? `\\${ch}` : `\\u{${ch.codePointAt(0)!.toString(16)}}`));
  return `"${shown.join('')}${cut ? '…' : ''}"`;
}

/** An agent's text as the middle of a sentence: trimmed, without a final full stop. */
const clause = (text: string) => text.trim().replace(/[.\s]+$/, '');

/** What to do, per kind: the end of each message (docs/notifications.md, "Kinds"). */
export const NOTIFICATION_ADVICE: Record<NotificationKind, string> = {
  server_down: 'Check that the server is up and that its agent runs and can reach the control plane; configuration changes reach the server once its agent is back.',
  server_recovered: 'Nothing to do.',
  server_error: "Check the server's HAProxy and the agent's log on it; if HAProxy's messages point to a change, correct it and save it again.",
  ssl_expiring: "Check that the domain resolves to its shield servers and that port 80 reaches them; the domain's sslError, or the agent's log on the server, says why renewal failed.",
  ssl_failed:
    "Check that the domain's DNS records point to its shield servers and that port 80 reaches them from the Internet; the server retries by itself, and the domain list shows the certificate's state.",
  origin_down:
    'Check that the origin runs and that the shield server can reach it at that address and port (its firewall, the origin\'s own health at "/"); the shield server sends visitors to the domain\'s other origins meanwhile.',
  origin_up: 'Nothing to do.',
  proxy_crash: "Nothing to do if it happened once; if it happens again, look at the server's HAProxy logs, memory and disk.",
  proxy_reload_failed: "The server serves its previous configuration, without the latest change: correct the change HAProxy's messages point to and save it again.",
  account_frozen: 'Make a deposit: once it is confirmed and covers the price, the account is charged and active again.',
  account_active: 'Nothing to do.',
  deposit_confirmed: 'Nothing to do.',
  delivery_disabled: 'Make sure the receiver works, then save the channel again in the notification settings (PUT /api/settings/notifications) to turn it back on.',
  rollout_halted:
    'The canaries are back on the last good revision and the other servers never received the change: correct or undo the change and save again, or resume the rollout (POST /api/rollouts/{id}/resume) if the signal was expected.',
};

/**
 * Every notification's message: what happened, then what to do. Whoever raises a notification
 * writes its message with one of these, e.g.
 * `notify(ctx, { accountId, kind: 'account_frozen', message: notificationMessages.accountFrozen('pro', 2900, 1250) })`.
 * Money is in cents.
 */
export const notificationMessages = {
  /** server_down: the server's agent lost its connection. */
  serverDown: (serverName: string) => `Shield server ${quotedName(serverName)} disconnected from the control plane. ${NOTIFICATION_ADVICE.server_down}`,
  /** server_down: the agent reports that its HAProxy is not serving (its heartbeat, or the health cycle reading it). */
  proxyNotServing: (serverName: string) =>
    `Shield server ${quotedName(serverName)} is connected but its agent reports that HAProxy is not serving. The agent restarts HAProxy on its last-known-good configuration; if that keeps failing, look at the agent's log and HAProxy on the server.`,
  /** server_recovered: a server that was down serves again; `detail` says how it was seen (e.g. "its agent reconnected"). */
  serverRecovered: (serverName: string, detail?: string) => `Shield server ${quotedName(serverName)} is back${detail ? ` (${clause(detail)})` : ''}. ${NOTIFICATION_ADVICE.server_recovered}`,
  /** server_error: the agent refused or failed a configuration update (its ack's errors, joined). */
  configFailed: (revision: number, detail: string) =>
    `Configuration update to revision ${revision} failed on this shield server; it keeps running its previous configuration. ` +
    `Correct the change HAProxy's messages point to and save it again. HAProxy said: ${detail}`,
  /**
   * server_error: the agent could not apply a revision because of its host (a port taken, a
   * permission: its errors start with HOST_PROBLEM), which no change to the configuration fixes.
   */
  hostProblem: (revision: number, detail: string) =>
    `Shield server could not apply revision ${revision} because of its host, not the configuration: ${clause(detail)}. ` +
    'Nothing in the configuration needs to change: once the host is fixed, the agent applies the latest revision by itself.',
  /** proxy_crash, proxy_reload_failed, server_error reported by a server's agent, its text in the middle. */
  fromAgent: (kind: StatusReport['kind'], serverName: string, agentMessage: string) =>
    isHostProblem(agentMessage)
      ? `Shield server ${quotedName(serverName)}: ${clause(agentMessage.slice(HOST_PROBLEM.length))}. This is a problem of the server's host, not of the configuration.`
      : `Shield server ${quotedName(serverName)}: ${clause(agentMessage)}. ${NOTIFICATION_ADVICE[kind]}`,
  /** ssl_expiring: the certificate of `domain` expires at `expires` (or has expired) without being renewed. */
  sslExpiring: (domain: string, expires: Date, now: Date) => {
    const day = expires.toISOString().slice(0, 10);
    const days = Math.ceil((expires.getTime() - now.getTime()) / 86_400_000);
    const what =
      expires.getTime() <= now.getTime()
        ? `The certificate of ${quotedName(domain)} expired on ${day} and has not been renewed`
        : `The certificate of ${quotedName(domain)} expires on ${day} (in ${days} day${days === 1 ? '' : 's'}) and has not been renewed yet`;
    return `${what}. ${NOTIFICATION_ADVICE.ssl_expiring}`;
  },
  /** ssl_failed: a shield server could not obtain or renew the certificate of `domain`; `reason` is its agent's. */
  sslFailed: (domain: string, reason: string) => `The certificate of ${quotedName(domain)} could not be obtained or renewed: ${clause(reason)}. ${NOTIFICATION_ADVICE.ssl_failed}`,
  /** account_frozen: the monthly charge of `priceCents` for `plan` failed on a balance of `balanceCents`. */
  accountFrozen: (plan: string, priceCents: number, balanceCents: number) =>
    `The monthly charge of ${money(priceCents)} for the ${planName(plan)} plan failed: the balance is ${money(balanceCents)}. ` +
    'The account is frozen: changes are blocked until it is renewed, while your domains keep being served and protected as configured. ' +
    `Deposit at least ${money(priceCents - balanceCents)} (POST /api/billing/deposits) to make it active again.`,
  /** account_active: a frozen account was charged its plan's price and is active again, `balanceCents` left. */
  accountActive: (plan: string, balanceCents: number) =>
    `The monthly price of the ${planName(plan)} plan was charged: the account is active again and changes are allowed. Balance: ${money(balanceCents)}.`,
  /** deposit_confirmed: `amountCents` credited (by `txHash` when on-chain), the balance now `balanceCents`. */
  depositConfirmed: (amountCents: number, balanceCents: number, txHash?: string) =>
    `Deposit of ${money(amountCents)} confirmed${txHash ? ` (transaction ${txHash})` : ''}. Balance: ${money(balanceCents)}. ${NOTIFICATION_ADVICE.deposit_confirmed}`,
  /** delivery_disabled: every attempt to the account's webhook or e-mail address failed for 3 days (src/delivery/circuit.ts). */
  deliveryDisabled: (channel: 'webhook' | 'email', lastError: string) =>
    `Notifications are no longer sent to ${channel === 'webhook' ? 'the webhook' : 'the e-mail address'} of this account: ` +
    `every attempt failed for 3 days (the last: ${clause(lastError)}), and its pending deliveries were given up. ${NOTIFICATION_ADVICE.delivery_disabled}`,
  /** rollout_halted: a staged change regressed `signal` on canary `serverName` (`values`: before and during the bake). */
  rolloutHalted: (change: string, serverName: string, signal: string, values: string) =>
    `Rollout halted: the change (${clause(change)}) regressed ${signal} on canary ${quotedName(serverName)}: ${clause(values)}. ${NOTIFICATION_ADVICE.rollout_halted}`,
  /** rollout_halted because a canary sent no report after the bake (services/rollouts.ts watchBakes). */
  rolloutSilent: (change: string, values: string) =>
    `Rollout halted: the change (${clause(change)}) was not seen to hold: ${clause(values)}. ` +
    "The canaries are back on the last good revision and the other servers never received the change: check that the canary's agent is connected, then resume the rollout (POST /api/rollouts/{id}/resume) or roll it back.",
  /** The notice counting what a server raised past SERVER_NOTIFICATION_LIMIT. */
  dropped: (kind: NotificationKind) =>
    `More ${kind} notifications from this server were dropped: at most ${SERVER_NOTIFICATION_LIMIT.perWindow} a minute are kept (count: how many were dropped). ` +
    'The server is raising far more than usual: look at its earlier notifications and at the server itself.',
};
