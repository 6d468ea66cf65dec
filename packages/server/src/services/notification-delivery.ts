import type { Transporter } from 'nodemailer';
import type { ServiceContext } from '../context.js';
import { iso } from '../context.js';
import { newId } from '../crypto.js';
import { claimDueDeliveries, deliveryCursor, deliveryWork, insertDeliveries, latestDeliveries, updateDelivery } from '../data/notification-deliveries.js';
import { notificationSettings } from '../data/notification-settings.js';
import type { Database, Tx } from '../db/database.js';
import { deliverEmail, emailTransport, notificationEmail } from '../delivery/email.js';
import { nextAttemptDelayMs, shouldGiveUp } from '../delivery/retry.js';
import type { DeliverableNotification, DeliveryResult } from '../delivery/types.js';
import { deliverWebhook } from '../delivery/webhook.js';
import { decryptSecret } from '../secret-box.js';
import { listPage, type PageParams } from './paging.js';

// Delivering notifications to an account's webhook and e-mail address (docs/notifications.md,
// "Settings and delivery log"): a delivery row per channel is queued with the notification, in
// its transaction; delivery runs (the notification-delivery job, and a run kicked after each
// queueing) claim due rows, attempt them through src/delivery/ and record the outcome.

export type DeliveryChannel = 'webhook' | 'email';
export type DeliveryStatus = 'pending' | 'delivered' | 'given_up';

/** Deliveries claimed by one step of a run. */
export const DELIVERY_BATCH = 100;
/** Batches one run takes at most; the next run goes on. */
const MAX_BATCHES_PER_RUN = 10;
/** Attempts of a batch made at the same time. */
const DELIVERY_CONCURRENCY = 10;
/**
 * How long a claimed delivery stays with the run that claimed it: a run that dies mid-batch lets
 * its deliveries go again after this. Longer than a batch can take (10 rounds of attempts, each
 * at most 50 s for an e-mail).
 */
export const DELIVERY_LEASE_MS = 15 * 60_000;

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
 * channel the account has set whose kinds include this one, due at once. Returns how many.
 */
export async function queueDeliveries(db: Database | Tx, n: { id: string; account_id: string; kind: string; created_at: Date | string }): Promise<number> {
  const settings = await notificationSettings(db, n.account_id);
  if (!settings || !deliversKind(settings.kinds, n.kind)) return 0;
  const createdAt = new Date(n.created_at);
  const channels: { channel: DeliveryChannel; target: string }[] = [
    ...(settings.webhook_url ? [{ channel: 'webhook' as const, target: webhookTarget(settings.webhook_url) }] : []),
    ...(settings.email ? [{ channel: 'email' as const, target: settings.email }] : []),
  ];
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

/** GET /api/notifications/deliveries: the account's deliveries, newest first, paged like the notifications. */
export async function listDeliveries(ctx: ServiceContext, accountId: string, query: PageParams = {}) {
  return listPage(
    query,
    (id) => deliveryCursor(ctx.db, accountId, id),
    (limit, before) => latestDeliveries(ctx.db, accountId, limit, before),
    (d) => ({
      id: d.id,
      notificationId: d.notification_id,
      kind: d.kind,
      channel: d.channel as DeliveryChannel,
      target: d.target,
      status: d.status as DeliveryStatus,
      attempts: d.attempts,
      lastStatus: d.last_status,
      lastError: d.last_error,
      nextAttemptAt: iso(d.next_attempt_at),
      createdAt: iso(d.created_at)!,
      updatedAt: iso(d.updated_at)!,
    }),
  );
}

export interface DeliveryOptions {
  /** RAMPART_ALLOW_PRIVATE_WEBHOOKS=1 */
  allowPrivateWebhooks: boolean;
  /** The SMTP transport (RAMPART_SMTP_URL) and the From address (RAMPART_SMTP_FROM); absent: no e-mail. */
  smtp?: { transport: Transporter; from: string } | undefined;
  webhookTimeoutMs?: number | undefined;
  /** The retry jitter's randomness (tests pin it). */
  random?: (() => number) | undefined;
  /** Told each attempt's channel and outcome (src/metrics.ts). */
  onAttempt?: ((channel: string, outcome: 'delivered' | 'failed' | 'given_up') => void) | undefined;
}

export interface DeliveryRunResult {
  attempted: number;
  delivered: number;
  failed: number;
  givenUp: number;
}

type Work = Awaited<ReturnType<typeof deliveryWork>>[number];
/** An attempt's outcome, or `removed` when the channel is no longer in the settings. */
type Outcome = DeliveryResult | { removed: string };

function secretOf(ctx: ServiceContext, stored: string | null): string | null {
  if (!stored || !ctx.secretKey) return null;
  try {
    return decryptSecret(ctx.secretKey, stored);
  } catch {
    return null;
  }
}

/** One attempt of one delivery, to the channel as the settings have it now. */
async function attempt(ctx: ServiceContext, options: DeliveryOptions, w: Work): Promise<{ outcome: Outcome; target: string }> {
  const n: DeliverableNotification = {
    id: w.notification_id,
    kind: w.kind,
    message: w.message,
    serverId: w.server_id,
    domainId: w.domain_id,
    createdAt: w.notification_created_at,
  };
  const failed = (error: string): DeliveryResult => ({ ok: false, error, durationMs: 0 });
  if (w.channel === 'webhook') {
    if (!w.webhook_url) return { outcome: { removed: 'the webhook was removed from the notification settings' }, target: w.target };
    const target = webhookTarget(w.webhook_url);
    const secret = secretOf(ctx, w.webhook_secret_enc);
    if (secret === null) return { outcome: failed('the webhook secret cannot be read: RAMPART_SECRET_KEY is not set on the control plane, or has changed'), target };
    const outcome = await deliverWebhook(w.webhook_url, secret, n, { allowPrivate: options.allowPrivateWebhooks, timeoutMs: options.webhookTimeoutMs, now: () => ctx.now() });
    return { outcome, target };
  }
  if (!w.email) return { outcome: { removed: 'the e-mail address was removed from the notification settings' }, target: w.target };
  if (!options.smtp) return { outcome: failed('e-mail is not configured on the control plane (RAMPART_SMTP_URL)'), target: w.email };
  return { outcome: await deliverEmail(options.smtp.transport, notificationEmail(n, w.email, options.smtp.from)), target: w.email };
}

/** Attempts one claimed delivery and records what happened; returns its new status, or 'failed' when it stays pending. */
async function deliverOne(ctx: ServiceContext, options: DeliveryOptions, w: Work): Promise<'delivered' | 'failed' | 'given_up'> {
  const { outcome, target } = await attempt(ctx, options, w);
  const now = ctx.now();
  if ('removed' in outcome) {
    await updateDelivery(ctx.db, w.account_id, w.id, { status: 'given_up', next_attempt_at: null, last_error: outcome.removed, updated_at: now });
    return 'given_up';
  }
  const attempts = w.attempts + 1;
  const recorded = { attempts, target, last_status: outcome.status ?? null, updated_at: now };
  if (outcome.ok) {
    await updateDelivery(ctx.db, w.account_id, w.id, { ...recorded, status: 'delivered', last_error: null, next_attempt_at: null });
    return 'delivered';
  }
  const error = outcome.error ?? 'failed';
  if (shouldGiveUp(new Date(w.created_at), now)) {
    await updateDelivery(ctx.db, w.account_id, w.id, { ...recorded, status: 'given_up', last_error: error, next_attempt_at: null });
    return 'given_up';
  }
  const next = new Date(now.getTime() + nextAttemptDelayMs(attempts, options.random));
  await updateDelivery(ctx.db, w.account_id, w.id, { ...recorded, status: 'pending', last_error: error, next_attempt_at: next });
  return 'failed';
}

/** Runs fn over the items, at most `limit` at a time; rejects with the first error once all have settled. */
async function eachLimited<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const errors: unknown[] = [];
  const worker = async () => {
    while (next < items.length) {
      const item = items[next++]!;
      await fn(item).catch((err: unknown) => void errors.push(err));
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (errors.length) throw errors[0];
}

/**
 * One delivery run: claims the due deliveries in batches (FOR UPDATE SKIP LOCKED, so runs on
 * several processes share them out) and attempts each: a success is `delivered`; a failure is
 * retried after nextAttemptDelayMs, or `given_up` once a day has passed since it was queued; a
 * channel removed from the settings gives its pending deliveries up.
 */
export async function runDeliveries(ctx: ServiceContext, options: DeliveryOptions): Promise<DeliveryRunResult> {
  const result: DeliveryRunResult = { attempted: 0, delivered: 0, failed: 0, givenUp: 0 };
  for (let batch = 0; batch < MAX_BATCHES_PER_RUN; batch++) {
    const now = ctx.now();
    const ids = await claimDueDeliveries(ctx.db, now, new Date(now.getTime() + DELIVERY_LEASE_MS), DELIVERY_BATCH);
    if (ids.length === 0) break;
    const work = await deliveryWork(ctx.db, ids);
    await eachLimited(work, DELIVERY_CONCURRENCY, async (w) => {
      const status = await deliverOne(ctx, options, w);
      options.onAttempt?.(w.channel, status);
      result.attempted++;
      if (status === 'delivered') result.delivered++;
      else if (status === 'failed') result.failed++;
      else result.givenUp++;
    });
    if (ids.length < DELIVERY_BATCH) break;
  }
  return result;
}

export interface DeliveryConfig {
  allowPrivateWebhooks: boolean;
  /** RAMPART_SMTP_URL, e.g. smtp://user:pass@mail.example.com:587; absent: no e-mail. */
  smtpUrl?: string | undefined;
  /** RAMPART_SMTP_FROM, default rampart@localhost. */
  smtpFrom: string;
  /** RAMPART_DELIVERY_INTERVAL_MS, default 5000: how often the delivery job looks for due deliveries. */
  intervalMs: number;
}

/** The delivery settings from the environment; throws on a value that cannot be used. */
export function deliveryConfigFromEnv(env: NodeJS.ProcessEnv): DeliveryConfig {
  const interval = env.RAMPART_DELIVERY_INTERVAL_MS;
  const intervalMs = interval === undefined || interval === '' ? 5000 : Number(interval);
  if (!Number.isInteger(intervalMs) || intervalMs < 100 || intervalMs > 3_600_000) {
    throw new Error('RAMPART_DELIVERY_INTERVAL_MS must be a whole number of milliseconds from 100 to 3600000');
  }
  const smtpUrl = env.RAMPART_SMTP_URL || undefined;
  if (smtpUrl !== undefined) {
    const protocol = URL.canParse(smtpUrl) ? new URL(smtpUrl).protocol : undefined;
    if (protocol !== 'smtp:' && protocol !== 'smtps:') throw new Error('RAMPART_SMTP_URL must be an smtp:// or smtps:// URL, e.g. smtp://user:pass@mail.example.com:587');
  }
  const allow = env.RAMPART_ALLOW_PRIVATE_WEBHOOKS ?? '';
  if (!['', '0', '1'].includes(allow)) throw new Error('RAMPART_ALLOW_PRIVATE_WEBHOOKS must be 1 (allow) or 0 (refuse, the default)');
  return { allowPrivateWebhooks: allow === '1', smtpUrl, smtpFrom: env.RAMPART_SMTP_FROM || 'rampart@localhost', intervalMs };
}

export interface DeliveryRunner {
  /** One run now; a call while one is under way makes one more follow it. */
  run(): Promise<DeliveryRunResult | undefined>;
  /** Deliveries were queued: a run in a moment, and another a second later (the queueing transaction may commit late). */
  kick(): void;
  /** No more runs; waits up to `waitMs` for the one under way, then closes the SMTP transport. */
  stop(waitMs?: number): Promise<void>;
}

/** KICK_DELAYS_MS: when the runs after a kick start. */
const KICK_DELAYS_MS = [50, 1000] as const;

/** The delivery runs of one process: the job's and the kicked ones, one at a time. */
export function deliveryRunner(
  ctx: ServiceContext,
  config: DeliveryConfig,
  log: (msg: string, err: unknown) => void,
  onAttempt?: DeliveryOptions['onAttempt'],
): DeliveryRunner {
  const transport = config.smtpUrl ? emailTransport(config.smtpUrl) : undefined;
  const options: DeliveryOptions = {
    allowPrivateWebhooks: config.allowPrivateWebhooks,
    smtp: transport && { transport, from: config.smtpFrom },
    onAttempt,
  };
  let current: Promise<DeliveryRunResult | undefined> | undefined;
  let again = false;
  let stopped = false;
  const timers: (NodeJS.Timeout | undefined)[] = KICK_DELAYS_MS.map(() => undefined);

  const run = (): Promise<DeliveryRunResult | undefined> => {
    if (stopped) return Promise.resolve(undefined);
    if (current) {
      again = true; // asked for during a run: one more follows it
      return current;
    }
    again = false;
    current = runDeliveries(ctx, options).finally(() => {
      current = undefined;
      if (again) run().catch((err) => log('notification delivery failed', err));
    });
    return current;
  };
  return {
    run,
    kick() {
      KICK_DELAYS_MS.forEach((delay, i) => {
        if (stopped || timers[i]) return;
        timers[i] = setTimeout(() => {
          timers[i] = undefined;
          run().catch((err) => log('notification delivery failed', err));
        }, delay);
        timers[i].unref();
      });
    },
    async stop(waitMs = 5000) {
      stopped = true;
      timers.forEach((t) => t && clearTimeout(t));
      if (current) {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([current.catch(() => undefined), new Promise((r) => (timer = setTimeout(r, waitMs)))]);
        clearTimeout(timer);
      }
      transport?.close();
    },
  };
}
