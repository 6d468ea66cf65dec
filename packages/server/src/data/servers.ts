import { sql, type Insertable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { ServersTable } from '../db/schema.js';

// The servers table: shield servers, their lifecycle, address and revisions.

export function insertServer(db: Database | Tx, row: Insertable<ServersTable>) {
  return db.insertInto('servers').values(row).returningAll().executeTakeFirstOrThrow();
}

/** The account's servers, oldest first, each with its connection's last heartbeat (null without one). */
export function listServersWithHeartbeat(db: Database | Tx, accountId: string) {
  return db
    .selectFrom('servers')
    .leftJoin('agent_connections', 'agent_connections.server_id', 'servers.id')
    .select([
      'servers.id',
      'servers.name',
      'servers.status',
      'servers.ip',
      'servers.public_ip',
      'servers.last_seen_at',
      'servers.desired_revision',
      'servers.applied_revision',
      'servers.created_at',
      'agent_connections.last_heartbeat_at',
    ])
    .where('servers.account_id', '=', accountId)
    .orderBy('servers.created_at')
    .orderBy('servers.id')
    .execute();
}

/** One server of the account; `lock` holds its row for the rest of the transaction. */
export function findServer(db: Database | Tx, accountId: string, id: string, lock = false) {
  return db
    .selectFrom('servers')
    .selectAll()
    .where('id', '=', id)
    .where('account_id', '=', accountId)
    .$if(lock, (q) => q.forUpdate())
    .executeTakeFirst();
}

/**
 * A server's row, locked for the rest of the transaction, whatever its account (the caller knows
 * the server from its agent): what its agent's connection and notifications are serialized by.
 */
export function lockServer(db: Database | Tx, serverId: string) {
  return db.selectFrom('servers').select(['id', 'account_id', 'ip', 'public_ip', 'status']).where('id', '=', serverId).forUpdate().executeTakeFirst();
}

/** The server a connection token (by its SHA-256) belongs to. */
export function findServerByTokenHash(db: Database | Tx, tokenHash: string) {
  return db.selectFrom('servers').select(['id', 'account_id', 'status']).where('token_hash', '=', tokenHash).executeTakeFirst();
}

/** Those of the given ids that are live (not decommissioned) servers of the account. */
export async function liveServerIds(db: Database | Tx, accountId: string, ids: readonly string[]): Promise<string[]> {
  const rows = await db
    .selectFrom('servers')
    .select('id')
    .where('account_id', '=', accountId)
    .where('id', 'in', [...ids])
    .where('status', '<>', 'decommissioned')
    .execute();
  return rows.map((r) => r.id);
}

export function setServerTokenHash(db: Database | Tx, accountId: string, id: string, tokenHash: string) {
  return db.updateTable('servers').set({ token_hash: tokenHash }).where('id', '=', id).where('account_id', '=', accountId).returningAll().executeTakeFirstOrThrow();
}

/** Final: the token is erased. */
export function markServerDecommissioned(db: Database | Tx, accountId: string, id: string) {
  return db
    .updateTable('servers')
    .set({ status: 'decommissioned', token_hash: null })
    .where('id', '=', id)
    .where('account_id', '=', accountId)
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** The caller has found and locked the server in its account. */
export function updateServerFields(db: Database | Tx, id: string, set: { name?: string; public_ip?: string | null }) {
  return db.updateTable('servers').set(set).where('id', '=', id).returningAll().executeTakeFirstOrThrow();
}

/** Its agent said hello from this address. */
export async function markServerConnected(db: Database | Tx, serverId: string, ip: string, now: Date): Promise<void> {
  await db.updateTable('servers').set({ status: 'active', ip, last_seen_at: now }).where('id', '=', serverId).execute();
}

/** The live ones of these servers turn offline; returns them. */
export function markServersOffline(db: Database | Tx, serverIds: readonly string[]) {
  return db
    .updateTable('servers')
    .set({ status: 'offline' })
    .where('id', 'in', [...serverIds])
    .where('status', '<>', 'decommissioned')
    .returning(['id', 'account_id', 'name'])
    .execute();
}

export async function touchServersLastSeen(db: Database | Tx, serverIds: readonly string[], now: Date): Promise<void> {
  await db.updateTable('servers').set({ last_seen_at: now }).where('id', 'in', [...serverIds]).execute();
}

/** The server's desired revision; undefined for a missing server. */
export async function desiredRevision(db: Database | Tx, serverId: string): Promise<number | undefined> {
  const row = await db.selectFrom('servers').select('desired_revision').where('id', '=', serverId).executeTakeFirst();
  return row && Number(row.desired_revision);
}

/**
 * Stores an acknowledged revision (appliedRevision only moves forward) and the server's
 * lastSeenAt; returns the applied revision now stored, undefined for a missing server.
 */
export async function recordAppliedRevision(db: Database | Tx, serverId: string, revision: number, now: Date): Promise<number | undefined> {
  const row = await db
    .updateTable('servers')
    .set((eb) => ({ applied_revision: sql<number>`greatest(${eb.ref('applied_revision')}, ${revision})`, last_seen_at: now }))
    .where('id', '=', serverId)
    .returning('applied_revision')
    .executeTakeFirst();
  return row && Number(row.applied_revision);
}

/** Bumps desired_revision of the given servers (of this account) and returns their ids. */
export async function bumpServers(db: Database | Tx, accountId: string, serverIds: readonly string[]): Promise<string[]> {
  if (serverIds.length === 0) return [];
  return bump(db, accountId, serverIds);
}

/** Bumps every live server of the account (global and server-wide rules touch them all). */
export function bumpAllServers(db: Database | Tx, accountId: string): Promise<string[]> {
  return bump(db, accountId);
}

/** Adds 1 to desired_revision of the account's live servers, those given or all of them; returns their ids. */
async function bump(db: Database | Tx, accountId: string, serverIds?: readonly string[]): Promise<string[]> {
  const rows = await db
    .updateTable('servers')
    .set({ desired_revision: sql<number>`desired_revision + 1` })
    .where('account_id', '=', accountId)
    .$if(serverIds !== undefined, (q) => q.where('id', 'in', [...serverIds!]))
    .where('status', '<>', 'decommissioned')
    .returning('id')
    .execute();
  return rows.map((r) => r.id);
}
