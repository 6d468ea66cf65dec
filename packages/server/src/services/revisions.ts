import { sql, type Transaction } from 'kysely';
import type { DB } from '../db/schema.js';

type Tx = Transaction<DB>;

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
