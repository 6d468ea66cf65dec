import { isHostname } from '@rampart/protocol';
import type { ServiceContext } from '../context.js';
import { iso } from '../context.js';
import { notificationSettings, saveNotificationSettings } from '../data/notification-settings.js';
import { checkWebhookUrl } from '../delivery/webhook.js';
import { AppError, invalidField } from '../errors.js';
import { encryptSecret } from '../secret-box.js';
import { NOTIFICATION_KINDS, type NotificationKind } from './notifications.js';

// An account's notification channels (PUT/GET /api/settings/notifications, docs/notifications.md
// "Settings and delivery log").

export const WEBHOOK_SECRET_LENGTH = { min: 16, max: 200 } as const;
export const EMAIL_MAX_LENGTH = 254;

export interface NotificationSettingsView {
  webhookUrl: string | null;
  /** Whether a webhook secret is stored; the secret itself is never shown. */
  webhookSecretSet: boolean;
  email: string | null;
  /** The kinds delivered; empty: every kind. */
  kinds: NotificationKind[];
  updatedAt: string | null;
}

/** A field left out keeps its value; null clears it. */
export interface NotificationSettingsUpdate {
  webhookUrl?: string | null | undefined;
  webhookSecret?: string | null | undefined;
  email?: string | null | undefined;
  kinds?: string[] | null | undefined;
}

type Row = NonNullable<Awaited<ReturnType<typeof notificationSettings>>>;

function view(row: Row | undefined): NotificationSettingsView {
  return {
    webhookUrl: row?.webhook_url ?? null,
    webhookSecretSet: Boolean(row?.webhook_secret_enc),
    email: row?.email ?? null,
    kinds: (row?.kinds ?? []) as NotificationKind[],
    updatedAt: iso(row?.updated_at),
  };
}

export async function getNotificationSettings(ctx: ServiceContext, accountId: string): Promise<NotificationSettingsView> {
  return view(await notificationSettings(ctx.db, accountId));
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
 */
export async function updateNotificationSettings(ctx: ServiceContext, accountId: string, body: NotificationSettingsUpdate): Promise<NotificationSettingsView> {
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
  return ctx.db.transaction().execute(async (tx) => {
    const current = await notificationSettings(tx, accountId, true);
    const url = webhookUrl === undefined ? (current?.webhook_url ?? null) : webhookUrl;
    let secretEnc = secret === undefined ? (current?.webhook_secret_enc ?? null) : secret === null ? null : encryptSecret(ctx.secretKey!, secret);
    if (url === null) {
      if (typeof secret === 'string') throw invalidField('webhookSecret', 'is only used with a webhookUrl');
      secretEnc = null;
    } else if (secretEnc === null) {
      throw invalidField('webhookSecret', `is required with webhookUrl (${WEBHOOK_SECRET_LENGTH.min} to ${WEBHOOK_SECRET_LENGTH.max} characters)`);
    }
    const row = {
      account_id: accountId,
      webhook_url: url,
      webhook_secret_enc: secretEnc,
      email: email === undefined ? (current?.email ?? null) : email,
      kinds: JSON.stringify(kinds === undefined ? (current?.kinds ?? []) : (kinds ?? [])),
      updated_at: ctx.now(),
    };
    await saveNotificationSettings(tx, row);
    return view({ ...row, kinds: JSON.parse(row.kinds) as string[], updated_at: row.updated_at });
  });
}
