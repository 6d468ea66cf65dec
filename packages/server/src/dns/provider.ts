// The DNS side of DNS failover: a domain's A/AAAA records hold the addresses of its healthy shield
// servers, and the health cycle hands a provider the full list it wants published for a name.
// Both implementations replace a name's address records as a whole, so a call is idempotent and a
// cycle that repeats after a failure converges on the same records. This module is what the rest
// of the server uses: the factory, and what a caller needs of common.ts (which the providers share).
import { CloudflareProvider } from './cloudflare.js';
import { PowerDnsProvider } from './powerdns.js';
import type { DnsProvider } from './common.js';

export { canonicalAddress, DnsProviderError, type DnsProvider } from './common.js';

export type DnsProviderSettings = { provider: 'powerdns'; apiUrl: string; apiKey: string; serverId: string } | { provider: 'cloudflare'; apiToken: string; apiBase?: string };

export function dnsProvider(settings: DnsProviderSettings, fetchImpl: typeof fetch = fetch): DnsProvider {
  switch (settings.provider) {
    case 'powerdns':
      return new PowerDnsProvider(settings, fetchImpl);
    case 'cloudflare':
      return new CloudflareProvider(settings, fetchImpl);
  }
}
