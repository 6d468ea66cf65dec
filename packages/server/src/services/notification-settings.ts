import { isHostname } from '@rampart/protocol';
import type { ServiceContext } from '../context.js';
import { iso } from '../values.js';
import { newSessionToken, sha256 } from '../crypto.js';
import { endpointsOf, updateEndpoint } from '../data/notification-endpoints.js';
import { confirmEmailByToken, notificationSettings, saveNotificationSettings, setEmailToken } from '../data/notification-settings.js';
import type { Database, Tx } from '../db/database.js';
import { endpointCondition, HEALTHY_ENDPOINT, type EndpointCondition } from '../delivery/circuit.js';
import { confirmationEmail } from '../delivery/email.js';
import { checkWebhookUrl } from '../delivery/webhook.js';
import { AppError, invalidField } from '../errors.js';
import { encryptSecret } from '../secret-box.js';
import { endpointColumns } from './notification-delivery.js';
import { NOTIFICATION_KINDS, type NotificationKind } from './notifications.js';
import { recordAudit, SYSTEM_ACTOR, type Actor } from './audit.js';

// An account's notification channels (PUT/GET /api/settings/notifications, docs/notifications.md
// "Settings and delivery log"), the state of their endpoints, and the e-mail address's
// confirmation (a single-use link, stored hashed).

export const WEBHOOK_SECRET_LENGTH = { min: 16, max: 200 } as const;
export const EMAIL_MAX_LENGTH = 254;
/** A confirmation link works this long, and confirmation e-mails of one account are this far apart at least. */
export const EMAIL_TOKEN_TTL_MS = 24 * 60 * 60_000;
export const EMAIL_CONFIRMATION_SPACING_MS = 60_000;

/** How an endpoint is doing (src/delivery/circuit.ts). */
export interface ChannelStatus {
  state: EndpointCondition;
  consecutiveFailures: number;
  failingSince: string | null;
  pausedUntil: string | null;
  disabledAt: string | null;
  lastError: string | null;
}

export interface NotificationSettingsView {
  webhookUrl: string | null;
  /** Whether a webhook secret is stored; the secret itself is never shown. */
  webhookSecretSet: boolean;
  email: string | null;
  /** Whether the owner of `email` opened its confirmation link; nothing else is sent to it before. */
  emailConfirmed: boolean;
  /** When the last confirmation e-mail was sent (null: none, or it could not be sent). */
  emailConfirmationSentAt: string | null;
  /** The kinds delivered; empty: every kind. */
  kinds: NotificationKind[];
  updatedAt: string | null;
  /** The webhook's and the e-mail address's deliveries: ok, failing, paused (circuit open) or disabled; null without that channel. */
  webhookStatus: ChannelStatus | null;
  emailStatus: ChannelStatus | null;
}

/** A field left out keeps its value; null clears it. */
export interface NotificationSettingsUpdate {
  webhookUrl?: string | null | undefined;
  webhookSecret?: string | null | undefined;
  email?: string | null | undefined;
  kinds?: string[] | null | undefined;
}

type Row = NonNullable<Awaited<ReturnType<typeof notificationSettings>>>;
type Endpoint = Awaited<ReturnType<typeof endpointsOf>>[number];

function channelStatus(endpoint: Endpoint | undefined, now: Date): ChannelStatus {
  const state = {
    consecutiveFailures: endpoint?.consecutive_failures ?? 0,
    failingSince: endpoint?.failing_since ? new Date(endpoint.failing_since) : null,
    pausedUntil: endpoint?.paused_until ? new Date(endpoint.paused_until) : null,
    disabledAt: endpoint?.disabled_at ? new Date(endpoint.disabled_at) : null,
    lastError: endpoint?.last_error ?? null,
  };
  return {
    state: endpointCondition(state, now),
    consecutiveFailures: state.consecutiveFailures,
    failingSince: iso(state.failingSince),
    pausedUntil: iso(state.pausedUntil),
    disabledAt: iso(state.disabledAt),
    lastError: state.lastError,
  };
}

function view(row: Row | undefined, endpoints: readonly Endpoint[], now: Date): NotificationSettingsView {
  const of = (channel: string) =>
    channelStatus(
      endpoints.find((e) => e.channel === channel),
      now,
    );
  return {
    webhookUrl: row?.webhook_url ?? null,
    webhookSecretSet: Boolean(row?.webhook_secret_enc),
    email: row?.email ?? null,
    emailConfirmed: Boolean(row?.email && row.email_confirmed_at),
    // A confirmation that could not be sent leaves no token: it shows as none sent.
    emailConfirmationSentAt: row?.email && !row.email_confirmed_at && row.email_token_hash ? iso(row.email_token_sent_at) : null,
    kinds: (row?.kinds ?? []) as NotificationKind[],
    updatedAt: iso(row?.updated_at),
    webhookStatus: row?.webhook_url ? of('webhook') : null,
    emailStatus: row?.email ? of('email') : null,
  };
}

async function currentView(ctx: ServiceContext, db: Database | Tx, accountId: string): Promise<NotificationSettingsView> {
  return view(await notificationSettings(db, accountId), await endpointsOf(db, accountId), ctx.now());
}

export async function getNotificationSettings(ctx: ServiceContext, accountId: string): Promise<NotificationSettingsView> {
  return currentView(ctx, ctx.db, accountId);
}

// Spaces and control characters (a header or SMTP command injection) are never part of a URL or an address.
const SPACE_OR_CONTROL = /[\s\p{Cc}\p{Cf}]/u;
// One address, dot-atom local part (RFC 5322) of ASCII, no display name, no list.
const LOCAL_PART = /^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*$/;

/** The webhook URL as stored (parsed and serialized), or a 400 naming webhookUrl. */
function webhookUrlOf(ctx: ServiceContext, url: string): string {
  if (SPACE_OR_CONTROL.test(url)) throw invalidField('webhookUrl', 'must not contain spaces or control characters');
  const problem = checkWebhookUrl(url, ctx.delivery?.allowPrivateWebhooks ?? false);
  if (problem) throw new AppError('invalid_body', problem);
  const parsed = new URL(url);
  parsed.hash = ''; // a fragment is never sent
  return parsed.href;
}

/** The address as stored (its domain lowercased), or a 400 naming email. */
function emailOf(ctx: ServiceContext, email: string): string {
  const at = email.lastIndexOf('@');
  const local = email.slice(0, at);
  const domain = email.slice(at + 1).toLowerCase();
  const valid = email.length <= EMAIL_MAX_LENGTH && at > 0 && local.length <= 64 && LOCAL_PART.test(local) && isHostname(domain);
  if (!valid) throw invalidField('email', 'must be one e-mail address such as ops@example.com');
  if (!ctx.delivery?.emailEnabled) throw invalidField('email', 'e-mail delivery is not set up on this control plane (the operator sets RAMPART_SMTP_URL)');
  return `${local}@${domain}`;
}

/** The kinds as stored: known ones, once each, in NOTIFICATION_KINDS order; empty for every kind. */
function kindsOf(kinds: readonly string[]): NotificationKind[] {
  const bad = kinds.findIndex((k) => !(NOTIFICATION_KINDS as readonly string[]).includes(k));
  if (bad >= 0) throw invalidField(`kinds[${bad}]`, `must be one of ${NOTIFICATION_KINDS.join(', ')}`);
  return NOTIFICATION_KINDS.filter((k) => kinds.includes(k));
}

/**
 * Changes the account's channels. Everything is checked before anything is stored: the webhook
 * URL (private and loopback addresses refused unless the operator allows them), its secret
 * (required with a URL, stored encrypted under RAMPART_SECRET_KEY), the e-mail address (one, and
 * only when the operator has set up SMTP) and the kinds. Clearing the URL clears the secret.
 * Saving a channel turns it back on when it was paused or disabled (its circuit closes). A new
 * e-mail address is unconfirmed: a confirmation e-mail with a single-use link is sent to it
 * (requestEmailConfirmation), and nothing else until it is confirmed.
 */
export async function updateNotificationSettings(
  ctx: ServiceContext,
  accountId: string,
  body: NotificationSettingsUpdate,
  publicUrl?: URL,
  actor: Actor = SYSTEM_ACTOR,
): Promise<NotificationSettingsView> {
  const webhookUrl = body.webhookUrl == null ? body.webhookUrl : webhookUrlOf(ctx, body.webhookUrl);
  const email = body.email == null ? body.email : emailOf(ctx, body.email);
  const kinds = body.kinds == null ? body.kinds : kindsOf(body.kinds);
  const secret = body.webhookSecret;
  if (typeof secret === 'string') {
    if (secret.length < WEBHOOK_SECRET_LENGTH.min || secret.length > WEBHOOK_SECRET_LENGTH.max || SPACE_OR_CONTROL.test(secret)) {
      throw invalidField('webhookSecret', `must be ${WEBHOOK_SECRET_LENGTH.min} to ${WEBHOOK_SECRET_LENGTH.max} characters, without spaces or control characters`);
    }
    if (!ctx.secretKey) throw invalidField('webhookSecret', 'cannot be stored: the operator must set RAMPART_SECRET_KEY on the control plane');
  }
  const { newAddress } = await ctx.db.transaction().execute(async (tx) => {
    const current = await notificationSettings(tx, accountId, true);
    const url = webhookUrl === undefined ? (current?.webhook_url ?? null) : webhookUrl;
    let secretEnc = secret === undefined ? (current?.webhook_secret_enc ?? null) : secret === null ? null : encryptSecret(ctx.secretKey!, secret);
    if (url === null) {
      if (typeof secret === 'string') throw invalidField('webhookSecret', 'is only used with a webhookUrl');
      secretEnc = null;
    } else if (secretEnc === null) {
      throw invalidField('webhookSecret', `is required with webhookUrl (${WEBHOOK_SECRET_LENGTH.min} to ${WEBHOOK_SECRET_LENGTH.max} characters)`);
    }
    const address = email === undefined ? (current?.email ?? null) : email;
    const sameAddress = address !== null && address === current?.email;
    const row = {
      account_id: accountId,
      webhook_url: url,
      webhook_secret_enc: secretEnc,
      email: address,
      // The confirmation belongs to the address: a new one starts unconfirmed, without a token.
      ...(sameAddress ? {} : { email_confirmed_at: null, email_token_hash: null, email_token_expires_at: null }),
      kinds: JSON.stringify(kinds === undefined ? (current?.kinds ?? []) : (kinds ?? [])),
      updated_at: ctx.now(),
    };
    await saveNotificationSettings(tx, row);
    const audited = (s: { webhook_url: string | null; webhook_secret_enc: string | null; email: string | null; kinds: unknown } | undefined) =>
      s && { webhookUrl: s.webhook_url, webhookSecret: s.webhook_secret_enc, email: s.email, kinds: typeof s.kinds === 'string' ? (JSON.parse(s.kinds) as unknown) : s.kinds };
    await recordAudit(tx, ctx, accountId, actor, {
      objectType: 'notification_settings',
      objectId: null,
      action: current ? 'update' : 'create',
      before: audited(current),
      after: audited(row),
      secrets: ['webhookSecret'],
    });
    // Saving a channel is how its owner turns it back on after it was paused or disabled.
    if (webhookUrl) await updateEndpoint(tx, accountId, 'webhook', endpointColumns(HEALTHY_ENDPOINT));
    if (email) await updateEndpoint(tx, accountId, 'email', endpointColumns(HEALTHY_ENDPOINT));
    return { newAddress: address !== null && !sameAddress };
  });
  if (newAddress) await sendConfirmation(ctx, accountId, publicUrl).catch(() => undefined); // shown as emailConfirmationSentAt: null; it can be asked again
  return currentView(ctx, ctx.db, accountId);
}

/**
 * Sends the account's address a confirmation e-mail with a new single-use token (the previous
 * one stops working); the token is stored hashed (SHA-256) and works for EMAIL_TOKEN_TTL_MS.
 * Refused while the address is confirmed or absent, and within EMAIL_CONFIRMATION_SPACING_MS of
 * the last one (an account cannot make the control plane mail anyone in a loop).
 */
async function sendConfirmation(ctx: ServiceContext, accountId: string, publicUrl?: URL): Promise<void> {
  const send = ctx.delivery?.sendEmail;
  if (!send) throw new AppError('email_unavailable', 'email: e-mail delivery is not set up on this control plane (the operator sets RAMPART_SMTP_URL)');
  const now = ctx.now();
  const token = newSessionToken();
  const to = await ctx.db.transaction().execute(async (tx) => {
    const row = await notificationSettings(tx, accountId, true);
    if (!row?.email) throw invalidField('email', 'no address is set (PUT /api/settings/notifications with email)');
    if (row.email_confirmed_at) throw invalidField('email', 'is already confirmed');
    const last = row.email_token_sent_at ? new Date(row.email_token_sent_at).getTime() : -Infinity;
    const wait = last + EMAIL_CONFIRMATION_SPACING_MS - now.getTime();
    if (wait > 0) throw new AppError('email_confirmation_spacing', undefined, { retryAfterSeconds: Math.ceil(wait / 1000) });
    await setEmailToken(tx, accountId, { hash: sha256(token), expiresAt: new Date(now.getTime() + EMAIL_TOKEN_TTL_MS), sentAt: now });
    return row.email;
  });
  const sent = await send(confirmationEmail(to, token, publicUrl));
  if (!sent.ok) {
    await setEmailToken(ctx.db, accountId, { hash: null, expiresAt: null, sentAt: now }); // the spacing still holds
    throw new AppError('email_unavailable', `email: the confirmation e-mail could not be sent: ${sent.error ?? 'failed'}`);
  }
}

/** POST /api/settings/notifications/email/confirmation: a new confirmation e-mail for the account's address. */
export async function requestEmailConfirmation(ctx: ServiceContext, accountId: string, publicUrl?: URL): Promise<NotificationSettingsView> {
  await sendConfirmation(ctx, accountId, publicUrl);
  return currentView(ctx, ctx.db, accountId);
}

/**
 * POST /api/settings/notifications/email/confirm: the token of a confirmation link confirms the
 * address it was sent to, once; an unknown, used or expired token is a 400.
 */
export async function confirmEmail(ctx: ServiceContext, token: string): Promise<{ email: string }> {
  const email = await confirmEmailByToken(ctx.db, sha256(token), ctx.now());
  if (email === undefined) throw new AppError('email_token_invalid');
  return { email };
}
