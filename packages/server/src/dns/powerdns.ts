// PowerDNS Authoritative's HTTP API (https://doc.powerdns.com/authoritative/http-api/): the zone
// holding a name is the one whose name is its longest suffix, and one PATCH of that zone replaces
// (or deletes) the name's A and AAAA rrsets together, so both families change in one transaction.
import { ADDRESS_TYPES, DNS_TTL, DnsProviderError, addressesByType, answerText, publishedAddresses, recordName, apiRequest, type DnsProvider } from './common.js';

export interface PowerDnsSettings {
  /** The webserver's base URL, e.g. http://127.0.0.1:8081 (the API lives under /api/v1). */
  apiUrl: string;
  apiKey: string;
  /** Always "localhost" on PowerDNS Authoritative. */
  serverId: string;
}

interface Zone {
  id: string;
  name: string;
}

interface RRset {
  name: string;
  type: string;
  records: { content: string; disabled: boolean }[];
}

export class PowerDnsProvider implements DnsProvider {
  readonly #settings: PowerDnsSettings;
  readonly #fetch: typeof fetch;

  constructor(settings: PowerDnsSettings, fetchImpl: typeof fetch) {
    this.#settings = settings;
    this.#fetch = fetchImpl;
  }

  async setAddresses(name: string, addresses: readonly string[]): Promise<void> {
    const host = recordName(name);
    const wanted = addressesByType(host, addresses);
    const zone = await this.#zoneOf(host);
    const rrsets = ADDRESS_TYPES.map((type) =>
      wanted[type].length === 0
        ? { name: `${host}.`, type, changetype: 'DELETE' }
        : { name: `${host}.`, type, ttl: DNS_TTL, changetype: 'REPLACE', records: wanted[type].map((content) => ({ content, disabled: false })) },
    );
    await this.#call('PATCH', this.#zonePath(zone), { rrsets });
  }

  async getAddresses(name: string): Promise<string[]> {
    const host = recordName(name);
    const zone = await this.#zoneOf(host);
    const detail = (await this.#call('GET', this.#zonePath(zone))) as { rrsets?: RRset[] };
    const contents = (detail.rrsets ?? [])
      .filter((r) => r.name.toLowerCase() === `${host}.` && (ADDRESS_TYPES as readonly string[]).includes(r.type))
      .flatMap((r) => r.records.filter((rec) => !rec.disabled).map((rec) => rec.content));
    return publishedAddresses(contents);
  }

  /** The zone whose name is the longest suffix of host (at a label boundary); zone names end with a dot. */
  async #zoneOf(host: string): Promise<Zone> {
    const zones = await this.#call('GET', `${this.#serverPath()}/zones`);
    if (!Array.isArray(zones)) throw new DnsProviderError('PowerDNS answered its zone list with something else than a list');
    const fqdn = `${host}.`;
    const holding = (zones as Zone[]).filter((z) => {
      const zoneName = z.name.toLowerCase();
      return fqdn === zoneName || fqdn.endsWith(`.${zoneName}`);
    });
    const zone = holding.sort((a, b) => b.name.length - a.name.length)[0];
    if (!zone) throw new DnsProviderError(`PowerDNS server ${this.#settings.serverId} has no zone holding ${host}`);
    return zone;
  }

  #serverPath(): string {
    return `/api/v1/servers/${encodeURIComponent(this.#settings.serverId)}`;
  }

  #zonePath(zone: Zone): string {
    return `${this.#serverPath()}/zones/${encodeURIComponent(zone.id)}`;
  }

  /** One API request; the JSON answer, or undefined for an empty one (PATCH answers 204). */
  async #call(method: 'GET' | 'PATCH', path: string, body?: unknown): Promise<unknown> {
    const { apiUrl, apiKey } = this.#settings;
    const url = `${apiUrl.replace(/\/+$/, '')}${path}`;
    const { status, text } = await apiRequest(this.#fetch, 'PowerDNS', { method, url, path, headers: { 'X-API-Key': apiKey }, body });
    if (status < 200 || status > 299) throw new DnsProviderError(`PowerDNS answered ${method} ${path} with ${status}: ${errorOf(text, apiKey)}`);
    if (text === '') return undefined;
    try {
      return JSON.parse(text);
    } catch {
      throw new DnsProviderError(`PowerDNS answered ${method} ${path} with no JSON: ${answerText(text, apiKey)}`);
    }
  }
}

/** PowerDNS errors are {"error": "..."}; the webserver's own refusals (401) are plain text. */
function errorOf(text: string, apiKey: string): string {
  try {
    const parsed = JSON.parse(text) as { error?: unknown };
    if (typeof parsed.error === 'string') return answerText(parsed.error, apiKey);
  } catch {
    // not JSON: the text itself is the message
  }
  return answerText(text.trim(), apiKey) || '(empty answer)';
}
