import { isIP } from '@rampart/protocol';
import type { Tx } from '../db/database.js';
import { newId, newServerToken, sha256 } from '../crypto.js';
import type { ServiceContext } from '../context.js';
import { isUuid, iso } from '../values.js';
import { lockAccount } from '../data/accounts.js';
import { deleteConnectionOfServer, heartbeatsOf } from '../data/agent-connections.js';
import { domainIdsOfServer, serversSharingDomains, unlinkServer } from '../data/domains.js';
import {
  bumpServers,
  findServer,
  findServerByTokenHash,
  insertServer,
  listServersWithHeartbeat,
  markAgentRefused,
  markServerDecommissioned,
  PROXY_NOT_SERVING,
  setServerTokenHash,
  updateServerFields,
} from '../data/servers.js';
import { AppError, invalidField } from '../errors.js';
import { enforceLimit } from './limits.js';
import { planName, type Plan } from '../plans.js';
import type { ServerStatus } from '../db/schema.js';
import { agentChannelStore, type AgentChannelStore } from './agent-channel.js';
import { refreshDomainSsl } from './certificates.js';
import { notificationMessages, notifyFromServer } from './notifications.js';
import { recordAudit, SYSTEM_ACTOR, type Actor } from './audit.js';

type ServerRow = {
  id: string;
  name: string;
  status: ServerStatus;
  ip: string | null;
  public_ip: string | null;
  last_seen_at: Date | string | null;
  desired_revision: unknown;
  applied_revision: unknown;
  created_at: Date | string;
  healthy: boolean | null;
  health_error: string | null;
  health_checked_at: Date | string | null;
  agent_version: string | null;
  agent_refused: string | null;
  canary: boolean;
};

export function serverView(s: ServerRow) {
  return {
    id: s.id,
    name: s.name,
    status: s.status,
    ip: s.ip,
    publicIp: s.public_ip,
    lastSeenAt: iso(s.last_seen_at),
    desiredRevision: Number(s.desired_revision),
    appliedRevision: Number(s.applied_revision),
    // The health cycle's last verdict (services/health.ts); null before the first, or while its agent has never connected.
    healthy: s.healthy,
    healthError: s.health_error,
    healthCheckedAt: iso(s.health_checked_at),
    agentVersion: s.agent_version,
    agentRefused: s.agent_refused,
    canary: s.canary,
    createdAt: iso(s.created_at)!,
  };
}

/** A server's settings as the audit log shows them. */
const auditedServer = (s: { name: string; public_ip: string | null; status: string; canary: boolean }) => ({ name: s.name, publicIp: s.public_ip, status: s.status, canary: s.canary });

export async function createServer(ctx: ServiceContext, accountId: string, name: string, actor: Actor = SYSTEM_ACTOR) {
  return ctx.db.transaction().execute(async (tx) => {
    const account = await lockAccount(tx, accountId);
    if (!account) throw new AppError('account_not_found');
    const max = ctx.plans[account.plan as Plan].maxServers;
    await enforceLimit(tx, accountId, 'servers', max, 'server_limit', `Maximum ${max} servers allowed on the ${planName(account.plan)} plan`);
    const token = newServerToken();
    const row = await insertServer(tx, { id: newId(), account_id: accountId, name, token_hash: sha256(token), status: 'offline', created_at: ctx.now() });
    await recordAudit(tx, ctx, accountId, actor, { objectType: 'server', objectId: row.id, action: 'create', after: { ...auditedServer(row), connectionToken: token }, secrets: ['connectionToken'] });
    return { ...serverView(row), connectionToken: token };
  });
}

export async function listServers(ctx: ServiceContext, accountId: string) {
  const rows = await listServersWithHeartbeat(ctx.db, accountId);
  const now = ctx.now();
  return rows.map((r) => serverView({ ...r, status: serverStatus(r.status, r.last_heartbeat_at === null ? null : { last_heartbeat_at: r.last_heartbeat_at }, now) }));
}

async function liveServer(ctx: ServiceContext, accountId: string, id: string) {
  if (!isUuid(id)) throw new AppError('server_not_found');
  const row = await findServer(ctx.db, accountId, id);
  if (!row) throw new AppError('server_not_found');
  if (row.status === 'decommissioned') throw new AppError('server_decommissioned');
  return row;
}

/** A new connection token; the old one stops working at once. */
export async function regenerateServerToken(ctx: ServiceContext, accountId: string, id: string, actor: Actor = SYSTEM_ACTOR) {
  await liveServer(ctx, accountId, id);
  const token = newServerToken();
  const row = await ctx.db.transaction().execute(async (tx) => {
    const row = await setServerTokenHash(tx, accountId, id, sha256(token));
    await recordAudit(tx, ctx, accountId, actor, {
      objectType: 'server',
      objectId: id,
      action: 'regenerate_token',
      before: { connectionToken: 'old' },
      after: { connectionToken: 'new' },
      secrets: ['connectionToken'],
    });
    return row;
  });
  ctx.serversChanged([id]); // the hub drops a connection made with the old token
  return { ...(await viewWithStatus(ctx, row)), connectionToken: token };
}

/** Decommissioning is final: the token is erased and the server leaves every domain. */
export async function decommissionServer(ctx: ServiceContext, accountId: string, id: string, actor: Actor = SYSTEM_ACTOR) {
  const current = await liveServer(ctx, accountId, id);
  const { row, touched } = await ctx.db.transaction().execute(async (tx) => {
    // Its peers list its address in their snapshots, and its certificates no longer count.
    const peers = await serversSharingDomains(tx, id);
    const domains = await domainIdsOfServer(tx, id);
    await unlinkServer(tx, id);
    await deleteConnectionOfServer(tx, id); // its agent is closed (4001)
    const row = await markServerDecommissioned(tx, accountId, id);
    await recordAudit(tx, ctx, accountId, actor, { objectType: 'server', objectId: id, action: 'delete', before: auditedServer(current), after: auditedServer(row) });
    for (const domainId of domains) await refreshDomainSsl(tx, domainId);
    return { row, touched: await bumpServers(tx, accountId, peers) };
  });
  ctx.serversChanged([id, ...touched]);
  return serverView(row);
}

export interface ServerPatch {
  name?: string | undefined;
  /** null clears it: the address the agent connects from is used again. */
  publicIp?: string | null | undefined;
  /** Staged rollout: the server gets changes first (services/rollouts.ts). */
  canary?: boolean | undefined;
}

/** The address a server is reached at: the one set by the user, else the one its agent connected from. */
export const serverAddress = (s: { public_ip: string | null; ip: string | null }): string | null => s.public_ip ?? s.ip;

export async function updateServer(ctx: ServiceContext, accountId: string, id: string, patch: ServerPatch, actor: Actor = SYSTEM_ACTOR) {
  let publicIp: string | null | undefined = patch.publicIp;
  if (typeof publicIp === 'string') {
    if (!isIP(publicIp)) throw invalidField('publicIp', 'must be an IPv4 or IPv6 address such as 203.0.113.10, or null');
    publicIp = publicIp.toLowerCase();
  }
  if (!isUuid(id)) throw new AppError('server_not_found');
  const { row, touched } = await ctx.db.transaction().execute(async (tx) => {
    const current = await findServer(tx, accountId, id, true);
    if (!current) throw new AppError('server_not_found');
    if (current.status === 'decommissioned') throw new AppError('server_decommissioned');
    const row = await updateServerFields(tx, id, {
      ...(patch.name !== undefined ? { name: patch.name } : {}),
      ...(publicIp !== undefined ? { public_ip: publicIp } : {}),
      ...(patch.canary !== undefined ? { canary: patch.canary } : {}),
    });
    // A new address changes the serverAddresses of every domain this server is on.
    const moved = serverAddress(current) !== serverAddress(row);
    await recordAudit(tx, ctx, accountId, actor, { objectType: 'server', objectId: id, action: 'update', before: auditedServer(current), after: auditedServer(row) });
    return { row, touched: moved ? await bumpServers(tx, accountId, await serversSharingDomains(tx, id)) : [] };
  });
  ctx.serversChanged(touched);
  return viewWithStatus(ctx, row);
}

// ------------------------------------------------------------------------------------------------
// Agent connections and status. Whichever control-plane process holds a server's agent
// connection records it in agent_connections (one row per server) and writes its heartbeat there;
// every process decides the server's status from that row (serverStatus), so all of them agree.
// servers.status keeps 'decommissioned' and a copy of the last decision ('active' or 'offline'),
// written in the same transactions as the rows, for queries that filter on it.

/**
 * A connection whose heartbeat is older than this is gone: its process died or lost the database.
 * Each process writes its connections' heartbeats every agent heartbeat interval (10 s).
 */
export const AGENT_CONNECTION_TIMEOUT_MS = 60_000;

type Time = Date | string;
const ms = (t: Time) => (t instanceof Date ? t : new Date(t)).getTime();

/**
 * The one place a server's status is decided: `decommissioned` is final; otherwise `active` while
 * some process holds its agent's connection with a heartbeat younger than the timeout, `offline`
 * when there is no connection or its heartbeat is older.
 */
export function serverStatus(lifecycle: ServerStatus, connection: { last_heartbeat_at: Time } | null | undefined, now: Date): ServerStatus {
  if (lifecycle === 'decommissioned') return 'decommissioned';
  return connection && ms(connection.last_heartbeat_at) > now.getTime() - AGENT_CONNECTION_TIMEOUT_MS ? 'active' : 'offline';
}

/** The last heartbeat of each server's connection, for serverStatus. */
async function heartbeats(ctx: ServiceContext, ids: readonly string[]): Promise<Map<string, { last_heartbeat_at: Time }>> {
  if (ids.length === 0) return new Map();
  const rows = await heartbeatsOf(ctx.db, ids);
  return new Map(rows.map((r) => [r.server_id, r]));
}

/** A server record as the API shows it, its status decided from its connection row. */
async function viewWithStatus(ctx: ServiceContext, row: ServerRow) {
  const conn = (await heartbeats(ctx, [row.id])).get(row.id);
  return serverView({ ...row, status: serverStatus(row.status, conn, ctx.now()) });
}

export interface AgentConnection {
  serverId: string;
  /** Unique per WebSocket connection. */
  connectionId: string;
  /** The control-plane process holding it. */
  processId: string;
  ip: string;
  /** The port its HAProxy serves HTTP on, as its hello said (absent from older agents). */
  httpPort?: number | undefined;
  /** Whether HAProxy serves, as its heartbeats last said (absent before the first, and from older agents). */
  proxyServing?: boolean | undefined;
  /** The version its hello said. */
  agentVersion?: string | undefined;
}

export interface ConnectedResult {
  /** False for a decommissioned or missing server: nothing was recorded. */
  recorded: boolean;
  /** The connection this one replaced (same server, another socket), to be closed by the process holding it. */
  replaced: { connectionId: string; processId: string } | null;
  /** When the server's address moved: the servers sharing a domain with it, whose snapshots list the address (already bumped). */
  peers: string[];
}

/**
 * An agent said hello: this connection becomes the server's live one (a newer connection wins,
 * on whatever process the older one is) and the server is active from this address.
 */
/**
 * The live server a connection token (by its hash) belongs to, for the hub's upgrade: undefined
 * for an unknown token and for a decommissioned server, both refused alike.
 */
export async function serverOfToken(ctx: ServiceContext, tokenHash: string): Promise<{ id: string; accountId: string } | undefined> {
  const s = await findServerByTokenHash(ctx.db, tokenHash);
  return s && s.status !== 'decommissioned' ? { id: s.id, accountId: s.account_id } : undefined;
}

export async function recordAgentConnected(ctx: ServiceContext, conn: AgentConnection, store: AgentChannelStore = agentChannelStore): Promise<ConnectedResult> {
  return ctx.db.transaction().execute(async (tx) => {
    const current = await store.lockServer(tx, conn.serverId);
    if (!current || current.status === 'decommissioned') return { recorded: false, replaced: null, peers: [] };
    const now = ctx.now();
    const previous = await store.connectionOfServer(tx, conn.serverId);
    await store.upsertConnection(tx, conn.serverId, { connection_id: conn.connectionId, process_id: conn.processId, ip: conn.ip, connected_at: now, last_heartbeat_at: now });
    await store.markServerConnected(tx, conn.serverId, conn.ip, now, { httpPort: conn.httpPort ?? null, proxyServing: conn.proxyServing ?? null, agentVersion: conn.agentVersion });
    // Down because its agent was away: that ends now, not at the next health check (minutes away).
    if (current.healthy === false && isConnectionVerdict(current.health_error)) {
      await store.clearServerVerdict(tx, conn.serverId);
      const message = notificationMessages.serverRecovered(current.name, 'its agent reconnected; the next health check confirms that HAProxy serves');
      await notifyFromServer({ ...ctx, db: tx }, { accountId: current.account_id, serverId: conn.serverId, kind: 'server_recovered', message }, store);
    }
    const replaced = previous && previous.connection_id !== conn.connectionId ? { connectionId: previous.connection_id, processId: previous.process_id } : null;
    const moved = serverAddress(current) !== serverAddress({ public_ip: current.public_ip, ip: conn.ip });
    return { recorded: true, replaced, peers: moved ? await store.bumpServers(tx, current.account_id, await store.serversSharingDomains(tx, conn.serverId)) : [] };
  });
}

/**
 * An agent's hello was refused because this control plane cannot speak its protocol: the server
 * shows the version it said and why (agentVersion, agentRefused) until an agent is accepted.
 */
export async function recordAgentRefused(ctx: ServiceContext, serverId: string, agentVersion: string | null, reason: string): Promise<void> {
  await markAgentRefused(ctx.db, serverId, agentVersion, reason);
}

/** The health_error of a server whose agent's connection dropped. */
export const DISCONNECTED_REASON = 'The agent disconnected';
/** How the health cycle's health_error of a server whose agent is away begins. */
export const NOT_CONNECTED = 'The agent is not connected';
const isConnectionVerdict = (error: string | null | undefined) => !!error && (error === DISCONNECTED_REASON || error.startsWith(NOT_CONNECTED));

/**
 * Clears connection rows (those given, as found) and, when asked, marks the servers down
 * (healthy false) and raises server_down, in the caller's transaction.
 */
async function clearConnections(tx: Tx, ctx: ServiceContext, serverIds: readonly string[], raiseDown: boolean, store: AgentChannelStore): Promise<void> {
  if (serverIds.length === 0) return;
  const servers = await store.markServersOffline(tx, serverIds);
  if (!raiseDown || servers.length === 0) return;
  // Once per outage: not for a server the health cycle already found down (and raised it for).
  for (const s of await store.markServersDown(
    tx,
    servers.map((x) => x.id),
    DISCONNECTED_REASON,
  )) {
    await notifyFromServer({ ...ctx, db: tx }, { accountId: s.account_id, serverId: s.id, kind: 'server_down', message: notificationMessages.serverDown(s.name) }, store);
  }
}

/** The agent's heartbeat said whether its HAProxy serves (the hub passes it on when it changes). */
export async function recordProxyServing(ctx: ServiceContext, serverId: string, serving: boolean, store: AgentChannelStore = agentChannelStore): Promise<void> {
  if (serving) return store.setProxyServing(ctx.db, serverId, true);
  // Not serving: the server is down now, not at the next health check (minutes away), with the
  // server_down the cycle would raise (once per outage: the cycle, finding it down, adds none).
  await ctx.db.transaction().execute(async (tx) => {
    await store.setProxyServing(tx, serverId, false);
    for (const s of await store.markServersDown(tx, [serverId], PROXY_NOT_SERVING)) {
      await notifyFromServer({ ...ctx, db: tx }, { accountId: s.account_id, serverId: s.id, kind: 'server_down', message: notificationMessages.proxyNotServing(s.name) }, store);
    }
  });
}

/**
 * An agent's connection ended. If it is still the server's live one (not replaced by a newer
 * connection), its row goes, the server turns offline and, when `raiseDown` (a drop, not a
 * decommission or a regenerated token), server_down is raised in the same transaction: once per
 * disconnect, whichever processes see it end. Returns whether the row was there.
 */
export async function recordAgentDisconnected(
  ctx: ServiceContext,
  conn: Pick<AgentConnection, 'serverId' | 'connectionId'>,
  raiseDown: boolean,
  store: AgentChannelStore = agentChannelStore,
): Promise<boolean> {
  return ctx.db.transaction().execute(async (tx) => {
    await store.lockServer(tx, conn.serverId);
    const gone = await store.deleteConnection(tx, conn.serverId, conn.connectionId);
    await clearConnections(tx, ctx, gone, raiseDown, store);
    return gone.length > 0;
  });
}

/**
 * The heartbeat of one process's live connections (and the servers' lastSeenAt). Returns the
 * connections that are no longer their server's live one (a newer connection replaced them,
 * here or on another process), which the process closes. A connection whose row expired while
 * it lived (the database was away longer than the timeout) is recorded again.
 */
export async function touchAgentConnections(ctx: ServiceContext, conns: readonly AgentConnection[], store: AgentChannelStore = agentChannelStore): Promise<string[]> {
  if (conns.length === 0) return [];
  const now = ctx.now();
  const byId = new Map(conns.map((c) => [c.connectionId, c]));
  const live = await store.touchConnections(ctx.db, [...byId.keys()], now);
  const liveServers = live.map((id) => byId.get(id)!.serverId);
  if (liveServers.length) await store.touchServersLastSeen(ctx.db, liveServers, now);
  for (const id of live) byId.delete(id);
  const replaced: string[] = [];
  for (const c of byId.values()) {
    const held = await store.connectionOfServer(ctx.db, c.serverId);
    if (held) replaced.push(c.connectionId);
    else {
      const again = await recordAgentConnected(ctx, c, store);
      if (!again.recorded) replaced.push(c.connectionId);
      ctx.serversChanged(again.peers);
    }
  }
  return replaced;
}

/**
 * Connections whose heartbeat is older than the timeout are gone (their process died, or lost the
 * database): their rows go, their servers turn offline and raise server_down, once, whichever
 * processes run this. Returns the servers concerned.
 */
export async function expireAgentConnections(ctx: ServiceContext, store: AgentChannelStore = agentChannelStore): Promise<string[]> {
  const cutoff = new Date(ctx.now().getTime() - AGENT_CONNECTION_TIMEOUT_MS);
  const stale = await store.staleConnections(ctx.db, cutoff);
  const expired: string[] = [];
  for (const s of stale) {
    const gone = await ctx.db.transaction().execute(async (tx) => {
      await store.lockServer(tx, s.server_id);
      const rows = await store.deleteConnection(tx, s.server_id, s.connection_id, cutoff);
      await clearConnections(tx, ctx, rows, true, store);
      return rows.length > 0;
    });
    if (gone) expired.push(s.server_id);
  }
  return expired;
}

/**
 * A process shutting down: its connections end without server_down (their agents reconnect,
 * to another process or to this one restarted).
 */
export async function releaseAgentConnections(ctx: ServiceContext, processId: string, store: AgentChannelStore = agentChannelStore): Promise<void> {
  await ctx.db.transaction().execute(async (tx) => {
    const gone = await store.deleteConnectionsOfProcess(tx, processId);
    await clearConnections(tx, ctx, gone, false, store);
  });
}
