import http from 'node:http';
import https from 'node:https';
import type { ServiceContext } from '../context.js';
import { iso } from '../values.js';
import { findAccount } from '../data/accounts.js';
import { deleteDnsSettings as deleteSettingsRow, dnsSettingsOfAccounts, findDnsSettings, upsertDnsSettings } from '../data/dns-settings.js';
import { failoverDomainNames, failoverDomainServers, setDomainDns } from '../data/domains.js';
import type { Tx } from '../db/database.js';
import { beforeAbort, isKnownPrivateHost, bareHost, pinnedLookup, resolveHost } from '../delivery/webhook.js';
import { canonicalAddress, dnsProvider, type DnsProvider, type DnsProviderSettings } from '../dns/provider.js';
import { AppError, invalidField } from '../errors.js';
import { mapBounded } from '../map-bounded.js';
import type { Plan } from '../plans.js';
import { decryptSecret, encryptSecret } from '../secret-box.js';
import { recordAudit, SYSTEM_ACTOR, type Actor } from './audit.js';

// DNS failover (docs/dns-failover.md): an account connects one DNS provider; a domain with
// dnsFailover on has its A/AAAA records hold its healthy shield servers' addresses, which the
// health cycle publishes after deciding every server's health.

export const DNS_PROVIDERS = ['powerdns', 'cloudflare'] as const;
export type DnsProviderName = (typeof DNS_PROVIDERS)[number];
/** A domain needs this many shield servers for failover to have somewhere to fail over to. */
export const FAILOVER_MIN_SERVERS = 2;
/** Provider calls in flight at once in one cycle. */
export const DNS_CALL_CONCURRENCY = 8;
/** At most this much of a provider's answer is read. */
const ANSWER_READ_LIMIT = 8 * 1024 * 1024;

export interface DnsSettingsInput {
  provider: DnsProviderName;
  apiUrl?: string | undefined;
  apiKey?: string | undefined;
  serverId?: string | undefined;
  apiToken?: string | undefined;
}

/** What the API shows of the settings: never a credential. */
export interface DnsSettingsView {
  provider: DnsProviderName | null;
  apiUrl: string | null;
  serverId: string | null;
  connected: boolean;
  /** Why stored settings cannot be used (RAMPART_SECRET_KEY missing or changed); null otherwise. */
  error: string | null;
  updatedAt: string | null;
}

/** The stored, decrypted form: exactly the provider's settings (src/dns/provider.ts). */
type StoredSettings = { provider: 'powerdns'; apiUrl: string; apiKey: string; serverId: string } | { provider: 'cloudflare'; apiToken: string };

const FIELDS: Record<DnsProviderName, readonly (keyof DnsSettingsInput)[]> = {
  powerdns: ['apiUrl', 'apiKey', 'serverId'],
  cloudflare: ['apiToken'],
};
const API_URL_MAX = 2048;
/** Credentials travel in a header: visible ASCII only, so nothing can end the header early. */
const HEADER_SAFE = /^[\x21-\x7e]+$/;
/** PowerDNS's server id is one path segment: no slash, and not "." or "..". */
const SERVER_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

export const PLAN_MESSAGE = 'DNS failover requires the Pro or Enterprise plan';
export const SECRET_KEY_MESSAGE = 'DNS provider credentials cannot be stored: the operator must set RAMPART_SECRET_KEY (at least 16 characters) on the control plane, which encrypts them';
const UNREADABLE = 'The stored DNS provider credentials cannot be decrypted (RAMPART_SECRET_KEY is missing or was changed): connect the provider again with PUT /api/settings/dns';

/** Whether the operator lets provider API URLs name private and loopback addresses (RAMPART_ALLOW_PRIVATE_DNS_API=1). */
const allowPrivate = (ctx: ServiceContext) => ctx.allowPrivateDnsApi === true;

async function requirePlan(db: ServiceContext['db'] | Tx, ctx: ServiceContext, accountId: string): Promise<void> {
  const account = await findAccount(db, accountId);
  if (!account || !ctx.plans[account.plan as Plan]?.dnsFailover) throw new AppError('plan_no_dns_failover', PLAN_MESSAGE);
}

/**
 * The PowerDNS API URL: http or https, no user name or password, no query or fragment (the API
 * paths are appended), and, unless the operator allows private addresses, not a private,
 * loopback or link-local address or a localhost name. A name's addresses are checked again at
 * every request (guardedFetch).
 */
export function checkApiUrl(url: string, privateAllowed: boolean): string {
  if (url.length > API_URL_MAX) throw invalidField('apiUrl', `must be at most ${API_URL_MAX} characters`);
  const parsed = URL.canParse(url) ? new URL(url) : null;
  if (parsed?.protocol !== 'http:' && parsed?.protocol !== 'https:') throw invalidField('apiUrl', 'must be an http or https URL such as https://dns.example.com:8081');
  if (parsed.username || parsed.password) throw invalidField('apiUrl', 'must not contain a user name or password (the API key is sent in a header)');
  if (parsed.search || parsed.hash || url.includes('?') || url.includes('#')) throw invalidField('apiUrl', 'must not have a query or fragment');
  if (!privateAllowed && isKnownPrivateHost(bareHost(parsed))) {
    throw invalidField('apiUrl', `${parsed.hostname} is a private or reserved address; the operator allows those with RAMPART_ALLOW_PRIVATE_DNS_API=1`);
  }
  return parsed.href.replace(/\/+$/, '');
}

function checkCredential(field: 'apiKey' | 'apiToken', value: string, min: number): string {
  if (value.length < min || value.length > 512) throw invalidField(field, `must be ${min} to 512 characters`);
  if (!HEADER_SAFE.test(value)) throw invalidField(field, 'must be visible ASCII characters, without spaces');
  return value;
}

/** The settings as they will be stored; every problem names its field. */
function validSettings(input: DnsSettingsInput, privateAllowed: boolean): StoredSettings {
  if (!(DNS_PROVIDERS as readonly string[]).includes(input.provider)) throw invalidField('provider', `must be one of ${DNS_PROVIDERS.join(', ')}`);
  const wanted = FIELDS[input.provider];
  for (const field of ['apiUrl', 'apiKey', 'serverId', 'apiToken'] as const) {
    const given = input[field] !== undefined;
    if (given && !wanted.includes(field)) throw invalidField(field, `is not a setting of the ${input.provider} provider (it takes ${wanted.join(', ')})`);
    if (!given && wanted.includes(field)) throw invalidField(field, `is required for the ${input.provider} provider`);
  }
  if (input.provider === 'cloudflare') return { provider: 'cloudflare', apiToken: checkCredential('apiToken', input.apiToken!, 20) };
  if (!SERVER_ID.test(input.serverId!))
    throw invalidField('serverId', 'must be 1 to 64 letters, digits, dots, dashes or underscores, starting with a letter or digit (PowerDNS Authoritative: localhost)');
  return { provider: 'powerdns', apiUrl: checkApiUrl(input.apiUrl!, privateAllowed), apiKey: checkCredential('apiKey', input.apiKey!, 1), serverId: input.serverId! };
}

function viewOf(row: { provider: string; credentials_enc: string; updated_at: Date | string } | undefined, ctx: ServiceContext): DnsSettingsView {
  if (!row) return { provider: null, apiUrl: null, serverId: null, connected: false, error: null, updatedAt: null };
  const provider = row.provider as DnsProviderName;
  const settings = readSettings(ctx, row.credentials_enc);
  if (typeof settings === 'string') return { provider, apiUrl: null, serverId: null, connected: false, error: settings, updatedAt: iso(row.updated_at) };
  return {
    provider,
    apiUrl: settings.provider === 'powerdns' ? settings.apiUrl : null,
    serverId: settings.provider === 'powerdns' ? settings.serverId : null,
    connected: true,
    error: null,
    updatedAt: iso(row.updated_at),
  };
}

/** The decrypted settings, or why they cannot be read. */
function readSettings(ctx: ServiceContext, stored: string): StoredSettings | string {
  if (!ctx.secretKey) return UNREADABLE;
  try {
    return JSON.parse(decryptSecret(ctx.secretKey, stored)) as StoredSettings;
  } catch {
    return UNREADABLE;
  }
}

/**
 * PUT /api/settings/dns: connects (or replaces) the account's provider. Pro and Enterprise only;
 * the credentials are stored encrypted with RAMPART_SECRET_KEY and never shown again. The
 * credentials are not tried here: a refusal shows on each failover domain's dnsError at the next
 * health cycle.
 */
export async function putDnsSettings(ctx: ServiceContext, accountId: string, input: DnsSettingsInput, actor: Actor = SYSTEM_ACTOR): Promise<DnsSettingsView> {
  await requirePlan(ctx.db, ctx, accountId);
  const settings = validSettings(input, allowPrivate(ctx));
  if (!ctx.secretKey) throw new AppError('invalid_body', SECRET_KEY_MESSAGE);
  const row = { account_id: accountId, provider: settings.provider, credentials_enc: encryptSecret(ctx.secretKey, JSON.stringify(settings)), updated_at: ctx.now() };
  await ctx.db.transaction().execute(async (tx) => {
    const before = await findDnsSettings(tx, accountId, true);
    await upsertDnsSettings(tx, row);
    await recordAudit(tx, ctx, accountId, actor, {
      objectType: 'dns_settings',
      objectId: null,
      action: before ? 'update' : 'create',
      before: auditedDns(ctx, before),
      after: auditedDns(ctx, row),
      secrets: DNS_SECRETS,
    });
  });
  return viewOf(row, ctx);
}

const DNS_SECRETS = ['credentials'];

/** The settings as the audit log compares them: the credentials (masked when stored) by their decrypted value. */
function auditedDns(ctx: ServiceContext, row: { provider: string; credentials_enc: string } | undefined) {
  if (!row) return null;
  const s = readSettings(ctx, row.credentials_enc);
  if (typeof s === 'string') return { provider: row.provider, credentials: row.credentials_enc };
  return s.provider === 'powerdns' ? { provider: s.provider, apiUrl: s.apiUrl, serverId: s.serverId, credentials: s.apiKey } : { provider: s.provider, credentials: s.apiToken };
}

export async function getDnsSettings(ctx: ServiceContext, accountId: string): Promise<DnsSettingsView> {
  return viewOf(await findDnsSettings(ctx.db, accountId), ctx);
}

/** DELETE /api/settings/dns: refused (409) while a domain of the account has DNS failover on. */
export async function deleteDnsSettings(ctx: ServiceContext, accountId: string, actor: Actor = SYSTEM_ACTOR): Promise<{ success: true }> {
  await ctx.db.transaction().execute(async (tx) => {
    const before = await findDnsSettings(tx, accountId);
    // Deleted first: a domain being switched on holds the row (requireFailoverAllowed), so this waits for it and then sees it on.
    if (!(await deleteSettingsRow(tx, accountId))) return;
    await recordAudit(tx, ctx, accountId, actor, { objectType: 'dns_settings', objectId: null, action: 'delete', before: auditedDns(ctx, before), secrets: DNS_SECRETS });
    const names = await failoverDomainNames(tx, accountId);
    if (names.length) {
      const shown = names.slice(0, 5).join(', ') + (names.length > 5 ? `, and ${names.length - 5} more` : '');
      throw new AppError('dns_provider_in_use', `DNS failover is on for ${names.length} domain(s) (${shown}); turn dnsFailover off on them first`);
    }
  });
  return { success: true };
}

/**
 * Before a domain's dnsFailover turns on, in the domain's transaction, in this order: the plan
 * (403), at least FAILOVER_MIN_SERVERS servers on the domain (400), a provider connected (400).
 * The provider's row stays locked until the transaction ends, so a concurrent DELETE of the
 * settings cannot slip in between.
 */
export async function requireFailoverAllowed(tx: Tx, ctx: ServiceContext, accountId: string, serverCount: number): Promise<void> {
  await requirePlan(tx, ctx, accountId);
  if (serverCount < FAILOVER_MIN_SERVERS) {
    throw invalidField('dnsFailover', `needs at least ${FAILOVER_MIN_SERVERS} shield servers on the domain (serverIds), so there is another to fail over to`);
  }
  if (!(await findDnsSettings(tx, accountId, true))) throw invalidField('dnsFailover', 'needs a DNS provider: connect one first with PUT /api/settings/dns');
}

// ------------------------------------------------------------------------------------------------
// Provider requests

/**
 * The fetch the providers are given: the host's addresses are resolved and, unless the operator
 * allows private addresses, every one must be public; the connection then goes to those very
 * addresses. Redirects are answers like any other (never followed), and at most 8 MiB of an
 * answer is read.
 */
export function guardedFetch(privateAllowed: boolean): typeof fetch {
  return async (input: string | URL | Request, init: RequestInit = {}) => {
    const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new TypeError(`refused: ${url.protocol} URLs`);
    // The same checks, and the same pinning, as a webhook's (delivery/webhook.ts).
    const addresses = await (init.signal ? beforeAbort(resolveHost(url, privateAllowed), init.signal) : resolveHost(url, privateAllowed));
    const headers = Object.fromEntries(new Headers(init.headers).entries());
    const body = typeof init.body === 'string' ? init.body : undefined;
    if (body !== undefined) headers['content-length'] = String(Buffer.byteLength(body));
    const { status, text } = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const client = url.protocol === 'https:' ? https : http;
      const req = client.request(url, { method: init.method ?? 'GET', headers, agent: false, lookup: pinnedLookup(addresses), ...(init.signal ? { signal: init.signal } : {}) }, (res) => {
        const chunks: Buffer[] = [];
        let read = 0;
        res.on('data', (chunk: Buffer) => {
          read += chunk.length;
          if (read > ANSWER_READ_LIMIT) return res.destroy(new Error(`the answer is larger than ${ANSWER_READ_LIMIT} bytes`));
          chunks.push(chunk);
        });
        res.on('error', reject);
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
      });
      req.on('error', reject);
      req.end(body);
    });
    const nullBody = status === 204 || status === 205 || status === 304;
    return new Response(nullBody ? null : text, { status: status >= 200 && status <= 599 ? status : 502 });
  };
}

// ------------------------------------------------------------------------------------------------
// The health cycle's DNS step

export interface DnsFailoverOptions {
  /** The provider for some settings (dnsProvider with guardedFetch by default); tests give fakes. */
  providerFor?: (settings: DnsProviderSettings) => DnsProvider;
  concurrency?: number;
  log?: { info(msg: string): void; warn(msg: string): void } | undefined;
}

export interface FailoverOutcome {
  domains: number;
  /** Domains whose records were rewritten. */
  published: number;
  /** Domains left with a dnsError (a refusal, no provider, or no healthy server). */
  failed: number;
}

type FailoverRow = Awaited<ReturnType<typeof failoverDomainServers>>[number];

const sameList = (a: readonly string[], b: readonly string[]) => a.length === b.length && a.every((x, i) => x === b[i]);
const parseAddresses = (raw: unknown): string[] | null => (raw == null ? null : ((typeof raw === 'string' ? JSON.parse(raw) : raw) as string[]));

/**
 * After the servers' health: for every domain with DNS failover, the addresses wanted are those
 * (publicIp, else the connection's) of its healthy servers. When they differ from what was last
 * published, the account's provider replaces the domain's A/AAAA records with them. The last
 * address is never removed: with no healthy server, what was published stays. A provider error
 * is recorded on the domain (dnsError) and logged, and the cycle goes on with the others. At most
 * DNS_CALL_CONCURRENCY provider calls at once.
 */
export async function publishFailoverAddresses(ctx: ServiceContext, options: DnsFailoverOptions = {}): Promise<FailoverOutcome> {
  const rows = await failoverDomainServers(ctx.db);
  const domains = new Map<string, { first: FailoverRow; servers: FailoverRow[] }>();
  for (const r of rows) {
    const d = domains.get(r.id) ?? { first: r, servers: [] };
    if (r.server_id !== null) d.servers.push(r);
    domains.set(r.id, d);
  }
  if (domains.size === 0) return { domains: 0, published: 0, failed: 0 };
  const accounts = [...new Set([...domains.values()].map((d) => d.first.account_id))];
  const providerFor = options.providerFor ?? ((s: DnsProviderSettings) => dnsProvider(s, guardedFetch(allowPrivate(ctx))));
  const providers = new Map<string, DnsProvider | string>();
  for (const s of await dnsSettingsOfAccounts(ctx.db, accounts)) {
    const settings = readSettings(ctx, s.credentials_enc);
    providers.set(s.account_id, typeof settings === 'string' ? settings : providerFor(settings));
  }

  const outcome = { domains: domains.size, published: 0, failed: 0 };
  await mapBounded([...domains.values()], options.concurrency ?? DNS_CALL_CONCURRENCY, async ({ first: d, servers }) => {
    const published = parseAddresses(d.dns_addresses);
    const wanted = [...new Set(servers.filter((s) => s.healthy === true).flatMap((s) => canonicalAddress(s.public_ip ?? s.ip ?? '') ?? []))].sort();
    const provider = providers.get(d.account_id);
    let error: string | null = null;
    let addresses: string[] | undefined;
    if (!ctx.plans[d.plan as Plan]?.dnsFailover) error = `${PLAN_MESSAGE}; the records are left as they are`;
    else if (wanted.length === 0) {
      // Never the last address: what was published stays until a server is healthy again.
      error = published?.length ? 'No server of this domain is healthy: the addresses last published stay in place' : 'No server of this domain is healthy yet: nothing published';
    } else if (published && sameList(wanted, published)) {
      error = null;
    } else if (provider === undefined) error = 'No DNS provider is connected: connect one with PUT /api/settings/dns';
    else if (typeof provider === 'string') error = provider;
    else {
      try {
        await provider.setAddresses(d.domain, wanted);
        addresses = wanted;
        outcome.published++;
        options.log?.info(`dns failover: ${d.domain} now resolves to ${wanted.join(', ')}`);
      } catch (err) {
        error = `The DNS provider refused the update to ${wanted.join(', ')}: ${err instanceof Error ? err.message : String(err)}`.slice(0, 1000);
        options.log?.warn(`dns failover: ${d.domain}: ${error}`);
      }
    }
    if (error !== null) outcome.failed++;
    if (addresses === undefined && error === d.dns_error) return; // nothing new to write
    await setDomainDns(ctx.db, d.id, { ...(addresses ? { dns_addresses: JSON.stringify(addresses) } : {}), dns_error: error });
  });
  return outcome;
}
