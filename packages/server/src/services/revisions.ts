import { sql } from 'kysely';
import type { Tx } from '../db/database.js';
import type { ServiceContext } from '../context.js';
import { notifyFromServer } from './notifications.js';


/** Bumps desired_revision of the given servers (of this account) and returns their ids. */
export async function bumpServers(tx: Tx, accountId: string, serverIds: readonly string[]): Promise<string[]> {
  if (serverIds.length === 0) return [];
  const rows = await tx
    .updateTable('servers')
    .set({ desired_revision: sql<number>`desired_revision + 1` })
    .where('account_id', '=', accountId)
    .where('id', 'in', [...serverIds])
    .where('status', '<>', 'decommissioned')
    .returning('id')
    .execute();
  return rows.map((r) => r.id);
}

/** Bumps every live server of the account (global and server-wide rules touch them all). */
export async function bumpAllServers(tx: Tx, accountId: string): Promise<string[]> {
  const rows = await tx
    .updateTable('servers')
    .set({ desired_revision: sql<number>`desired_revision + 1` })
    .where('account_id', '=', accountId)
    .where('status', '<>', 'decommissioned')
    .returning('id')
    .execute();
  return rows.map((r) => r.id);
}

export async function serversOfDomain(tx: Tx, domainId: string): Promise<string[]> {
  const rows = await tx.selectFrom('domain_servers').select('server_id').where('domain_id', '=', domainId).execute();
  return rows.map((r) => r.server_id);
}

/** Marks the account's rule set as changed (see the rule-list cache in routes/waf.ts). */
export async function bumpWafVersion(tx: Tx, accountId: string): Promise<void> {
  await tx.updateTable('accounts').set({ waf_version: sql<number>`waf_version + 1` }).where('id', '=', accountId).execute();
}

/**
 * Every server that shares a domain with this one, itself included when it has a domain: the
 * servers whose snapshots list this server's address (each domain's serverAddresses).
 */
export async function serversSharingDomains(tx: Tx, serverId: string): Promise<string[]> {
  const rows = await tx
    .selectFrom('domain_servers as mine')
    .innerJoin('domain_servers as peer', 'peer.domain_id', 'mine.domain_id')
    .select('peer.server_id')
    .distinct()
    .where('mine.server_id', '=', serverId)
    .execute();
  return rows.map((r) => r.server_id);
}

export interface ConfigAck {
  revision: number;
  ok: boolean;
  errors: readonly { line: number | null; message: string }[];
}

/**
 * What a config/ack means:
 * - `refused`: a revision above the server's desired one was never sent to it; nothing is stored
 *   (it would otherwise hold appliedRevision above every real ack, and mark domains active);
 * - `applied`: the revision is stored as appliedRevision (it only moves forward) and the
 *   server's domains without SSL become active (an SSL domain is active by its certificate);
 * - `stale`: an ok ack for a revision below the applied one: nothing changes;
 * - `failed`: a server_error notification with HAProxy's messages (`dropped` when over the
 *   server's notification limit).
 */
export async function recordConfigAck(
  ctx: ServiceContext,
  server: { accountId: string; serverId: string },
  ack: ConfigAck,
): Promise<{ outcome: 'refused' | 'applied' | 'stale' | 'failed' | 'dropped'; desiredRevision: number }> {
  const row = await ctx.db.selectFrom('servers').select('desired_revision').where('id', '=', server.serverId).executeTakeFirst();
  const desiredRevision = Number(row?.desired_revision ?? 0);
  if (!row || !Number.isSafeInteger(ack.revision) || ack.revision < 0 || ack.revision > desiredRevision) return { outcome: 'refused', desiredRevision };
  if (!ack.ok) {
    const detail = ack.errors.map((e) => (e.line ? `line ${e.line}: ${e.message}` : e.message)).join('; ');
    const message = `Configuration update to revision ${ack.revision} failed: ${detail}`.slice(0, 4000);
    const outcome = await notifyFromServer(ctx, { ...server, kind: 'server_error', message });
    return { outcome: outcome === 'dropped' ? 'dropped' : 'failed', desiredRevision };
  }
  return ctx.db.transaction().execute(async (tx) => {
    const current = await tx
      .updateTable('servers')
      .set((eb) => ({ applied_revision: sql<number>`greatest(${eb.ref('applied_revision')}, ${ack.revision})`, last_seen_at: ctx.now() }))
      .where('id', '=', server.serverId)
      .returning('applied_revision')
      .executeTakeFirst();
    // An older revision than the one already running says nothing about the domains.
    if (!current || Number(current.applied_revision) > ack.revision) return { outcome: 'stale' as const, desiredRevision };
    await tx
      .updateTable('domains')
      .set({ status: 'active' })
      .where('id', 'in', (eb) => eb.selectFrom('domain_servers').select('domain_id').where('server_id', '=', server.serverId))
      .where('ssl_enabled', '=', false)
      .where('status', '<>', 'active')
      .execute();
    return { outcome: 'applied' as const, desiredRevision };
  });
}
