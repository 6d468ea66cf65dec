import { sql, type Insertable } from 'kysely';
import type { CertState } from '@rampart/protocol';
import type { Database, Tx } from '../db/database.js';
import type { CertificateOrdersTable } from '../db/schema.js';

// domain_certificates (each server's report on its certificate for a domain) and
// certificate_orders (the order slots granted, counted against the authority's weekly cap).

/** First key of the advisory locks taken here, so they cannot meet another feature's. */
const ORDER_LOCK_SPACE = 0x5241_4d50; // "RAMP"

/**
 * Serializes, until the transaction ends, the order slots of one account and registered domain
 * (in this process or another sharing the database), so a count and its insert are never raced.
 */
export async function lockOrders(tx: Tx, accountId: string, registeredDomain: string): Promise<void> {
  await sql`select pg_advisory_xact_lock(${ORDER_LOCK_SPACE}, hashtext(${`${accountId}/${registeredDomain}`}))`.execute(tx);
}

/** When the account's orders of this registered domain since then were granted, oldest first. */
export function ordersSince(db: Database | Tx, accountId: string, registeredDomain: string, since: Date) {
  return db
    .selectFrom('certificate_orders')
    .select('created_at')
    .where('account_id', '=', accountId)
    .where('registered_domain', '=', registeredDomain)
    .where('created_at', '>', since)
    .orderBy('created_at')
    .execute();
}

export async function insertOrder(db: Database | Tx, row: Insertable<CertificateOrdersTable>): Promise<void> {
  await db.insertInto('certificate_orders').values(row).execute();
}

/** Orders granted at `cutoff` or before go. */
export async function deleteOrdersUpTo(db: Database | Tx, cutoff: Date): Promise<void> {
  await db.deleteFrom('certificate_orders').where('created_at', '<=', cutoff).execute();
}

export interface CertReportRow {
  status: CertState;
  expires_at: Date | null;
  message: string | null;
  updated_at: Date;
}

/** Stores this server's latest report on its certificate for the domain. */
export async function upsertReport(db: Database | Tx, domainId: string, serverId: string, values: CertReportRow): Promise<void> {
  await db
    .insertInto('domain_certificates')
    .values({ domain_id: domainId, server_id: serverId, ...values })
    .onConflict((oc) => oc.columns(['domain_id', 'server_id']).doUpdateSet(values))
    .execute();
}

/** This server's last report on the domain's certificate, if any. */
export function reportOf(db: Database | Tx, domainId: string, serverId: string) {
  return db.selectFrom('domain_certificates').select(['status', 'message']).where('domain_id', '=', domainId).where('server_id', '=', serverId).executeTakeFirst();
}

/** The domain's reports go: all of them, or with `departedOnly` those of servers no longer on the domain. */
export async function deleteReports(db: Database | Tx, domainId: string, departedOnly: boolean): Promise<void> {
  await db
    .deleteFrom('domain_certificates')
    .where('domain_id', '=', domainId)
    .$if(departedOnly, (q) => q.where('server_id', 'not in', (eb) => eb.selectFrom('domain_servers').select('server_id').where('domain_id', '=', domainId)))
    .execute();
}

/** The domain's reports from live servers, the most recent first. */
export function liveReports(db: Database | Tx, domainId: string) {
  return db
    .selectFrom('domain_certificates')
    .innerJoin('servers', 'servers.id', 'domain_certificates.server_id')
    .select(['domain_certificates.status', 'domain_certificates.expires_at', 'domain_certificates.message'])
    .where('domain_certificates.domain_id', '=', domainId)
    .where('servers.status', '<>', 'decommissioned')
    .orderBy('domain_certificates.updated_at', 'desc')
    .orderBy('domain_certificates.server_id')
    .execute();
}
