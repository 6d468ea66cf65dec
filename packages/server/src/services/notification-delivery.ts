import type { Transporter } from 'nodemailer';
import type { ServiceContext } from '../context.js';
import { iso } from '../values.js';
import { deliveryCursor, deliveryWork, latestDeliveries, updateDelivery } from '../data/notification-deliveries.js';
import { claimNextAttempt, giveUpPendingOf, updateEndpoint } from '../data/notification-endpoints.js';
import type { Tx } from '../db/database.js';
import { afterFailure, HEALTHY_ENDPOINT, type EndpointState } from '../delivery/circuit.js';
import { deliverEmail, emailTransport, notificationEmail } from '../delivery/email.js';
import { DELIVERY_GIVE_UP_MS, nextAttemptDelayMs, shouldGiveUp } from '../delivery/retry.js';
import { shortError, type DeliverableNotification, type DeliveryResult } from '../delivery/types.js';
import { deliverWebhook } from '../delivery/webhook.js';
import { decryptSecret } from '../secret-box.js';
import { webhookTarget, type DeliveryChannel } from './delivery-queue.js';
import { notificationMessages, notify } from './notifications.js';
import { listPage, type PageParams } from './paging.js';

// Delivering notifications to an account's webhook and e-mail address (docs/notifications.md,
// "Settings and delivery log"): a delivery row per channel is queued with the notification, in
// its transaction (services/delivery-queue.ts); delivery runs (the notification-delivery job, and
// a run kicked after each queueing) claim due rows, attempt them through src/delivery/ and record
// the outcome.

export type DeliveryStatus = 'pending' | 'delivered' | 'given_up';

/** Attempts one run makes at most; the next run goes on. */
const MAX_ATTEMPTS_PER_RUN = 1000;
/** Attempts under way at the same time in one process (to different endpoints), by default (RAMPART_DELIVERY_CONCURRENCY). */
export const DELIVERY_CONCURRENCY = 10;
/**
 * How long a claimed delivery and its endpoint stay with the worker that claimed them: a process
 * that dies mid-attempt lets them go again after this. Longer than an attempt can take (10 s for
 * a webhook, 60 s for an e-mail: EMAIL_ATTEMPT_TIMEOUT_MS).
 */
export const DELIVERY_LEASE_MS = 2 * 60_000;

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
  /** Attempts under way at once (to different endpoints); DELIVERY_CONCURRENCY by default. */
  concurrency?: number | undefined;
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

type Work = NonNullable<Awaited<ReturnType<typeof deliveryWork>>>;
/** A failure of the control plane's own (its secret key, its SMTP settings, an unconfirmed address): not the endpoint's. */
type Failed = DeliveryResult & { local?: true };
/** An attempt's outcome, or `removed` when the channel is no longer in the settings. */
type Outcome = Failed | { removed: string };

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
  const failed = (error: string): Failed => ({ ok: false, error, durationMs: 0, local: true });
  if (w.channel === 'webhook') {
    if (!w.webhook_url) return { outcome: { removed: 'the webhook was removed from the notification settings' }, target: w.target };
    const target = webhookTarget(w.webhook_url);
    const secret = secretOf(ctx, w.webhook_secret_enc);
    if (secret === null) return { outcome: failed('the webhook secret cannot be read: RAMPART_SECRET_KEY is not set on the control plane, or has changed'), target };
    const outcome = await deliverWebhook(w.webhook_url, secret, n, { allowPrivate: options.allowPrivateWebhooks, timeoutMs: options.webhookTimeoutMs, now: () => ctx.now() });
    return { outcome, target };
  }
  if (!w.email) return { outcome: { removed: 'the e-mail address was removed from the notification settings' }, target: w.target };
  if (!w.email_confirmed_at) return { outcome: failed(EMAIL_NOT_CONFIRMED), target: w.email };
  if (!options.smtp) return { outcome: failed('e-mail is not configured on the control plane (RAMPART_SMTP_URL)'), target: w.email };
  return { outcome: await deliverEmail(options.smtp.transport, notificationEmail(n, w.email, options.smtp.from)), target: w.email };
}

/** Why nothing is sent to an address its owner has not confirmed (docs/notifications.md "E-mail"). */
export const EMAIL_NOT_CONFIRMED = 'the e-mail address is not confirmed: nothing is sent to it until the link of its confirmation e-mail is opened';

/** Records an attempt's outcome on the delivery; returns its new status, or 'failed' when it stays pending. */
async function recordAttempt(tx: Tx, w: Work, outcome: Outcome, target: string, now: Date, random?: () => number): Promise<'delivered' | 'failed' | 'given_up'> {
  if ('removed' in outcome) {
    await updateDelivery(tx, w.account_id, w.id, { status: 'given_up', next_attempt_at: null, last_error: outcome.removed, updated_at: now });
    return 'given_up';
  }
  const attempts = w.attempts + 1;
  const recorded = { attempts, target, last_status: outcome.status ?? null, updated_at: now };
  if (outcome.ok) {
    await updateDelivery(tx, w.account_id, w.id, { ...recorded, status: 'delivered', last_error: null, next_attempt_at: null });
    return 'delivered';
  }
  const error = outcome.error ?? 'failed';
  if (shouldGiveUp(new Date(w.created_at), now)) {
    await updateDelivery(tx, w.account_id, w.id, { ...recorded, status: 'given_up', last_error: error, next_attempt_at: null });
    return 'given_up';
  }
  const next = new Date(now.getTime() + nextAttemptDelayMs(attempts, random));
  await updateDelivery(tx, w.account_id, w.id, { ...recorded, status: 'pending', last_error: error, next_attempt_at: next });
  return 'failed';
}

const dateOf = (d: Date | string | null): Date | null => (d === null ? null : new Date(d));

/** The endpoint's circuit as deliveryWork read it. */
function endpointStateOf(w: Work): EndpointState {
  return {
    consecutiveFailures: w.consecutive_failures ?? 0,
    failingSince: dateOf(w.failing_since),
    pausedUntil: dateOf(w.paused_until),
    disabledAt: dateOf(w.disabled_at),
    lastError: w.endpoint_error,
  };
}

/** The notification_endpoints columns of a circuit state. */
export function endpointColumns(state: EndpointState) {
  return {
    consecutive_failures: state.consecutiveFailures,
    failing_since: state.failingSince,
    paused_until: state.pausedUntil,
    disabled_at: state.disabledAt,
    last_error: state.lastError,
  };
}

/**
 * Frees the endpoint for its next attempt and moves its circuit (src/delivery/circuit.ts): a
 * success closes it; a failure of the endpoint counts, may open it (and then its deliveries queued
 * more than a day ago are given up) or disable it (all its pending deliveries are given up, and
 * the account is told with a delivery_disabled notification). The control plane's own failures
 * and a removed channel leave the circuit as it is.
 */
async function recordEndpoint(ctx: ServiceContext, tx: Tx, w: Work, outcome: Outcome, now: Date): Promise<void> {
  const endpoint = { accountId: w.account_id, channel: w.channel };
  if ('removed' in outcome || outcome.local) return updateEndpoint(tx, w.account_id, w.channel, { busy_until: null });
  if (outcome.ok) return updateEndpoint(tx, w.account_id, w.channel, { busy_until: null, ...endpointColumns(HEALTHY_ENDPOINT) });
  const state = afterFailure(endpointStateOf(w), now, outcome.error ?? 'failed');
  await updateEndpoint(tx, w.account_id, w.channel, { busy_until: null, ...endpointColumns(state) });
  const channel = w.channel as DeliveryChannel;
  if (state.disabledAt) {
    await giveUpPendingOf(tx, endpoint, now, `not delivered: the ${CHANNEL_WORDS[channel]} was disabled after failing for 3 days`);
    await notify({ ...ctx, db: tx }, { accountId: w.account_id, kind: 'delivery_disabled', message: notificationMessages.deliveryDisabled(channel, state.lastError ?? 'failed') });
  } else if (state.pausedUntil) {
    const error = `not delivered within a day: the ${CHANNEL_WORDS[channel]} failed ${state.consecutiveFailures} attempts in a row and is paused (last: ${state.lastError})`;
    await giveUpPendingOf(tx, endpoint, now, shortError(error), new Date(now.getTime() - DELIVERY_GIVE_UP_MS));
  }
}

const CHANNEL_WORDS: Record<DeliveryChannel, string> = { webhook: 'webhook', email: 'e-mail address' };

/** Attempts one claimed delivery and records what happened; returns its new status, or 'failed' when it stays pending. */
async function deliverOne(ctx: ServiceContext, options: DeliveryOptions, w: Work): Promise<'delivered' | 'failed' | 'given_up'> {
  const { outcome, target } = await attempt(ctx, options, w);
  const now = ctx.now();
  return ctx.db.transaction().execute(async (tx) => {
    const status = await recordAttempt(tx, w, outcome, target, now, options.random);
    await recordEndpoint(ctx, tx, w, outcome, now);
    return status;
  });
}

/** Claims the next attempt (claimNextAttempt) with its lease; undefined when nothing is due. */
async function claimNext(ctx: ServiceContext): Promise<Work | undefined> {
  const now = ctx.now();
  const claimed = await ctx.db.transaction().execute((tx) => claimNextAttempt(tx, now, new Date(now.getTime() + DELIVERY_LEASE_MS)));
  return claimed && (await deliveryWork(ctx.db, claimed.id));
}

/**
 * The delivery workers of a run: each claims the next attempt (the endpoint served least
 * recently among those free, see claimNextAttempt), makes it, records it, and goes on until
 * nothing is due. `fill` adds workers up to DELIVERY_CONCURRENCY, so deliveries queued while a
 * slow endpoint holds one worker are taken by another at once; `done` settles when every worker
 * has stopped.
 */
function deliveryWorkers(ctx: ServiceContext, options: DeliveryOptions, stopped: () => boolean = () => false) {
  const result: DeliveryRunResult = { attempted: 0, delivered: 0, failed: 0, givenUp: 0 };
  let active = 0;
  let claims = 0;
  const errors: unknown[] = [];
  let finish: (r: DeliveryRunResult) => void = () => {};
  let fail: (err: unknown) => void = () => {};
  const done = new Promise<DeliveryRunResult>((resolve, reject) => ((finish = resolve), (fail = reject)));
  const worker = async () => {
    while (!stopped() && claims < MAX_ATTEMPTS_PER_RUN) {
      claims++;
      const w = await claimNext(ctx);
      if (!w) break;
      const status = await deliverOne(ctx, options, w);
      options.onAttempt?.(w.channel, status);
      result.attempted++;
      if (status === 'delivered') result.delivered++;
      else if (status === 'failed') result.failed++;
      else result.givenUp++;
    }
  };
  let settled = false;
  /** Adds workers up to the concurrency; false once the run is over (start another). */
  const fill = (): boolean => {
    if (settled) return false;
    while (active < (options.concurrency ?? DELIVERY_CONCURRENCY)) {
      active++;
      worker()
        .catch((err: unknown) => void errors.push(err))
        .finally(() => {
          if (--active > 0) return;
          settled = true;
          if (errors.length) fail(errors[0]);
          else finish(result);
        });
    }
    return true;
  };
  return { fill, done };
}

/**
 * One delivery run: workers claim due deliveries one at a time (FOR UPDATE SKIP LOCKED, so runs
 * on several processes share them out), one attempt at a time per endpoint, endpoints taking
 * turns, and attempt each: a success is `delivered`; a failure is retried after
 * nextAttemptDelayMs, or `given_up` once a day has passed since it was queued; a channel removed
 * from the settings gives its pending deliveries up; the endpoint's circuit moves with each
 * outcome (recordEndpoint).
 */
export async function runDeliveries(ctx: ServiceContext, options: DeliveryOptions): Promise<DeliveryRunResult> {
  const workers = deliveryWorkers(ctx, options);
  workers.fill();
  return workers.done;
}

export interface DeliveryConfig {
  allowPrivateWebhooks: boolean;
  /** RAMPART_SMTP_URL, e.g. smtp://user:pass@mail.example.com:587; absent: no e-mail. */
  smtpUrl?: string | undefined;
  /** RAMPART_SMTP_FROM, default rampart@localhost. */
  smtpFrom: string;
  /** RAMPART_DELIVERY_INTERVAL_MS, default 5000: how often the delivery job looks for due deliveries. */
  intervalMs: number;
  /** RAMPART_DELIVERY_CONCURRENCY, default 10: attempts under way at once in this process, each to another endpoint. */
  concurrency?: number | undefined;
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
  const workers = env.RAMPART_DELIVERY_CONCURRENCY;
  const concurrency = workers === undefined || workers === '' ? DELIVERY_CONCURRENCY : Number(workers);
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 200) {
    throw new Error('RAMPART_DELIVERY_CONCURRENCY must be a whole number of attempts from 1 to 200');
  }
  const allow = env.RAMPART_ALLOW_PRIVATE_WEBHOOKS ?? '';
  if (!['', '0', '1'].includes(allow)) throw new Error('RAMPART_ALLOW_PRIVATE_WEBHOOKS must be 1 (allow) or 0 (refuse, the default)');
  return { allowPrivateWebhooks: allow === '1', smtpUrl, smtpFrom: env.RAMPART_SMTP_FROM || 'rampart@localhost', intervalMs, concurrency };
}

export interface DeliveryRunner {
  /** Delivers what is due now: a run, or more workers for the run under way (they take the deliveries its busy workers cannot). */
  run(): Promise<DeliveryRunResult | undefined>;
  /** Deliveries were queued: a run in a moment, and another a second later (the queueing transaction may commit late). */
  kick(): void;
  /** One e-mail through the operator's SMTP server (an address's confirmation); undefined without SMTP. */
  sendEmail: ((mail: { to: string; subject: string; text: string }) => Promise<DeliveryResult>) | undefined;
  /** No more runs; waits up to `waitMs` for the one under way, then closes the SMTP transport. */
  stop(waitMs?: number): Promise<void>;
}

/** KICK_DELAYS_MS: when the runs after a kick start. */
const KICK_DELAYS_MS = [50, 1000] as const;

/** The delivery runs of one process: the job's and the kicked ones, one run at a time, topped up with workers when asked again. */
export function deliveryRunner(ctx: ServiceContext, config: DeliveryConfig, log: (msg: string, err: unknown) => void, onAttempt?: DeliveryOptions['onAttempt']): DeliveryRunner {
  const transport = config.smtpUrl ? emailTransport(config.smtpUrl) : undefined;
  const options: DeliveryOptions = {
    allowPrivateWebhooks: config.allowPrivateWebhooks,
    smtp: transport && { transport, from: config.smtpFrom },
    concurrency: config.concurrency,
    onAttempt,
  };
  let current: { workers: ReturnType<typeof deliveryWorkers>; done: Promise<DeliveryRunResult | undefined> } | undefined;
  let stopped = false;
  const timers: (NodeJS.Timeout | undefined)[] = KICK_DELAYS_MS.map(() => undefined);

  const run = (): Promise<DeliveryRunResult | undefined> => {
    if (stopped) return Promise.resolve(undefined);
    // Asked for during a run: idle workers join it, so a slow endpoint's attempt does not hold new deliveries back.
    if (current?.workers.fill()) return current.done;
    const workers = deliveryWorkers(ctx, options, () => stopped);
    const run = {
      workers,
      done: workers.done.finally(() => {
        if (current === run) current = undefined;
      }),
    };
    current = run;
    workers.fill();
    return run.done;
  };
  return {
    run,
    // A confirmation e-mail is sent while its request waits: a shorter deadline than a delivery's.
    sendEmail: transport && ((mail) => deliverEmail(transport, { ...mail, from: config.smtpFrom }, 20_000)),
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
        await Promise.race([current.done.catch(() => undefined), new Promise((r) => (timer = setTimeout(r, waitMs)))]);
        clearTimeout(timer);
      }
      transport?.close();
    },
  };
}
