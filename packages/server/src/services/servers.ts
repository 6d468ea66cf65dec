import { newId, newServerToken, sha256 } from '../crypto.js';
import type { ServiceContext } from '../context.js';
import { iso, isUuid } from '../context.js';
import { AppError } from '../errors.js';
import { enforceLimit, lockAccount } from './limits.js';
import type { ServerStatus } from '../db/schema.js';

export const MAX_SERVERS = 1000;

type ServerRow = {
  id: string;
  name: string;
  status: ServerStatus;
  ip: string | null;
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
    .select(['id', 'name', 'status', 'ip', 'last_seen_at', 'desired_revision', 'applied_revision', 'created_at'])
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
  const row = await ctx.db.transaction().execute(async (tx) => {
    await tx.deleteFrom('domain_servers').where('server_id', '=', id).execute();
    return tx
      .updateTable('servers')
      .set({ status: 'decommissioned', token_hash: null })
      .where('id', '=', id)
      .where('account_id', '=', accountId)
      .returningAll()
      .executeTakeFirstOrThrow();
  });
  ctx.serversChanged([id]);
  return serverView(row);
}
