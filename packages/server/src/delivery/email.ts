import { createRequire } from 'node:module';
import type { NodemailerError, Transporter } from 'nodemailer';
import { shortError, stopwatch, type DeliverableNotification, type DeliveryResult } from './types.js';

// E-mail delivery: one plain-text message per notification (docs/notifications.md). nodemailer
// (650 KB of code, a tenth of a second or more to load) is loaded when a transport is made, that
// is only by a control plane with SMTP configured.

const load = createRequire(import.meta.url);

/**
 * A transport for the operator's SMTP server URL, e.g. `smtp://user:pass@mail.example.com:587`
 * or `smtps://...:465`. nodemailer's own timeouts (2 minutes to connect, 10 minutes idle) would hold a
 * delivery far longer than a retry is worth; the URL's query can still set them.
 */
export function emailTransport(smtpUrl: string): Transporter {
  const nodemailer = load('nodemailer') as typeof import('nodemailer');
  return nodemailer.createTransport({ url: smtpUrl, connectionTimeout: 10_000, greetingTimeout: 10_000, socketTimeout: 30_000 });
}

/**
 * A kind in words, for the subject and the first line. The message itself says what happened and
 * what to do (services/notifications.ts notificationMessages), so the e-mail adds no advice of its own.
 */
const TITLES: Record<string, string> = {
  server_down: 'Server down',
  server_recovered: 'Server recovered',
  server_error: 'Server error',
  proxy_crash: 'Proxy crashed',
  proxy_reload_failed: 'Proxy reload failed',
  ssl_expiring: 'Certificate expiring',
  ssl_failed: 'Certificate failed',
  origin_down: 'Origin down',
  origin_up: 'Origin up',
  account_frozen: 'Account frozen',
  account_active: 'Account active',
  deposit_confirmed: 'Deposit confirmed',
  delivery_disabled: 'Notification channel disabled',
};

function kindTitle(kind: string): string {
  const words = kind.replace(/_/g, ' ');
  return TITLES[kind] ?? words.charAt(0).toUpperCase() + words.slice(1);
}

/**
 * The subject: our words (the kind) and identifiers, never text an account chose. A server's or a
 * domain's name is the account's text: it stays in the body (quoted, escaped and shortened by the
 * message, services/notifications.ts quotedName), so no name can make our subject line an
 * advertisement.
 */
function notificationSubject(n: DeliverableNotification): string {
  const ids = [...(n.serverId ? [`server ${n.serverId}`] : []), ...(n.domainId ? [`domain ${n.domainId}`] : [])];
  return `[Rampart] ${kindTitle(n.kind)}${ids.length ? ` (${ids.join(', ')})` : ''}`;
}

export interface NotificationEmail {
  from: string;
  to: string;
  subject: string;
  text: string;
}

/** The e-mail for a notification; `from` is RAMPART_SMTP_FROM (rampart@localhost by default). */
export function notificationEmail(n: DeliverableNotification, accountEmail: string, from: string): NotificationEmail {
  const title = kindTitle(n.kind);
  const details = [
    `Raised at ${new Date(n.createdAt).toISOString()} (notification ${n.id}, kind ${n.kind}).`,
    ...(n.serverId ? [`Server: ${n.serverId}`] : []),
    ...(n.domainId ? [`Domain: ${n.domainId}`] : []),
  ];
  const text = [
    title,
    '',
    n.message,
    '',
    ...details,
    '',
    'You get this e-mail because your Rampart account sends its notifications to this address; change that in its notification settings.',
    '',
  ].join('\n');
  return { from, to: accountEmail, subject: notificationSubject(n), text };
}

/**
 * The e-mail that asks the owner of an address to confirm it: our words and the link only. With
 * the control plane's public URL (RAMPART_PUBLIC_URL) the link opens the dashboard's confirmation
 * page, the token in the fragment (never sent in a request line, so never in a log); without it,
 * the token is given to paste.
 */
export function confirmationEmail(to: string, token: string, publicUrl?: URL): { to: string; subject: string; text: string } {
  const how = publicUrl
    ? ['To confirm it, open this link within 24 hours:', '', `${new URL('/', publicUrl).href}#/confirm-email?token=${token}`]
    : [
        'To confirm it within 24 hours, paste this code in the confirmation page of the Rampart dashboard, or send it',
        'with POST /api/settings/notifications/email/confirm {"token": "<code>"}:',
        '',
        token,
      ];
  const text = [
    'Someone asked for the notifications of a Rampart account to be sent to this address.',
    '',
    ...how,
    '',
    'Nothing else is sent to this address until it is confirmed. If you did not ask for this, ignore this e-mail.',
    '',
  ].join('\n');
  return { to, subject: '[Rampart] Confirm the address for notifications', text };
}

/**
 * The longest an e-mail attempt may take, whatever the server does (nodemailer's timeouts are per
 * step and per silence: a server that answers a byte at a time could hold an attempt longer than
 * its endpoint's lease in services/notification-delivery.ts).
 */
export const EMAIL_ATTEMPT_TIMEOUT_MS = 60_000;

/**
 * One attempt to send a notification e-mail. A refusal or failure gives the SMTP server's answer
 * (its reply code as `status`) or the connection error; it never throws for a failed delivery.
 */
export async function deliverEmail(transport: Transporter, mail: NotificationEmail, timeoutMs = EMAIL_ATTEMPT_TIMEOUT_MS): Promise<DeliveryResult> {
  const result = stopwatch();
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    await Promise.race([transport.sendMail(mail), deadline]);
    return result({ ok: true });
  } catch (err) {
    const e = err as NodemailerError;
    const error = shortError(e.response ?? e.message ?? String(err));
    return result(e.responseCode === undefined ? { ok: false, error } : { ok: false, status: e.responseCode, error });
  } finally {
    clearTimeout(timer);
  }
}
