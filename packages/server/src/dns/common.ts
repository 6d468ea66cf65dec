// What both DNS providers (cloudflare.ts, powerdns.ts) share: the provider interface and its error,
// the record TTL, and the checks and requests of one call. The factory is provider.ts.
import { isIP } from 'node:net';
import { canonicalIPv6, isHostname, normalizeHostname } from '@rampart/protocol';

/** Seconds resolvers may cache a failover record: short, so a removed server stops getting traffic within a minute. */
export const DNS_TTL = 60;

/** Every provider request gives up after this long, so one hung API cannot stall a health cycle. */
export const DNS_REQUEST_TIMEOUT_MS = 10_000;

export interface DnsProvider {
  /** Makes the A and AAAA records of `name` exactly `addresses` (IPv4 -> A, IPv6 -> AAAA), TTL 60. An empty family's rrset is deleted. */
  setAddresses(name: string, addresses: readonly string[]): Promise<void>;
  /** The A and AAAA addresses now published for `name` (sorted). */
  getAddresses(name: string): Promise<string[]>;
}

/** The provider refused a request or could not be reached; the message says what it answered, never a credential. */
export class DnsProviderError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DnsProviderError';
  }
}

export type AddressType = 'A' | 'AAAA';
export const ADDRESS_TYPES: readonly AddressType[] = ['A', 'AAAA'];

/**
 * One spelling per address, so the wanted list and what a provider answers compare equal: IPv4 as
 * is (node:net accepts only the plain dotted form), IPv6 lowercased with the longest zero run as
 * '::' (the URL parser's serializer). Undefined for anything else, a zone index ("fe80::1%eth0") included.
 */
export function canonicalAddress(address: string): string | undefined {
  const family = isIP(address);
  if (family === 4) return address;
  if (family === 6 && !address.includes('%')) return canonicalIPv6(address);
  return undefined;
}

/**
 * The wanted addresses by record type, canonical, deduplicated and sorted. Throws before any request
 * is made: on an address that is not one (TypeError), and on an empty list (RangeError), because
 * failover keeps the last address published even when every server looks down.
 */
export function addressesByType(name: string, addresses: readonly string[]): Record<AddressType, string[]> {
  if (addresses.length === 0) throw new RangeError(`refusing to remove every address of ${name}: the last address is never removed`);
  const byType: Record<AddressType, Set<string>> = { A: new Set(), AAAA: new Set() };
  for (const address of addresses) {
    const canonical = canonicalAddress(address);
    if (canonical === undefined) throw new TypeError(`not an IP address: ${JSON.stringify(address)}`);
    byType[isIP(canonical) === 4 ? 'A' : 'AAAA'].add(canonical);
  }
  return { A: [...byType.A].sort(), AAAA: [...byType.AAAA].sort() };
}

/** The name as both APIs want it (lowercase, no trailing dot); a TypeError for anything that is no hostname. */
export function recordName(name: string): string {
  const host = normalizeHostname(name);
  if (!isHostname(host)) throw new TypeError(`not a DNS name: ${JSON.stringify(name)}`);
  return host;
}

/** Published record contents in the shape getAddresses promises: canonical and sorted. */
export function publishedAddresses(contents: readonly string[]): string[] {
  return contents.map((c) => canonicalAddress(c) ?? c).sort();
}

/** An API's answer text cut to a readable length, with the credential blanked should the answer echo it. */
export function answerText(text: string, secret: string): string {
  const cut = text.length > 300 ? `${text.slice(0, 300)}…` : text;
  return secret ? cut.split(secret).join('[credential]') : cut;
}

/**
 * One request to a provider's API: a JSON body when given, the request timeout, and the answer's
 * status and text. A failure before any answer is a DnsProviderError naming `label` and the request.
 */
export async function apiRequest(
  fetchImpl: typeof fetch,
  label: string,
  request: { method: string; url: string | URL; path: string; headers: Record<string, string>; body?: unknown },
): Promise<{ status: number; text: string }> {
  const headers = { ...request.headers, accept: 'application/json', ...(request.body !== undefined ? { 'content-type': 'application/json' } : {}) };
  try {
    const res = await fetchImpl(request.url, {
      method: request.method,
      headers,
      body: request.body === undefined ? undefined : JSON.stringify(request.body),
      signal: AbortSignal.timeout(DNS_REQUEST_TIMEOUT_MS),
    });
    return { status: res.status, text: await res.text() };
  } catch (err) {
    throw new DnsProviderError(`${label} ${request.method} ${request.path} failed: ${transportFailure(err)}`);
  }
}

/** Why a request failed before any answer (refused connection, DNS failure, our timeout), for an error message. */
function transportFailure(err: unknown): string {
  if (err instanceof Error && err.name === 'TimeoutError') return `no answer within ${DNS_REQUEST_TIMEOUT_MS / 1000} s`;
  const cause = err instanceof Error && err.cause instanceof Error ? err.cause.message : undefined;
  return cause ?? (err instanceof Error ? err.message : String(err));
}
