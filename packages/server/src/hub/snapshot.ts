import type { RuleType, ServerSnapshot, WafLevel } from '@rampart/protocol';
import type { Database } from '../db/database.js';
import { parseOrigins } from '../services/domains.js';

/**
 * The full desired state of one shield server: its domains, and the enabled rules that reach it
 * (global and server-wide rules of the account, and the rules of its own domains).
 * Returns undefined for a server that no longer exists or is decommissioned.
 */
export async function buildSnapshot(db: Database, serverId: string): Promise<ServerSnapshot | undefined> {
  const server = await db
    .selectFrom('servers')
    .select(['id', 'account_id', 'desired_revision', 'status'])
    .where('id', '=', serverId)
    .executeTakeFirst();
  if (!server || server.status === 'decommissioned') return undefined;
  const [domains, rules] = await Promise.all([
    db
      .selectFrom('domains')
      .innerJoin('domain_servers', 'domain_servers.domain_id', 'domains.id')
      .select(['domains.id', 'domains.domain', 'domains.origins', 'domains.ssl_enabled', 'domains.waf_enabled', 'domains.waf_level'])
      .where('domain_servers.server_id', '=', serverId)
      .orderBy('domains.domain')
      .execute(),
    db
      .selectFrom('waf_rules')
      .select(['id', 'rule_type', 'value', 'domain_id', 'priority'])
      .where('account_id', '=', server.account_id)
      .where('enabled', '=', true)
      .where((eb) =>
        eb.or([
          eb('domain_id', 'is', null),
          eb('domain_id', 'in', eb.selectFrom('domain_servers').select('domain_id').where('server_id', '=', serverId)),
        ]),
      )
      .orderBy('priority')
      .orderBy('created_at')
      .orderBy('id')
      .execute(),
  ]);
  return {
    serverId,
    revision: Number(server.desired_revision),
    domains: domains.map((d) => ({
      id: d.id,
      domain: d.domain,
      origins: parseOrigins(d.origins),
      sslEnabled: d.ssl_enabled,
      wafEnabled: d.waf_enabled,
      wafLevel: d.waf_level as WafLevel,
    })),
    rules: rules.map((r) => ({ id: r.id, type: r.rule_type as RuleType, value: r.value, domainId: r.domain_id, priority: r.priority })),
  };
}
