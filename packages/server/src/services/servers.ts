import { isIP } from '@rampart/protocol';
import { newId, newServerToken, sha256 } from '../crypto.js';
import type { ServiceContext } from '../context.js';
import { iso, isUuid } from '../context.js';
import { AppError, invalidField } from '../errors.js';
import { enforceLimit, lockAccount } from './limits.js';
import type { ServerStatus } from '../db/schema.js';
import { refreshDomainSsl } from './certificates.js';
import { bumpServers, serversSharingDomains } from './revisions.js';

export const MAX_SERVERS = 1000;

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
    createdAt: iso(s.created_at)!,
  };
}

export async function createServer(ctx: ServiceContext, accountId: string, name: string) {
  return ctx.db.transaction().execute(async (tx) => {
    await lockAccount(tx, accountId);
    await enforceLimit(tx, accountId, 'servers', MAX_SERVERS, 'server_limit');
    const token = newServerToken();
    const row = await tx
      .insertInto('servers')
      .values({ id: newId(), account_id: accountId, name, token_hash: sha256(token), status: 'offline', created_at: ctx.now() })
      .returningAll()
      .executeTakeFirstOrThrow();
    return { ...serverView(row), connectionToken: token };
  });
}

export async function listServers(ctx: ServiceContext, accountId: string) {
  const rows = await ctx.db
    .selectFrom('servers')
    .select(['id', 'name', 'status', 'ip', 'public_ip', 'last_seen_at', 'desired_revision', 'applied_revision', 'created_at'])
    .where('account_id', '=', accountId)
    .orderBy('created_at')
    .orderBy('id')
    .execute();
  return rows.map(serverView);
}

async function liveServer(ctx: ServiceContext, accountId: string, id: string) {
  if (!isUuid(id)) throw new AppError('server_not_found');
  const row = await ctx.db
    .selectFrom('servers')
    .selectAll()
    .where('id', '=', id)
    .where('account_id', '=', accountId)
    .executeTakeFirst();
  if (!row) throw new AppError('server_not_found');
  if (row.status === 'decommissioned') throw new AppError('server_decommissioned');
  return row;
}

/** A new connection token; the old one stops working at once. */
export async function regenerateServerToken(ctx: ServiceContext, accountId: string, id: string) {
  await liveServer(ctx, accountId, id);
  const token = newServerToken();
  const row = await ctx.db
    .updateTable('servers')
    .set({ token_hash: sha256(token) })
    .where('id', '=', id)
    .where('account_id', '=', accountId)
    .returningAll()
    .executeTakeFirstOrThrow();
  ctx.serversChanged([id]); // the hub drops a connection made with the old token
  return { ...serverView(row), connectionToken: token };
}

/** Decommissioning is final: the token is erased and the server leaves every domain. */
export async function decommissionServer(ctx: ServiceContext, accountId: string, id: string) {
  await liveServer(ctx, accountId, id);
  const { row, touched } = await ctx.db.transaction().execute(async (tx) => {
    // Its peers list its address in their snapshots, and its certificates no longer count.
    const peers = await serversSharingDomains(tx, id);
    const domains = await tx.selectFrom('domain_servers').select('domain_id').where('server_id', '=', id).orderBy('domain_id').execute();
    await tx.deleteFrom('domain_servers').where('server_id', '=', id).execute();
    const row = await tx
      .updateTable('servers')
      .set({ status: 'decommissioned', token_hash: null })
      .where('id', '=', id)
      .where('account_id', '=', accountId)
      .returningAll()
      .executeTakeFirstOrThrow();
    for (const d of domains) await refreshDomainSsl(tx, d.domain_id);
    return { row, touched: await bumpServers(tx, accountId, peers) };
  });
  ctx.serversChanged([id, ...touched]);
  return serverView(row);
}

export interface ServerPatch {
  name?: string | undefined;
  /** null clears it: the address the agent connects from is used again. */
  publicIp?: string | null | undefined;
}

/** The address a server is reached at: the one set by the user, else the one its agent connected from. */
export const serverAddress = (s: { public_ip: string | null; ip: string | null }): string | null => s.public_ip ?? s.ip;

export async function updateServer(ctx: ServiceContext, accountId: string, id: string, patch: ServerPatch) {
  let publicIp: string | null | undefined = patch.publicIp;
  if (typeof publicIp === 'string') {
    if (!isIP(publicIp)) throw invalidField('publicIp', 'must be an IPv4 or IPv6 address such as 203.0.113.10, or null');
    publicIp = publicIp.toLowerCase();
  }
  if (!isUuid(id)) throw new AppError('server_not_found');
  const { row, touched } = await ctx.db.transaction().execute(async (tx) => {
    const current = await tx.selectFrom('servers').selectAll().where('id', '=', id).where('account_id', '=', accountId).forUpdate().executeTakeFirst();
    if (!current) throw new AppError('server_not_found');
    if (current.status === 'decommissioned') throw new AppError('server_decommissioned');
    const row = await tx
      .updateTable('servers')
      .set({ ...(patch.name !== undefined ? { name: patch.name } : {}), ...(publicIp !== undefined ? { public_ip: publicIp } : {}) })
      .where('id', '=', id)
      .returningAll()
      .executeTakeFirstOrThrow();
    // A new address changes the serverAddresses of every domain this server is on.
    const moved = serverAddress(current) !== serverAddress(row);
    return { row, touched: moved ? await bumpServers(tx, accountId, await serversSharingDomains(tx, id)) : [] };
  });
  ctx.serversChanged(touched);
  return serverView(row);
}

/**
 * An agent said hello from this address: the server is active. When that moves its address (no
 * publicIp set), the servers sharing a domain with it get new snapshots; their ids are returned.
 */
export async function recordAgentConnected(ctx: ServiceContext, serverId: string, ip: string): Promise<string[]> {
  return ctx.db.transaction().execute(async (tx) => {
    const current = await tx.selectFrom('servers').select(['account_id', 'ip', 'public_ip', 'status']).where('id', '=', serverId).forUpdate().executeTakeFirst();
    if (!current || current.status === 'decommissioned') return [];
    await tx.updateTable('servers').set({ status: 'active', ip, last_seen_at: ctx.now() }).where('id', '=', serverId).execute();
    if (serverAddress(current) === serverAddress({ public_ip: current.public_ip, ip })) return [];
    return bumpServers(tx, current.account_id, await serversSharingDomains(tx, serverId));
  });
}
