import { isHostname, normalizeHostname, type CertState, type SslStatus } from '@rampart/protocol';
import type { Database, Tx } from '../db/database.js';
import { getDomain } from 'tldts';
import type { ServiceContext } from '../context.js';
import { newId } from '../crypto.js';
import { deleteOrdersUpTo, deleteReports, insertOrder, liveReports, lockOrders, ordersSince, reportOf, upsertReport } from '../data/certificates.js';
import { claimExpiringCertificates, lockDomainSsl, otherServersOfDomain, servedDomain as servedDomainRow, updateDomainFields } from '../data/domains.js';
import type { DomainStatus } from '../db/schema.js';
import { notificationMessages, notify } from './notifications.js';

// The service's side of automatic certificates (ACME HTTP-01, done by the agents): it grants
// order slots within the authority's weekly cap, tells each agent which peers must serve a
// challenge, and turns every server's certificate report into the domain's sslStatus.

/**
 * The authority's cap (Let's Encrypt: certificates per registered domain), counted per account: counted
 * across accounts, any account adding a subdomain of someone else's domain could spend its cap.
 */
export const ORDERS_PER_REGISTERED_DOMAIN = 50;
export const ORDER_WINDOW_MS = 7 * 24 * 3600 * 1000;
/** ssl_expiring is raised this long before a certificate expires. */
export const EXPIRY_WARNING_MS = 7 * 24 * 3600 * 1000;

/** The agent a message came from. */
export interface AgentIdentity {
  serverId: string;
  accountId: string;
}

/**
 * The registered domain the authority counts orders under: the public suffix plus one label, with
 * the Public Suffix List's private section too (foo.github.io counts on its own, as the CA does).
 */
export function registeredDomain(host: string): string {
  return getDomain(host, { allowPrivateDomains: true }) ?? host;
}

/** The domain of that name if it is in this server's account and assigned to this (live) server. */
async function servedDomain(db: Database, agent: AgentIdentity, name: string, lock = false) {
  const domain = normalizeHostname(name);
  if (!isHostname(domain)) return undefined;
  return servedDomainRow(db, agent, domain, lock);
}

export interface SlotAnswer {
  granted: boolean;
  message: string | null;
}

/**
 * acme/slot-request: an agent may place one certificate order. Granted only for an SSL domain of
 * its own, and only while fewer than 50 orders of its registered domain were granted to its account
 * in the last 7 days. The count and the insert run under a transaction-scoped advisory lock on the
 * account and registered domain, so concurrent requests (in this process or another sharing the
 * database) never pass it.
 */
export async function requestOrderSlot(ctx: ServiceContext, agent: AgentIdentity, name: string): Promise<SlotAnswer> {
  const domain = await servedDomain(ctx.db, agent, name);
  if (!domain) return { granted: false, message: `${name.slice(0, 253)} is not a domain of this shield server` };
  if (!domain.ssl_enabled) return { granted: false, message: `SSL is turned off for ${domain.domain}` };
  const registered = registeredDomain(domain.domain);
  return ctx.db.transaction().execute(async (tx) => {
    await lockOrders(tx, agent.accountId, registered);
    const now = ctx.now();
    const recent = await ordersSince(tx, agent.accountId, registered, new Date(now.getTime() - ORDER_WINDOW_MS));
    if (recent.length >= ORDERS_PER_REGISTERED_DOMAIN) {
      // The slot frees up when enough of the oldest orders have left the window.
      const freedBy = new Date(recent[recent.length - ORDERS_PER_REGISTERED_DOMAIN]!.created_at);
      const freeAt = new Date(freedBy.getTime() + ORDER_WINDOW_MS);
      return {
        granted: false,
        message:
          `The certificate authority allows ${ORDERS_PER_REGISTERED_DOMAIN} certificates a week for ${registered} and its subdomains; ` +
          `this account ordered that many in the last 7 days, the next order can be placed after ${freeAt.toISOString()}`,
      };
    }
    await insertOrder(tx, { id: newId(), registered_domain: registered, domain: domain.domain, server_id: agent.serverId, account_id: agent.accountId, created_at: now });
    return { granted: true, message: null };
  });
}

/**
 * acme/challenge-publish: the servers that must serve this challenge besides the publisher (the
 * domain's other live servers), or null when the domain is not the publisher's to validate.
 */
export async function challengeRecipients(ctx: ServiceContext, agent: AgentIdentity, name: string): Promise<{ domain: string; serverIds: string[]; live: number } | null> {
  const domain = await servedDomain(ctx.db, agent, name);
  if (!domain) return null;
  const rows = await otherServersOfDomain(ctx.db, domain.id, agent.serverId);
  // live: the servers whose agent is connected (to this process or another one).
  return { domain: domain.domain, serverIds: rows.map((r) => r.id), live: rows.filter((r) => r.status === 'active').length };
}

export interface CertReport {
  domain: string;
  status: CertState;
  /** Unix seconds. */
  expiresAt: number | null;
  message: string | null;
}

/**
 * cert/status: stores this server's report on its certificate and recomputes the domain. A report
 * for a domain the server does not serve changes nothing (false).
 */
export async function recordCertificateStatus(ctx: ServiceContext, agent: AgentIdentity, report: CertReport): Promise<boolean> {
  return ctx.db.transaction().execute(async (tx) => {
    // The domain row lock serializes reports of several servers, so none is lost in the summary.
    const domain = await servedDomain(tx, agent, report.domain, true);
    if (!domain) return false;
    const now = ctx.now();
    const before = await reportOf(tx, domain.id, agent.serverId);
    const values = {
      status: report.status,
      expires_at: report.expiresAt === null ? null : new Date(report.expiresAt * 1000),
      message: report.message,
      updated_at: now,
    };
    await upsertReport(tx, domain.id, agent.serverId, values);
    await refreshDomainSsl(tx, domain.id);
    // A failure (issuance or renewal) is raised once: when this server's report turns to error,
    // or says another reason; the same failure retried raises nothing more.
    if (report.status === 'error' && (before?.status !== 'error' || before.message !== report.message)) {
      const message = notificationMessages.sslFailed(domain.domain, report.message ?? 'no reason given');
      await notify({ ...ctx, db: tx }, { accountId: agent.accountId, kind: 'ssl_failed', message, serverId: agent.serverId, domainId: domain.id });
    }
    return true;
  });
}

/** The domain status an SSL domain shows: its certificate's state. */
const STATUS_OF_SSL: Record<Exclude<SslStatus, 'off'>, DomainStatus> = { pending: 'pending', active: 'active', error: 'error' };

/**
 * Recomputes a domain's certificate summary from its current servers' reports (callers hold the
 * domain row or are inside the transaction that changed it):
 *  - sslEnabled off: sslStatus off, no error, no expiry; status keeps "active" when it was served,
 *    otherwise it waits for the next config/ack as for any domain without SSL.
 *  - else error if any current server reports an error (the latest such message), else active if
 *    any reports active, else pending; sslExpires is the earliest expiry among the active ones; the
 *    domain status follows sslStatus.
 * Reports of servers that left the domain are deleted.
 */
export async function refreshDomainSsl(tx: Tx, domainId: string) {
  const d = await lockDomainSsl(tx, domainId);
  if (!d) return undefined;
  await deleteReports(tx, domainId, d.ssl_enabled);
  let set: { ssl_status: SslStatus; ssl_error: string | null; ssl_expires: Date | null; status: DomainStatus };
  if (!d.ssl_enabled) {
    const status = d.ssl_status === 'off' || d.status === 'active' ? d.status : 'pending';
    set = { ssl_status: 'off', ssl_error: null, ssl_expires: null, status };
  } else {
    const reports = await liveReports(tx, domainId);
    const error = reports.find((r) => r.status === 'error');
    const active = reports.filter((r) => r.status === 'active');
    const sslStatus = error ? 'error' : active.length > 0 ? 'active' : 'pending';
    const expiries = active.flatMap((r) => (r.expires_at ? [new Date(r.expires_at).getTime()] : []));
    set = {
      ssl_status: sslStatus,
      ssl_error: error ? (error.message ?? 'Certificate issuance failed') : null,
      ssl_expires: expiries.length ? new Date(Math.min(...expiries)) : null,
      status: STATUS_OF_SSL[sslStatus],
    };
  }
  return updateDomainFields(tx, domainId, set);
}

/**
 * Health cycle: one ssl_expiring notification per certificate expiring within 7 days (or expired)
 * on a domain with SSL on. The domain remembers the expiry it warned about, so a renewed
 * certificate warns again when its own time comes; the claim and the notification commit
 * together, so several processes running the cycle warn once.
 */
export async function notifyExpiringCertificates(ctx: ServiceContext, now: Date): Promise<number> {
  return ctx.db.transaction().execute(async (tx) => {
    const due = await claimExpiringCertificates(tx, new Date(now.getTime() + EXPIRY_WARNING_MS));
    for (const d of due) {
      const message = notificationMessages.sslExpiring(d.domain, new Date(d.ssl_expires!), now);
      await notify({ ...ctx, db: tx, now: () => now }, { accountId: d.account_id, kind: 'ssl_expiring', message, domainId: d.id });
    }
    return due.length;
  });
}

/** Orders older than the window no longer count. */
export async function pruneCertificateOrders(ctx: ServiceContext, now: Date): Promise<void> {
  await deleteOrdersUpTo(ctx.db, new Date(now.getTime() - ORDER_WINDOW_MS));
}
