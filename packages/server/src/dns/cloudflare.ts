// Cloudflare's v4 API (https://developers.cloudflare.com/api/): records are edited one by one, so
// a change is planned per family from the records listed for the name, then sent with new and
// rewritten records first and deletions last; a name never has fewer addresses on the way than it
// ends with. Every answer is the envelope { success, errors, messages, result } and counts only
// when success is true and errors is empty.
import { ADDRESS_TYPES, DNS_TTL, DnsProviderError, addressesByType, answerText, canonicalAddress, publishedAddresses, recordName, apiRequest, type AddressType, type DnsProvider } from './common.js';

const CLOUDFLARE_API_BASE = 'https://api.cloudflare.com/client/v4';

export interface CloudflareSettings {
  /** An API token with Zone:DNS:Edit (writes the records) and Zone:Zone:Read (finds the zone by name) on the zone. */
  apiToken: string;
  apiBase?: string;
}

interface DnsRecord {
  id: string;
  content: string;
  ttl: number;
  proxied?: boolean;
}

/** The requests that turn one family's listed records into the wanted addresses. */
interface FamilyChanges {
  /** Records rewritten: a spare one given a missing address, or a wanted one with the wrong TTL or proxying. */
  update: { id: string; content: string }[];
  create: string[];
  remove: string[];
}

/**
 * Keeps each record already holding a wanted address, reuses spare records (unwanted addresses,
 * duplicates) for missing addresses before creating any, and removes the spares left over.
 */
function planFamily(existing: readonly DnsRecord[], wanted: readonly string[]): FamilyChanges {
  const missing = new Set(wanted);
  const update: FamilyChanges['update'] = [];
  const spare: string[] = [];
  for (const record of existing) {
    const content = canonicalAddress(record.content) ?? record.content;
    if (!missing.delete(content)) spare.push(record.id);
    else if (record.ttl !== DNS_TTL || record.proxied !== false) update.push({ id: record.id, content });
  }
  const create: string[] = [];
  for (const content of missing) {
    const id = spare.shift();
    if (id === undefined) create.push(content);
    else update.push({ id, content });
  }
  return { update, create, remove: spare };
}

export class CloudflareProvider implements DnsProvider {
  readonly #token: string;
  readonly #base: string;
  readonly #fetch: typeof fetch;

  constructor(settings: CloudflareSettings, fetchImpl: typeof fetch) {
    this.#token = settings.apiToken;
    this.#base = (settings.apiBase ?? CLOUDFLARE_API_BASE).replace(/\/+$/, '');
    this.#fetch = fetchImpl;
  }

  async setAddresses(name: string, addresses: readonly string[]): Promise<void> {
    const host = recordName(name);
    const wanted = addressesByType(host, addresses);
    const zoneId = await this.#zoneOf(host);
    const records = `/zones/${encodeURIComponent(zoneId)}/dns_records`;
    const plans: (FamilyChanges & { type: AddressType })[] = [];
    for (const type of ADDRESS_TYPES) plans.push({ type, ...planFamily(await this.#records(zoneId, host, type), wanted[type]) });
    for (const { type, update, create } of plans) {
      for (const { id, content } of update) await this.#call('PATCH', `${records}/${encodeURIComponent(id)}`, {}, recordBody(type, host, content));
      for (const content of create) await this.#call('POST', records, {}, recordBody(type, host, content));
    }
    for (const { remove } of plans) {
      for (const id of remove) await this.#call('DELETE', `${records}/${encodeURIComponent(id)}`);
    }
  }

  async getAddresses(name: string): Promise<string[]> {
    const host = recordName(name);
    const zoneId = await this.#zoneOf(host);
    const contents: string[] = [];
    for (const type of ADDRESS_TYPES) contents.push(...(await this.#records(zoneId, host, type)).map((r) => r.content));
    return publishedAddresses(contents);
  }

  /** Walks up from host (www.shop.example.com, shop.example.com, example.com) to the first zone the token sees. */
  async #zoneOf(host: string): Promise<string> {
    const labels = host.split('.');
    for (let i = 0; i < labels.length - 1; i++) {
      const candidate = labels.slice(i).join('.');
      const zones = (await this.#list('/zones', { name: candidate })) as { id: string; name: string }[];
      const zone = zones.find((z) => z.name === candidate);
      if (zone) return zone.id;
    }
    throw new DnsProviderError(`Cloudflare has no zone holding ${host} that this API token can see`);
  }

  async #records(zoneId: string, host: string, type: AddressType): Promise<DnsRecord[]> {
    return (await this.#list(`/zones/${encodeURIComponent(zoneId)}/dns_records`, { type, name: host })) as DnsRecord[];
  }

  async #list(path: string, query: Record<string, string>): Promise<unknown[]> {
    const result = await this.#call('GET', path, query);
    if (!Array.isArray(result)) throw new DnsProviderError(`Cloudflare answered GET ${path} with something else than a list`);
    return result as unknown[];
  }

  /** One API request; the envelope's result when Cloudflare reports success, else a DnsProviderError with its errors. */
  async #call(method: 'GET' | 'POST' | 'PATCH' | 'DELETE', path: string, query: Record<string, string> = {}, body?: unknown): Promise<unknown> {
    const url = new URL(`${this.#base}${path}`);
    for (const [key, value] of Object.entries(query)) url.searchParams.set(key, value);
    const { status, text } = await apiRequest(this.#fetch, 'Cloudflare', { method, url, path, headers: { authorization: `Bearer ${this.#token}` }, body });
    let answer: Envelope;
    try {
      answer = JSON.parse(text) as Envelope;
    } catch {
      throw new DnsProviderError(`Cloudflare answered ${method} ${path} with ${status} and no JSON: ${answerText(text, this.#token)}`);
    }
    const errors = Array.isArray(answer?.errors) ? answer.errors : [];
    if (status < 200 || status > 299 || answer?.success !== true || errors.length > 0) {
      throw new DnsProviderError(`Cloudflare refused ${method} ${path} (${status}): ${answerText(describeErrors(errors), this.#token)}`);
    }
    return answer.result;
  }
}

interface Envelope {
  success?: unknown;
  errors?: unknown;
  result?: unknown;
}

/** A failover record as Cloudflare takes it: DNS only (a proxied record would publish Cloudflare's addresses, not ours). */
function recordBody(type: AddressType, name: string, content: string) {
  return { type, name, content, ttl: DNS_TTL, proxied: false };
}

/** Cloudflare's errors as "Authentication error (code 10000)", joined. */
function describeErrors(errors: unknown[]): string {
  const described = errors.map((e) => {
    const { code, message } = (e ?? {}) as { code?: unknown; message?: unknown };
    return `${typeof message === 'string' ? message : 'unnamed error'}${code === undefined ? '' : ` (code ${typeof code === 'number' || typeof code === 'string' ? code : JSON.stringify(code)})`}`;
  });
  return described.join('; ') || 'no error given';
}
