import type { OriginAddress } from '@rampart/protocol';
import { sql, type Insertable, type Updateable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { DomainsTable } from '../db/schema.js';

// The domains table and domain_servers, which servers serve which domain.

/** A row's origins column (jsonb), parsed when it comes as text. */
export function parseOrigins(raw: OriginAddress[] | string): OriginAddress[] {
  return typeof raw === 'string' ? (JSON.parse(raw) as OriginAddress[]) : raw;
}

export function insertDomain(db: Database | Tx, row: Insertable<DomainsTable>) {
  return db.insertInto('domains').values(row).returningAll().executeTakeFirstOrThrow();
}

/** The account's domains, by name. */
export function listDomains(db: Database | Tx, accountId: string) {
  return db.selectFrom('domains').selectAll().where('account_id', '=', accountId).orderBy('domain').execute();
}

/** Which server serves which domain, over all the account's domains. */
export function serverLinksOfAccount(db: Database | Tx, accountId: string) {
  return db
    .selectFrom('domain_servers')
    .innerJoin('domains', 'domains.id', 'domain_servers.domain_id')
    .select(['domain_servers.domain_id', 'domain_servers.server_id'])
    .where('domains.account_id', '=', accountId)
    .execute();
}

/** One domain of the account, locked for the rest of the transaction. */
export function lockDomain(db: Database | Tx, accountId: string, id: string) {
  return db.selectFrom('domains').selectAll().where('id', '=', id).where('account_id', '=', accountId).forUpdate().executeTakeFirst();
}

/** Whether the account has a domain of that id. */
export async function domainExists(db: Database | Tx, accountId: string, id: string): Promise<boolean> {
  const row = await db.selectFrom('domains').select('id').where('id', '=', id).where('account_id', '=', accountId).executeTakeFirst();
  return row !== undefined;
}

/** The caller has found (and holds) the domain. */
export function updateDomainFields(db: Database | Tx, id: string, set: Updateable<DomainsTable>) {
  return db.updateTable('domains').set(set).where('id', '=', id).returningAll().executeTakeFirstOrThrow();
}

export async function deleteDomain(db: Database | Tx, accountId: string, id: string): Promise<void> {
  await db.deleteFrom('domains').where('id', '=', id).where('account_id', '=', accountId).execute();
}

/** The domain's SSL state, its row locked for the rest of the transaction. */
export function lockDomainSsl(db: Database | Tx, domainId: string) {
  return db.selectFrom('domains').select(['ssl_enabled', 'ssl_status', 'status']).where('id', '=', domainId).forUpdate().executeTakeFirst();
}

/**
 * The domain of that (normalized) name if it is in the account and assigned to this live server;
 * `lock` holds the domain row for the rest of the transaction.
 */
export function servedDomain(db: Database | Tx, agent: { accountId: string; serverId: string }, domain: string, lock = false) {
  return db
    .selectFrom('domains')
    .innerJoin('domain_servers', 'domain_servers.domain_id', 'domains.id')
    .innerJoin('servers', 'servers.id', 'domain_servers.server_id')
    .select(['domains.id', 'domains.domain', 'domains.ssl_enabled'])
    .where('domains.account_id', '=', agent.accountId)
    .where('domains.domain', '=', domain)
    .where('domain_servers.server_id', '=', agent.serverId)
    .where('servers.status', '<>', 'decommissioned')
    .$if(lock, (q) => q.forUpdate('domains'))
    .executeTakeFirst();
}

/** The domain's live servers other than this one, with their status. */
export function otherServersOfDomain(db: Database | Tx, domainId: string, serverId: string) {
  return db
    .selectFrom('domain_servers')
    .innerJoin('servers', 'servers.id', 'domain_servers.server_id')
    .select(['servers.id', 'servers.status'])
    .where('domain_servers.domain_id', '=', domainId)
    .where('servers.id', '<>', serverId)
    .where('servers.status', '<>', 'decommissioned')
    .execute();
}

/**
 * The server's domains without SSL turn active (its configuration is running); an SSL domain is
 * active by its certificate instead.
 */
export async function activatePlainDomainsOfServer(db: Database | Tx, serverId: string): Promise<void> {
  await db
    .updateTable('domains')
    .set({ status: 'active' })
    .where('id', 'in', (eb) => eb.selectFrom('domain_servers').select('domain_id').where('server_id', '=', serverId))
    .where('ssl_enabled', '=', false)
    .where('status', '<>', 'active')
    .execute();
}

/**
 * Claims the certificates to warn about: SSL domains whose certificate expires by `before` and was
 * not warned about yet (for that expiry). Returns them.
 */
export function claimExpiringCertificates(db: Database | Tx, before: Date) {
  return db
    .updateTable('domains')
    .set({ ssl_expiring_notified_for: sql<Date>`ssl_expires` })
    .where('ssl_enabled', '=', true)
    .where('ssl_expires', 'is not', null)
    .where('ssl_expires', '<=', before)
    .where((eb) => eb.or([eb('ssl_expiring_notified_for', 'is', null), eb('ssl_expiring_notified_for', '<>', eb.ref('ssl_expires'))]))
    .returning(['id', 'account_id', 'domain', 'ssl_expires'])
    .execute();
}

// ---- domain_servers

/** Assigns these servers to the domain. */
export async function linkServers(db: Database | Tx, domainId: string, serverIds: readonly string[]): Promise<void> {
  if (serverIds.length === 0) return;
  await db
    .insertInto('domain_servers')
    .values(serverIds.map((s) => ({ domain_id: domainId, server_id: s })))
    .execute();
}

export async function unlinkServers(db: Database | Tx, domainId: string): Promise<void> {
  await db.deleteFrom('domain_servers').where('domain_id', '=', domainId).execute();
}

/** The server leaves every domain. */
export async function unlinkServer(db: Database | Tx, serverId: string): Promise<void> {
  await db.deleteFrom('domain_servers').where('server_id', '=', serverId).execute();
}

export async function serversOfDomain(db: Database | Tx, domainId: string): Promise<string[]> {
  const rows = await db.selectFrom('domain_servers').select('server_id').where('domain_id', '=', domainId).execute();
  return rows.map((r) => r.server_id);
}

/** The ids of the server's domains, in id order. */
export async function domainIdsOfServer(db: Database | Tx, serverId: string): Promise<string[]> {
  const rows = await db.selectFrom('domain_servers').select('domain_id').where('server_id', '=', serverId).orderBy('domain_id').execute();
  return rows.map((r) => r.domain_id);
}

/** The names of the server's domains. */
export async function domainNamesOfServer(db: Database | Tx, serverId: string): Promise<string[]> {
  const rows = await db.selectFrom('domain_servers').innerJoin('domains', 'domains.id', 'domain_servers.domain_id').select('domains.domain').where('domain_servers.server_id', '=', serverId).execute();
  return rows.map((d) => d.domain);
}

/**
 * The servers sharing at least one domain with this one, itself included when it has a domain:
 * their snapshots list its address (serverAddresses).
 */
export async function serversSharingDomains(db: Database | Tx, serverId: string): Promise<string[]> {
  const rows = await db
    .selectFrom('domain_servers as mine')
    .innerJoin('domain_servers as peer', 'peer.domain_id', 'mine.domain_id')
    .select('peer.server_id')
    .distinct()
    .where('mine.server_id', '=', serverId)
    .execute();
  return rows.map((r) => r.server_id);
}

// ---- DNS failover

/** The names of the account's domains with DNS failover on, by name. */
export async function failoverDomainNames(db: Database | Tx, accountId: string): Promise<string[]> {
  const rows = await db.selectFrom('domains').select('domain').where('account_id', '=', accountId).where('dns_failover', '=', true).orderBy('domain').execute();
  return rows.map((r) => r.domain);
}

/**
 * Every domain with DNS failover on, with its account's plan and, one row each, its live servers'
 * addresses and health verdicts (server_id null for a domain left without one). One query.
 */
export function failoverDomainServers(db: Database | Tx) {
  return db
    .selectFrom('domains')
    .innerJoin('accounts', 'accounts.id', 'domains.account_id')
    .leftJoin('domain_servers', 'domain_servers.domain_id', 'domains.id')
    .leftJoin('servers', (j) => j.onRef('servers.id', '=', 'domain_servers.server_id').on('servers.status', '<>', 'decommissioned'))
    .select([
      'domains.id',
      'domains.account_id',
      'domains.domain',
      'domains.dns_addresses',
      'domains.dns_error',
      'accounts.plan',
      'servers.id as server_id',
      'servers.public_ip',
      'servers.ip',
      'servers.healthy',
    ])
    .where('domains.dns_failover', '=', true)
    .orderBy('domains.id')
    .execute();
}

/** What the last publication left: the addresses published and the error, if any. */
export async function setDomainDns(db: Database | Tx, id: string, set: { dns_addresses?: string | null; dns_error: string | null }): Promise<void> {
  await db.updateTable('domains').set(set).where('id', '=', id).where('dns_failover', '=', true).execute();
}
