import { isIP, type CustomRuleAction, type RuleRateLimit, type RuleType, type ServerSnapshot, type CompressedBodyPolicy, type WafLevel, type WafMode } from '@rampart/protocol';
import { parseOrigins } from '../data/domains.js';
import { snapshotContents, snapshotServers } from '../data/snapshot.js';
import type { Database, Tx } from '../db/database.js';
import { holdsOf, type Hold } from './rollout-holds.js';

export interface ServerState {
  id: string;
  status: string;
  tokenHash: string | null;
}

/**
 * The full desired state of many shield servers, from a few queries (data/snapshot.ts), not a few
 * per server: their domains, and the enabled rules that reach each (global and server-wide rules
 * of the account, and the rules of its own domains), and each domain's server addresses.
 * Decommissioned or missing servers get no snapshot.
 */
export async function buildSnapshots(
  db: Database | Tx,
  serverIds: readonly string[],
  options: { holds?: boolean } = {},
): Promise<{ states: Map<string, ServerState>; snapshots: Map<string, ServerSnapshot> }> {
  const states = new Map<string, ServerState>();
  const snapshots = new Map<string, ServerSnapshot>();
  if (serverIds.length === 0) return { states, snapshots };
  const servers = await snapshotServers(db, serverIds);
  const live = servers.filter((s) => s.status !== 'decommissioned');
  for (const s of servers) states.set(s.id, { id: s.id, status: s.status, tokenHash: s.token_hash });
  if (live.length === 0) return { states, snapshots };
  const accountIds = [...new Set(live.map((s) => s.account_id))];
  const liveIds = live.map((s) => s.id);
  // Staged rollout (services/rollout-holds.ts): a held server gets its released snapshot instead; a
  // baking canary the interval of its reports.
  const [{ domains, peers, rules, accounts, customRules }, holds] = await Promise.all([
    snapshotContents(db, liveIds, accountIds),
    options.holds === false ? new Map<string, Hold>() : holdsOf(db, liveIds),
  ]);
  // The current key first; the previous one while the job has not retired it (services/bot-keys.ts).
  const botKeys = new Map(
    accounts.map((a) => [a.id, [{ id: a.bot_key_id, secret: a.bot_secret }, ...(a.bot_prev_key_id && a.bot_prev_secret ? [{ id: a.bot_prev_key_id, secret: a.bot_prev_secret }] : [])]]),
  );
  const addressSets = new Map<string, Set<string>>();
  for (const p of peers) {
    const address = p.public_ip ?? p.ip;
    if (!address || !isIP(address)) continue; // not connected yet (or a scoped address no DNS record can hold)
    addressSets.set(p.domain_id, (addressSets.get(p.domain_id) ?? new Set()).add(address));
  }
  const addresses = new Map([...addressSets].map(([id, set]) => [id, [...set].sort()]));
  const domainsByServer = new Map<string, typeof domains>();
  for (const d of domains) domainsByServer.set(d.server_id, [...(domainsByServer.get(d.server_id) ?? []), d]);
  for (const s of live) {
    const hold = holds.get(s.id);
    if (hold?.released) {
      snapshots.set(s.id, hold.released);
      continue;
    }
    const own = domainsByServer.get(s.id) ?? [];
    const ownIds = new Set(own.map((d) => d.id));
    snapshots.set(s.id, {
      serverId: s.id,
      revision: Number(s.desired_revision),
      domains: own.map((d) => ({
        id: d.id,
        domain: d.domain,
        origins: parseOrigins(d.origins),
        sslEnabled: d.ssl_enabled,
        wafEnabled: d.waf_enabled,
        wafLevel: d.waf_level as WafLevel,
        wafMode: d.waf_mode as WafMode,
        wafCompressedBodies: d.waf_compressed_bodies as CompressedBodyPolicy,
        serverAddresses: addresses.get(d.id) ?? [],
      })),
      rules: rules
        .filter((r) => r.account_id === s.account_id && (r.domain_id === null || ownIds.has(r.domain_id)))
        .map((r) => ({ id: r.id, type: r.rule_type as RuleType, value: r.value, domainId: r.domain_id, priority: r.priority })),
      botKeys: botKeys.get(s.account_id)!,
      // Sent only when there are some: an agent from before custom rules refuses a snapshot with a
      // field it does not know, and keeps working for accounts that use none.
      ...customRulesOf(customRules, s.account_id, ownIds),
      ...(hold?.reportSeconds ? { reportSeconds: hold.reportSeconds } : {}),
    });
  }
  return { states, snapshots };
}

/** The account's enabled custom rules that reach a server with these domains, as the snapshot field (absent when none). */
function customRulesOf(
  rows: readonly { id: string; account_id: string; domain_id: string | null; expression: string; action: string; rate_limit: string | null; priority: number }[],
  accountId: string,
  ownIds: ReadonlySet<string>,
): Pick<ServerSnapshot, 'customRules'> {
  const customRules = rows
    .filter((r) => r.account_id === accountId && (r.domain_id === null || ownIds.has(r.domain_id)))
    .map((r) => ({
      id: r.id,
      expression: r.expression,
      action: r.action as CustomRuleAction,
      domainId: r.domain_id,
      priority: r.priority,
      ...(r.rate_limit !== null ? { rateLimit: JSON.parse(r.rate_limit) as RuleRateLimit } : {}),
    }));
  return customRules.length ? { customRules } : {};
}
