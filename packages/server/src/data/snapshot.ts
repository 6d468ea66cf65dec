import type { Database, Tx } from '../db/database.js';
import { enabledCustomRules } from './custom-rules.js';
import { inApplyOrder } from './waf-rules.js';

// The read model of agent snapshots: what the desired state of many shield servers is built from,
// in a few queries whatever their number.

/** The servers asked for, whatever their status. */
export function snapshotServers(db: Database | Tx, serverIds: readonly string[]) {
  return db
    .selectFrom('servers')
    .select(['id', 'account_id', 'desired_revision', 'status', 'token_hash'])
    .where('id', 'in', [...serverIds])
    .execute();
}

/**
 * For these live servers of these accounts: their domains (each row with the server it is
 * assigned to), every live server of those domains with its addresses, the accounts' enabled rules
 * in the order agents apply them, their enabled custom rules likewise, and the accounts' bot secrets.
 */
export async function snapshotContents(db: Database | Tx, liveIds: readonly string[], accountIds: readonly string[]) {
  const [domains, peers, rules, accounts, customRules] = await Promise.all([
    db
      .selectFrom('domains')
      .innerJoin('domain_servers', 'domain_servers.domain_id', 'domains.id')
      .select([
        'domain_servers.server_id',
        'domains.id',
        'domains.domain',
        'domains.origins',
        'domains.ssl_enabled',
        'domains.waf_enabled',
        'domains.waf_level',
        'domains.waf_mode',
        'domains.waf_compressed_bodies',
      ])
      .where('domain_servers.server_id', 'in', [...liveIds])
      .orderBy('domains.domain')
      .execute(),
    db
      .selectFrom('domain_servers')
      .innerJoin('servers', 'servers.id', 'domain_servers.server_id')
      .select(['domain_servers.domain_id', 'servers.public_ip', 'servers.ip'])
      .where('domain_servers.domain_id', 'in', (eb) =>
        eb
          .selectFrom('domain_servers')
          .select('domain_id')
          .where('server_id', 'in', [...liveIds]),
      )
      .where('servers.status', '<>', 'decommissioned')
      .execute(),
    db
      .selectFrom('waf_rules')
      .select(['id', 'account_id', 'rule_type', 'value', 'domain_id', 'priority'])
      .where('account_id', 'in', [...accountIds])
      .where('enabled', '=', true)
      .$call(inApplyOrder)
      .execute(),
    db
      .selectFrom('accounts')
      .select(['id', 'bot_secret', 'bot_key_id', 'bot_prev_key_id', 'bot_prev_secret'])
      .where('id', 'in', [...accountIds])
      .execute(),
    enabledCustomRules(db, accountIds),
  ]);
  return { domains, peers, rules, accounts, customRules };
}
