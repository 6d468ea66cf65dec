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
      'servers.healthy',
      'servers.health_error',
      'servers.health_checked_at',
      'servers.agent_version',
      'servers.agent_refused',
      'servers.canary',
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
  return db.selectFrom('servers').select(['id', 'account_id', 'name', 'ip', 'public_ip', 'status', 'healthy', 'health_error']).where('id', '=', serverId).forUpdate().executeTakeFirst();
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
  return db.updateTable('servers').set({ status: 'decommissioned', token_hash: null }).where('id', '=', id).where('account_id', '=', accountId).returningAll().executeTakeFirstOrThrow();
}

/** The caller has found and locked the server in its account. */
export function updateServerFields(db: Database | Tx, id: string, set: { name?: string; public_ip?: string | null; canary?: boolean }) {
  return db.updateTable('servers').set(set).where('id', '=', id).returningAll().executeTakeFirstOrThrow();
}

/**
 * Its agent is connected from this address, with what the connection reported: the port its
 * HAProxy serves HTTP on and whether HAProxy serves (null: not said, or not yet).
 */
export async function markServerConnected(
  db: Database | Tx,
  serverId: string,
  ip: string,
  now: Date,
  reported: { httpPort: number | null; proxyServing: boolean | null; agentVersion?: string | undefined } = { httpPort: null, proxyServing: null },
): Promise<void> {
  await db
    .updateTable('servers')
    .set({
      status: 'active',
      ip,
      last_seen_at: now,
      http_port: reported.httpPort,
      proxy_serving: reported.proxyServing,
      ...(reported.agentVersion !== undefined ? { agent_version: reported.agentVersion } : {}),
      agent_refused: null,
    })
    .where('id', '=', serverId)
    .execute();
}

/** An agent's hello was refused (its protocol is not spoken here): what it said it was, and why. */
export async function markAgentRefused(db: Database | Tx, serverId: string, agentVersion: string | null, reason: string): Promise<void> {
  await db.updateTable('servers').set({ agent_version: agentVersion, agent_refused: reason }).where('id', '=', serverId).where('status', '<>', 'decommissioned').execute();
}

/** What the agent's heartbeat says of its HAProxy. */
/** The health_error of a server whose agent reports that HAProxy is not serving. */
export const PROXY_NOT_SERVING = 'The agent reports that HAProxy is not serving';

/**
 * What the agent's heartbeat says of its HAProxy. Not serving turns the server unhealthy at once
 * (the agent's own report says why; the health cycle, finding it down, raises nothing more).
 */
export async function setProxyServing(db: Database | Tx, serverId: string, serving: boolean): Promise<void> {
  await db.updateTable('servers').set({ proxy_serving: serving }).where('id', '=', serverId).where('status', '<>', 'decommissioned').execute();
}

/** A verdict that no longer holds (the agent reconnected): unknown until the next health check. */
export async function clearServerVerdict(db: Database | Tx, serverId: string): Promise<void> {
  await db.updateTable('servers').set({ healthy: null, health_error: null }).where('id', '=', serverId).execute();
}

/**
 * These live servers are down (their agent disconnected): healthy turns false with the reason.
 * Returns those that were not down already, whose outage is new: the caller raises server_down
 * for them, and the health cycle, finding them down, raises nothing more for the same outage.
 */
export function markServersDown(db: Database | Tx, serverIds: readonly string[], reason: string) {
  return db
    .updateTable('servers')
    .set({ healthy: false, health_error: reason })
    .where('id', 'in', [...serverIds])
    .where('status', '<>', 'decommissioned')
    .where('healthy', 'is distinct from', false)
    .returning(['id', 'account_id', 'name'])
    .execute();
}

/**
 * Every live server with what the health cycle decides on: its address, the port and serving
 * state its agent reported, its last verdict, and its connection's last heartbeat (null without
 * one). One query for the whole fleet.
 */
export function healthCandidates(db: Database | Tx) {
  return db
    .selectFrom('servers')
    .leftJoin('agent_connections', 'agent_connections.server_id', 'servers.id')
    .select([
      'servers.id',
      'servers.account_id',
      'servers.name',
      'servers.ip',
      'servers.public_ip',
      'servers.http_port',
      'servers.proxy_serving',
      'servers.healthy',
      'servers.last_seen_at',
      'agent_connections.last_heartbeat_at',
    ])
    .where('servers.status', '<>', 'decommissioned')
    .execute();
}

/** One server's verdict as the health cycle writes it. */
export interface HealthVerdict {
  id: string;
  /** null: unknown (its agent never connected). */
  healthy: boolean | null;
  error: string | null;
  /** Keep the stored verdict (only the reason and the time are written). */
  keep: boolean;
  /**
   * What the verdict assumed of the agent's connection: written only if that still holds when
   * writing (a connection that came or went during the probes waits for the next cycle). null:
   * either way.
   */
  connected: boolean | null;
}

/**
 * Writes the cycle's verdicts in one statement: healthy, health_error and health_checked_at.
 * Each row is locked first and its verdict before is returned with the one written (`was` and
 * `healthy`), so the caller raises server_down and server_recovered on the transitions only, and
 * the disconnect path (markServersDown, which takes the same row lock) and the cycle never both
 * see the same transition. A server whose connection changed since it was read is left alone.
 */
export async function writeHealthVerdicts(db: Database | Tx, verdicts: readonly HealthVerdict[], now: Date, heartbeatAfter: Date) {
  if (verdicts.length === 0) return [];
  const { rows } = await sql<{ id: string; account_id: string; name: string; was: boolean | null; healthy: boolean | null }>`
    with v as (
      select * from jsonb_to_recordset(${JSON.stringify(verdicts)}::jsonb)
        as v(id uuid, healthy boolean, error text, keep boolean, connected boolean)
    ), old as (
      select s.id, s.healthy from servers s join v on v.id = s.id
      where s.status <> 'decommissioned'
      order by s.id
      for update of s
    )
    update servers s
    set healthy = case when v.keep then old.healthy else v.healthy end,
        health_error = v.error,
        health_checked_at = ${now}
    from v join old on old.id = v.id
    where s.id = v.id
      and (v.connected is null or v.connected = exists (
        select 1 from agent_connections c where c.server_id = s.id and c.last_heartbeat_at > ${heartbeatAfter}
      ))
    returning s.id, s.account_id, s.name, old.healthy as was, s.healthy as healthy`.execute(db);
  return rows;
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
  await db
    .updateTable('servers')
    .set({ last_seen_at: now })
    .where('id', 'in', [...serverIds])
    .execute();
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

/**
 * Bumps desired_revision of the given servers (of this account) and returns their ids. Only the
 * revisions: a change of the configuration bumps through services/rollouts.ts bumpForChange, which
 * also takes it through the account's rollout; a server's new address reaches its peers at once.
 */
export async function bumpServers(db: Database | Tx, accountId: string, serverIds: readonly string[]): Promise<string[]> {
  if (serverIds.length === 0) return [];
  return bump(db, accountId, serverIds);
}

/** Bumps every live server of the account (global and server-wide rules touch them all); returns their ids. */
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
