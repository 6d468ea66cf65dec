import { isCidr } from '@rampart/protocol';

// Where the control plane sits behind a reverse proxy (docs/api.md "Behind a reverse proxy"): the
// proxies it trusts with X-Forwarded-For and X-Forwarded-Proto, and the address users reach it at.

/**
 * `--trust-proxy` / RAMPART_TRUST_PROXY: a comma-separated list of IPv4 or IPv6 addresses and CIDR
 * ranges (none when empty). Fastify takes the list as is: the client address is the right-most
 * X-Forwarded-For entry that is not one of them, and only a peer in the list is asked at all.
 */
export function trustProxyFrom(value: string | undefined, source: string): string[] {
  if (value === undefined || value.trim() === '') return [];
  const entries = value.split(',').map((e) => e.trim());
  for (const e of entries) {
    if (!isCidr(e)) throw new Error(`${source}: ${JSON.stringify(e)} is not an IP address or CIDR range`);
  }
  return entries;
}

/** `--public-url` / RAMPART_PUBLIC_URL: an http or https URL, or undefined when unset. */
export function publicUrlFrom(value: string | undefined, source: string): URL | undefined {
  if (value === undefined || value.trim() === '') return undefined;
  let url: URL;
  try {
    url = new URL(value.trim());
  } catch {
    throw new Error(`${source}: ${JSON.stringify(value)} is not a URL`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new Error(`${source}: must be an http or https URL`);
  return url;
}
