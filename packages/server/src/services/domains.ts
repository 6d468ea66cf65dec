import {
  formatHostPort,
  isHostname,
  isIP,
  isOriginHost,
  isPort,
  normalizeHostname,
  originTarget,
  type OriginAddress,
  type SslStatus,
  type CompressedBodyPolicy,
  type WafLevel,
  type WafMode,
} from '@rampart/protocol';
import type { Tx } from '../db/database.js';
import type { ServiceContext } from '../context.js';
import { isUniqueViolation } from '../context.js';
import { isUuid, iso } from '../values.js';
import { newId } from '../crypto.js';
import { bumpWafVersion, lockAccount } from '../data/accounts.js';
import {
  deleteDomain as deleteDomainRow,
  insertDomain,
  linkServers,
  listDomains as listDomainRows,
  lockDomain,
  parseOrigins,
  serverLinksOfAccount,
  serversOfDomain,
  unlinkServers,
  updateDomainFields,
} from '../data/domains.js';
import { liveServerIds } from '../data/servers.js';
import { AppError, invalidField } from '../errors.js';
import type { DomainStatus } from '../db/schema.js';
import { refreshDomainSsl } from './certificates.js';
import { enforceLimit } from './limits.js';
import { FAILOVER_MIN_SERVERS, requireFailoverAllowed } from './dns-failover.js';
import { recordAudit, SYSTEM_ACTOR, type Actor } from './audit.js';
import { bumpForChange } from './rollouts.js';

export const MAX_DOMAINS = 1000;

/** As the API takes it: exactly one of ip and host (checked by originProblems). */
export interface OriginInput {
  ip?: string | undefined;
  host?: string | undefined;
  port: number;
}

export interface DomainInput {
  domain: string;
  origins: OriginInput[];
  serverIds?: string[] | undefined;
  sslEnabled?: boolean | undefined;
  wafEnabled?: boolean | undefined;
  wafLevel?: WafLevel | undefined;
  wafMode?: WafMode | undefined;
  wafCompressedBodies?: CompressedBodyPolicy | undefined;
}

export type DomainPatch = Partial<Omit<DomainInput, 'domain'>> & {
  /** DNS failover (docs/dns-failover.md): Pro and Enterprise, at least 2 servers, a DNS provider connected. */
  dnsFailover?: boolean | undefined;
};

type DomainRow = {
  id: string;
  domain: string;
  origins: OriginAddress[] | string;
  ssl_enabled: boolean;
  waf_enabled: boolean;
  waf_level: string;
  waf_mode: string;
  waf_compressed_bodies: string;
  status: DomainStatus;
  ssl_status: SslStatus;
  ssl_error: string | null;
  ssl_expires: Date | string | null;
  dns_failover: boolean;
  dns_addresses: string[] | string | null;
  dns_error: string | null;
  created_at: Date | string;
  updated_at: Date | string;
};

/** A checked origin as stored: { ip, port } or { host, port }, lowercased. */
function storedOrigin(o: OriginInput): OriginAddress {
  return o.host !== undefined ? { host: normalizeHostname(o.host), port: o.port } : { ip: o.ip!.toLowerCase(), port: o.port };
}

function domainView(d: DomainRow, serverIds: string[]) {
  return {
    id: d.id,
    domain: d.domain,
    origins: parseOrigins(d.origins),
    serverIds,
    sslEnabled: d.ssl_enabled,
    sslStatus: d.ssl_status,
    sslError: d.ssl_error,
    /** The earliest expiry among the certificates the domain's servers serve. */
    sslExpires: d.ssl_expires ? iso(d.ssl_expires)!.slice(0, 10) : null,
    wafEnabled: d.waf_enabled,
    wafLevel: d.waf_level,
    wafMode: d.waf_mode,
    wafCompressedBodies: d.waf_compressed_bodies,
    status: d.status,
    dnsFailover: d.dns_failover,
    /** The addresses DNS failover last published for the domain; null before the first publication. */
    dnsAddresses: d.dns_addresses == null ? null : typeof d.dns_addresses === 'string' ? (JSON.parse(d.dns_addresses) as string[]) : d.dns_addresses,
    dnsError: d.dns_error,
    createdAt: iso(d.created_at)!,
    updatedAt: iso(d.updated_at)!,
    warnings: domainWarnings(serverIds),
  };
}

/** Saved but not working as the user may think: said in every answer with the domain, and in the dashboard. */
export const NO_SERVER_WARNING = 'No shield server serves this domain yet, so no request reaches it through Rampart: add one in serverIds (or on the domain page in the dashboard).';

function domainWarnings(serverIds: readonly string[]): string[] {
  return serverIds.length === 0 ? [NO_SERVER_WARNING] : [];
}

export type DomainView = ReturnType<typeof domainView>;

/** Every problem with the origins at once, each naming its field. */
function originProblems(origins: OriginInput[]): string[] {
  const problems: string[] = [];
  const seen = new Set<string>();
  origins.forEach((o, i) => {
    if ((o.ip === undefined) === (o.host === undefined)) {
      problems.push(`origins[${i}]: give either ip (an address) or host (a DNS name), not ${o.ip === undefined ? 'neither' : 'both'}`);
      return;
    }
    if (o.ip !== undefined && !isIP(o.ip)) problems.push(`origins[${i}].ip: must be an IPv4 or IPv6 address`);
    if (o.host !== undefined && !isOriginHost(normalizeHostname(o.host))) {
      problems.push(`origins[${i}].host: must be a DNS name such as origin.example.com or localhost (letters, digits, hyphens and dots)`);
    }
    if (!isPort(o.port)) problems.push(`origins[${i}].port: must be an integer from 1 to 65535`);
    const key = formatHostPort(originTarget(storedOrigin(o)), o.port);
    if (seen.has(key)) problems.push(`origins[${i}]: duplicate origin ${key}`);
    seen.add(key);
  });
  return problems;
}

function fail(problems: string[]): never {
  throw new AppError('invalid_body', problems.join('; '));
}

/** serverIds must all be live servers of this account; anything else is "not found", as for a missing one. */
async function checkServerIds(tx: Tx, accountId: string, serverIds: string[]): Promise<string[]> {
  const unique = [...new Set(serverIds)];
  if (unique.length === 0) return [];
  if (!unique.every(isUuid)) throw new AppError('server_not_found');
  if ((await liveServerIds(tx, accountId, unique)).length !== unique.length) throw new AppError('server_not_found');
  return unique;
}

export async function createDomain(ctx: ServiceContext, accountId: string, input: DomainInput, actor: Actor = SYSTEM_ACTOR) {
  const domain = normalizeHostname(input.domain);
  const problems: string[] = [];
  if (!isHostname(domain)) problems.push('domain: must be a fully qualified domain name such as www.example.com');
  problems.push(...originProblems(input.origins));
  if (problems.length) fail(problems);
  const origins = input.origins.map(storedOrigin);
  try {
    const { view, touched } = await ctx.db.transaction().execute(async (tx) => {
      await lockAccount(tx, accountId);
      await enforceLimit(tx, accountId, 'domains', MAX_DOMAINS, 'domain_limit');
      const serverIds = await checkServerIds(tx, accountId, input.serverIds ?? []);
      const now = ctx.now();
      const row = await insertDomain(tx, {
        id: newId(),
        account_id: accountId,
        domain,
        origins: JSON.stringify(origins),
        ssl_enabled: input.sslEnabled ?? true,
        ssl_status: (input.sslEnabled ?? true) ? 'pending' : 'off',
        waf_enabled: input.wafEnabled ?? true,
        waf_level: input.wafLevel ?? 'medium',
        waf_mode: input.wafMode ?? 'block',
        waf_compressed_bodies: input.wafCompressedBodies ?? 'refuse',
        status: 'pending',
        created_at: now,
        updated_at: now,
      });
      await linkServers(tx, row.id, serverIds);
      const touched = await bumpForChange(tx, accountId, serverIds);
      const view = domainView(row, serverIds);
      await recordAudit(tx, ctx, accountId, actor, { objectType: 'domain', objectId: row.id, action: 'create', after: view });
      return { view, touched };
    });
    ctx.serversChanged(touched);
    return view;
  } catch (err) {
    if (isUniqueViolation(err)) throw new AppError('domain_exists');
    throw err;
  }
}

export async function listDomains(ctx: ServiceContext, accountId: string) {
  const [rows, links] = await Promise.all([listDomainRows(ctx.db, accountId), serverLinksOfAccount(ctx.db, accountId)]);
  const byDomain = new Map<string, string[]>();
  for (const l of links) byDomain.set(l.domain_id, [...(byDomain.get(l.domain_id) ?? []), l.server_id]);
  return rows.map((r) => domainView(r, (byDomain.get(r.id) ?? []).sort()));
}

async function ownedDomain(tx: Tx, accountId: string, id: string) {
  if (!isUuid(id)) throw new AppError('domain_not_found');
  const row = await lockDomain(tx, accountId, id);
  if (!row) throw new AppError('domain_not_found');
  return row;
}

export async function updateDomain(ctx: ServiceContext, accountId: string, id: string, patch: DomainPatch, actor: Actor = SYSTEM_ACTOR) {
  if (patch.origins) {
    const problems = originProblems(patch.origins);
    if (problems.length) fail(problems);
  }
  const { view, touched } = await ctx.db.transaction().execute(async (tx) => {
    const current = await ownedDomain(tx, accountId, id);
    const before = await serversOfDomain(tx, id);
    let after = before;
    if (patch.serverIds) {
      after = await checkServerIds(tx, accountId, patch.serverIds);
      await unlinkServers(tx, id);
      await linkServers(tx, id, after);
    }
    // DNS failover: checked when turned on; while it stays on, the domain keeps at least 2 servers.
    if (patch.dnsFailover === true) await requireFailoverAllowed(tx, ctx, accountId, after.length);
    else if (current.dns_failover && patch.dnsFailover === undefined && patch.serverIds && after.length < FAILOVER_MIN_SERVERS) {
      throw invalidField('serverIds', `a domain with DNS failover keeps at least ${FAILOVER_MIN_SERVERS} shield servers; turn dnsFailover off first`);
    }
    let row = await updateDomainFields(tx, current.id, {
      ...(patch.origins ? { origins: JSON.stringify(patch.origins.map(storedOrigin)) } : {}),
      ...(patch.sslEnabled !== undefined ? { ssl_enabled: patch.sslEnabled } : {}),
      ...(patch.wafEnabled !== undefined ? { waf_enabled: patch.wafEnabled } : {}),
      ...(patch.wafLevel !== undefined ? { waf_level: patch.wafLevel } : {}),
      ...(patch.wafMode !== undefined ? { waf_mode: patch.wafMode } : {}),
      ...(patch.wafCompressedBodies !== undefined ? { waf_compressed_bodies: patch.wafCompressedBodies } : {}),
      // Off: the records stay as they are, and what was published is forgotten.
      ...(patch.dnsFailover === true ? { dns_failover: true } : {}),
      ...(patch.dnsFailover === false ? { dns_failover: false, dns_addresses: null, dns_error: null } : {}),
      updated_at: ctx.now(),
    });
    // Turning SSL on or off, or another set of servers, changes which certificate reports count.
    if ((patch.sslEnabled !== undefined && patch.sslEnabled !== current.ssl_enabled) || patch.serverIds) {
      row = (await refreshDomainSsl(tx, id)) ?? row;
    }
    const touched = await bumpForChange(tx, accountId, [...new Set([...before, ...after])]);
    const view = domainView(row, [...after].sort());
    await recordAudit(tx, ctx, accountId, actor, { objectType: 'domain', objectId: id, action: 'update', before: domainView(current, [...before].sort()), after: view });
    return { view, touched };
  });
  ctx.serversChanged(touched);
  return view;
}

export async function deleteDomain(ctx: ServiceContext, accountId: string, id: string, actor: Actor = SYSTEM_ACTOR) {
  const touched = await ctx.db.transaction().execute(async (tx) => {
    const current = await ownedDomain(tx, accountId, id);
    const servers = await serversOfDomain(tx, id);
    await recordAudit(tx, ctx, accountId, actor, { objectType: 'domain', objectId: id, action: 'delete', before: domainView(current, [...servers].sort()) });
    await deleteDomainRow(tx, accountId, id);
    await bumpWafVersion(tx, accountId); // the domain's own rules went with it
    return bumpForChange(tx, accountId, servers);
  });
  ctx.serversChanged(touched);
  return { success: true as const };
}
