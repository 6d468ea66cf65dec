import type { Insertable } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import type { AgentConnectionsTable } from '../db/schema.js';

// The agent_connections table: each server's live agent connection, held by one control-plane
// process, with the heartbeat that process writes.

export type ConnectionRow = Omit<Insertable<AgentConnectionsTable>, 'server_id'>;

/** The live connection of a server, if any. */
export function connectionOfServer(db: Database | Tx, serverId: string) {
  return db.selectFrom('agent_connections').select(['connection_id', 'process_id']).where('server_id', '=', serverId).executeTakeFirst();
}

/** The last heartbeat of these servers' connections (none for a server without one). */
export function heartbeatsOf(db: Database | Tx, serverIds: readonly string[]) {
  return db
    .selectFrom('agent_connections')
    .select(['server_id', 'last_heartbeat_at'])
    .where('server_id', 'in', [...serverIds])
    .execute();
}

/** This connection becomes the server's live one, replacing any other. */
export async function upsertConnection(db: Database | Tx, serverId: string, row: ConnectionRow): Promise<void> {
  await db
    .insertInto('agent_connections')
    .values({ server_id: serverId, ...row })
    .onConflict((oc) => oc.column('server_id').doUpdateSet(row))
    .execute();
}

/**
 * Deletes the server's row if it is still this connection's (and, with `heartbeatBefore`, only if
 * its heartbeat is that old); returns the servers whose row went (none or this one).
 */
export async function deleteConnection(db: Database | Tx, serverId: string, connectionId: string, heartbeatBefore?: Date): Promise<string[]> {
  const rows = await db
    .deleteFrom('agent_connections')
    .where('server_id', '=', serverId)
    .where('connection_id', '=', connectionId)
    .$if(heartbeatBefore !== undefined, (q) => q.where('last_heartbeat_at', '<=', heartbeatBefore!))
    .returning('server_id')
    .execute();
  return rows.map((r) => r.server_id);
}

/** A decommissioned server's connection goes, whichever it is. */
export async function deleteConnectionOfServer(db: Database | Tx, serverId: string): Promise<void> {
  await db.deleteFrom('agent_connections').where('server_id', '=', serverId).execute();
}

/** Every connection a process holds goes; returns their servers. */
export async function deleteConnectionsOfProcess(db: Database | Tx, processId: string): Promise<string[]> {
  const rows = await db.deleteFrom('agent_connections').where('process_id', '=', processId).returning('server_id').execute();
  return rows.map((r) => r.server_id);
}

/** Writes the heartbeat of these connections; returns those still recorded (the others were replaced or expired). */
export async function touchConnections(db: Database | Tx, connectionIds: readonly string[], now: Date): Promise<string[]> {
  const rows = await db
    .updateTable('agent_connections')
    .set({ last_heartbeat_at: now })
    .where('connection_id', 'in', [...connectionIds])
    .returning('connection_id')
    .execute();
  return rows.map((r) => r.connection_id);
}

/** Connections whose heartbeat is at `cutoff` or older. */
export function staleConnections(db: Database | Tx, cutoff: Date) {
  return db.selectFrom('agent_connections').select(['server_id', 'connection_id']).where('last_heartbeat_at', '<=', cutoff).execute();
}
