import nodemailer, { type NodemailerError, type Transporter } from 'nodemailer';
import { shortError, stopwatch, type DeliverableNotification, type DeliveryResult } from './types.js';

// E-mail delivery: one plain-text message per notification (docs/notifications.md).

/**
 * A transport for the operator's SMTP server URL, e.g. `smtp://user:pass@mail.example.com:587`
 * or `smtps://...:465`. nodemailer's own timeouts (2 minutes to connect, 10 minutes idle) would hold a
 * delivery far longer than a retry is worth; the URL's query can still set them.
 */
export function emailTransport(smtpUrl: string): Transporter {
  return nodemailer.createTransport({ url: smtpUrl, connectionTimeout: 10_000, greetingTimeout: 10_000, socketTimeout: 30_000 });
}

/** Each kind in words, and what the account owner can do about it. */
const KINDS: Record<string, { title: string; advice: string }> = {
  server_down: {
    title: 'Server down',
    advice:
      'The agent of this shield server lost its connection to Rampart. Check that the server is up, that the agent is running and that it can reach the control plane. ' +
      'Configuration changes do not reach the server until its agent is back.',
  },
  server_recovered: {
    title: 'Server recovered',
    advice: 'The agent of this shield server is connected again. Nothing to do.',
  },
  server_error: {
    title: 'Server error',
    advice:
      'A configuration update failed on this server, HAProxy crashed, or a failed reload could not be rolled back. ' +
      "The message carries HAProxy's errors: correct the change it points to, then check the server's status.",
  },
  proxy_crash: {
    title: 'Proxy crashed',
    advice:
      'HAProxy died or stopped answering, and the agent restarted it on the last configuration that worked. ' +
      "If it happens again, look at the server's HAProxy logs, memory and disk.",
  },
  proxy_reload_failed: {
    title: 'Proxy reload failed',
    advice:
      'A new configuration could not be loaded, so the server went back to the previous one: it serves, but without your latest change. ' +
      "The message carries HAProxy's errors: correct the change and save it again.",
  },
  ssl_expiring: {
    title: 'Certificate expiring',
    advice:
      'A certificate expires within 7 days and has not been renewed. Check that the domain still resolves to its shield servers and that port 80 reaches them; ' +
      "the domain's sslError, or the agent's log on the shield server, says why renewal failed.",
  },
  account_frozen: {
    title: 'Account frozen',
    advice:
      "The monthly charge failed because the balance is below the plan's price, so changes are refused. " +
      'Make a deposit: once it is confirmed and covers the price, the account is charged and active again.',
  },
  account_active: {
    title: 'Account active',
    advice: 'The account is active again and changes are accepted. Nothing to do.',
  },
  deposit_confirmed: {
    title: 'Deposit confirmed',
    advice: 'A deposit was confirmed and credited to the balance. Nothing to do.',
  },
};

function describeKind(kind: string): { title: string; advice: string } {
  const known = KINDS[kind];
  if (known) return known;
  const words = kind.replace(/_/g, ' ');
  return { title: words.charAt(0).toUpperCase() + words.slice(1), advice: 'See the notification list in the dashboard.' };
}

/** The message's first line, cut to fit a subject line. */
function subjectPart(message: string): string {
  const line = message.split(/\r?\n/)[0]!.trim();
  return line.length > 80 ? `${line.slice(0, 77)}...` : line;
}

export interface NotificationEmail {
  from: string;
  to: string;
  subject: string;
  text: string;
}

/** The e-mail for a notification; `from` is RAMPART_SMTP_FROM (rampart@localhost by default). */
export function notificationEmail(n: DeliverableNotification, accountEmail: string, from: string): NotificationEmail {
  const { title, advice } = describeKind(n.kind);
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
    `What to do: ${advice}`,
    '',
    ...details,
    '',
    'You get this e-mail because your Rampart account sends its notifications to this address; change that in its notification settings.',
    '',
  ].join('\n');
  return { from, to: accountEmail, subject: `[Rampart] ${title}: ${subjectPart(n.message)}`, text };
}

/**
 * One attempt to send a notification e-mail. A refusal or failure gives the SMTP server's answer
 * (its reply code as `status`) or the connection error; it never throws for a failed delivery.
 */
export async function deliverEmail(transport: Transporter, mail: NotificationEmail): Promise<DeliveryResult> {
  const result = stopwatch();
  try {
    await transport.sendMail(mail);
    return result({ ok: true });
  } catch (err) {
    const e = err as NodemailerError;
    const error = shortError(e.response ?? e.message ?? String(err));
    return result(e.responseCode === undefined ? { ok: false, error } : { ok: false, status: e.responseCode, error });
  }
}
