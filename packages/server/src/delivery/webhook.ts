import { createHmac, timingSafeEqual } from 'node:crypto';
import dns, { type LookupAddress } from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import type { LookupFunction } from 'node:net';
import { isIP } from 'node:net';
import { isPublicAddress } from './addresses.js';
import { shortError, stopwatch, type DeliverableNotification, type DeliveryResult } from './types.js';

// Webhook delivery: a signed JSON POST to the account's URL (docs/notifications.md).

export const TIMESTAMP_HEADER = 'X-Rampart-Timestamp';
export const SIGNATURE_HEADER = 'X-Rampart-Signature';
export const WEBHOOK_URL_MAX_LENGTH = 2048;
/** At most this much of a receiver's answer is read, then the connection is dropped. */
const RESPONSE_READ_LIMIT = 64 * 1024;

/** The body of a webhook: the notification as the API shows it, in a fixed key order. */
export function webhookBody(n: DeliverableNotification): string {
  return JSON.stringify({
    id: n.id,
    kind: n.kind,
    message: n.message,
    serverId: n.serverId ?? null,
    domainId: n.domainId ?? null,
    createdAt: new Date(n.createdAt).toISOString(),
  });
}

/**
 * `sha256=` and the hex HMAC-SHA256 of `${timestamp}.${body}` under the account's secret: the
 * timestamp is signed with the body so a captured request cannot be replayed later.
 */
export function signWebhook(secret: string, timestamp: number, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')}`;
}

/** One header's value whatever the case of its name; a repeated header counts as absent. */
function headerValue(headers: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const key = Object.keys(headers).find((k) => k.toLowerCase() === name.toLowerCase());
  const value = key === undefined ? undefined : headers[key];
  return typeof value === 'string' ? value : undefined;
}

/**
 * What a receiver does with a webhook: true when its signature is the one `secret` gives for this
 * body and timestamp, and the timestamp is within `toleranceSeconds` of `nowSeconds` (either
 * way). `body` must be the raw bytes received, before any JSON parsing.
 */
export function verifyWebhook(secret: string, headers: Record<string, string | string[] | undefined>, body: string, nowSeconds: number, toleranceSeconds = 300): boolean {
  const timestamp = headerValue(headers, TIMESTAMP_HEADER);
  const signature = headerValue(headers, SIGNATURE_HEADER);
  if (!timestamp || !signature || !/^\d{1,12}$/.test(timestamp)) return false;
  if (Math.abs(nowSeconds - Number(timestamp)) > toleranceSeconds) return false;
  const expected = Buffer.from(signWebhook(secret, Number(timestamp), body));
  const given = Buffer.from(signature);
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/** A URL's host without IPv6 brackets or a trailing dot, as an address or a DNS name. */
export function bareHost(url: URL): string {
  return url.hostname.replace(/^\[(.*)\]$/, '$1').replace(/\.$/, '');
}

/** Whether a host is known to be non-public without asking DNS: an address, or a localhost name (RFC 6761). */
export function isKnownPrivateHost(host: string): boolean {
  if (isIP(host)) return !isPublicAddress(host);
  const name = host.toLowerCase();
  return name === 'localhost' || name.endsWith('.localhost');
}

/**
 * Why a webhook URL cannot be used, or null when it can: it must be http or https, carry no
 * credentials (the signature authenticates a request), fit in 2048 characters and, unless
 * private addresses are allowed, not name one. A name's addresses are checked at delivery.
 * The URL parser reads 2130706433, 0x7f.0.0.1 and 017700000001 as 127.0.0.1, so those forms
 * are caught too.
 */
export function checkWebhookUrl(url: string, allowPrivate: boolean): string | null {
  if (url.length > WEBHOOK_URL_MAX_LENGTH) return `webhookUrl: must be at most ${WEBHOOK_URL_MAX_LENGTH} characters`;
  const parsed = URL.canParse(url) ? new URL(url) : null;
  if (parsed?.protocol !== 'https:' && parsed?.protocol !== 'http:') {
    return 'webhookUrl: must be an http or https URL such as https://hooks.example.com/rampart';
  }
  if (parsed.username || parsed.password) return 'webhookUrl: must not contain a user name or password';
  if (!allowPrivate && isKnownPrivateHost(bareHost(parsed))) {
    return `webhookUrl: ${parsed.hostname} is a private or reserved address; webhooks are sent to public addresses only`;
  }
  return null;
}

/** Settles with `promise`, or rejects when `signal` aborts first. */
export function beforeAbort<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise((resolve, reject) => {
    // The signal's reason: an Error (AbortError, TimeoutError or the one abort() was given), wrapped if it is not one.
    const onAbort = () => reject(signal.reason instanceof Error ? signal.reason : new Error('aborted', { cause: signal.reason }));
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/**
 * All the addresses the URL's host resolves to; when private addresses are not allowed, an error
 * if any of them is not public (a name with one public and one private address could be
 * answered either way when connecting).
 */
export async function resolveHost(url: URL, allowPrivate: boolean): Promise<LookupAddress[]> {
  const host = bareHost(url);
  const addresses = await dns.promises.lookup(host, { all: true, verbatim: true });
  const refused = allowPrivate ? undefined : addresses.find((a) => !isPublicAddress(a.address));
  if (refused) throw new Error(`refused: ${host} resolves to ${refused.address}, a private or reserved address`);
  return addresses;
}

/**
 * A lookup that answers with the addresses already checked, so the connection goes where the
 * check said and a DNS answer that changes in between (DNS rebinding) cannot redirect it.
 */
export function pinnedLookup(addresses: LookupAddress[]): LookupFunction {
  return (_host, options, callback) => {
    if (options.all) callback(null, addresses);
    else callback(null, addresses[0]!.address, addresses[0]!.family);
  };
}

/** Reads a response up to the limit, keeping none of it, then drops it. */
function discard(res: http.IncomingMessage): void {
  let read = 0;
  res.on('data', (chunk: Buffer) => {
    read += chunk.length;
    if (read >= RESPONSE_READ_LIMIT) res.destroy();
  });
  // The status is already taken: a body cut short (by the limit, the receiver or the timeout) is no error.
  res.on('error', () => {});
}

/**
 * POSTs the body to the URL over a connection to the checked addresses, and gives the status of
 * the answer. Host and TLS server name stay the URL's host; redirects are answers like any other.
 */
function post(url: URL, addresses: LookupAddress[], headers: Record<string, string>, body: string, signal: AbortSignal): Promise<number> {
  return new Promise((resolve, reject) => {
    const client = url.protocol === 'https:' ? https : http;
    const req = client.request(url, { method: 'POST', headers, signal, agent: false, lookup: pinnedLookup(addresses) }, (res) => {
      discard(res);
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end(body);
  });
}

export interface WebhookOptions {
  /** RAMPART_ALLOW_PRIVATE_WEBHOOKS=1: the operator lets webhooks reach private addresses. */
  allowPrivate: boolean;
  /** The whole attempt, DNS included, gives up after this long. */
  timeoutMs?: number;
  now: () => Date;
}

function statusError(status: number): string {
  if (status >= 300 && status < 400) return `the receiver answered HTTP ${status}; redirects are not followed`;
  return `the receiver answered HTTP ${status}`;
}

/**
 * One attempt to deliver a notification to a webhook. Any 2xx answer is a success; everything
 * else (another status, a refused address, a DNS or connection error, the timeout) is a failure
 * with a short reason. It never throws for a failed delivery.
 */
export async function deliverWebhook(url: string, secret: string, n: DeliverableNotification, options: WebhookOptions): Promise<DeliveryResult> {
  const result = stopwatch();
  const invalid = checkWebhookUrl(url, options.allowPrivate);
  if (invalid) return result({ ok: false, error: invalid });
  const timeoutMs = options.timeoutMs ?? 10_000;
  const deadline = AbortSignal.timeout(timeoutMs);
  const target = new URL(url);
  const body = webhookBody(n);
  const timestamp = Math.floor(options.now().getTime() / 1000);
  const headers = {
    'Content-Type': 'application/json',
    'Content-Length': String(Buffer.byteLength(body)),
    'User-Agent': 'Rampart-Webhooks/1',
    [TIMESTAMP_HEADER]: String(timestamp),
    [SIGNATURE_HEADER]: signWebhook(secret, timestamp, body),
  };
  try {
    const addresses = await beforeAbort(resolveHost(target, options.allowPrivate), deadline);
    const status = await post(target, addresses, headers, body, deadline);
    return result(status >= 200 && status < 300 ? { ok: true, status } : { ok: false, status, error: statusError(status) });
  } catch (err) {
    if (deadline.aborted) return result({ ok: false, error: `timed out after ${timeoutMs} ms` });
    return result({ ok: false, error: shortError(err instanceof Error ? err.message : String(err)) });
  }
}
