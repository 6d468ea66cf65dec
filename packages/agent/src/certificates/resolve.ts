import { promises as dns } from 'node:dns';
import { isIPv4 } from 'node:net';
import { canonicalIPv6 } from '@rampart/protocol';

/** A domain's addresses (A and AAAA); [] when it does not resolve. */
export type ResolveFn = (domain: string) => Promise<string[]>;

const NO_ANSWER = new Set(['ENOTFOUND', 'ENODATA', 'ESERVFAIL', 'ENONAME', 'EAI_NONAME', 'EAI_NODATA']);

/**
 * `--resolver HOST:PORT` asks that DNS server (A and AAAA); without it, the system's resolver
 * (getaddrinfo, so /etc/hosts counts too).
 */
export function makeResolver(server?: string): ResolveFn {
  if (!server) {
    return async (domain) => {
      try {
        return (await dns.lookup(domain, { all: true })).map((a) => a.address);
      } catch (err) {
        if (NO_ANSWER.has((err as NodeJS.ErrnoException).code ?? '')) return [];
        throw err;
      }
    };
  }
  const resolver = new dns.Resolver({ timeout: 3000, tries: 2 });
  resolver.setServers([server]);
  const ask = async (f: () => Promise<string[]>) => {
    try {
      return await f();
    } catch (err) {
      if (NO_ANSWER.has((err as NodeJS.ErrnoException).code ?? '')) return [];
      throw err;
    }
  };
  return async (domain) => [...(await ask(() => resolver.resolve4(domain))), ...(await ask(() => resolver.resolve6(domain)))];
}

/** One spelling per address: IPv4-mapped IPv6 as IPv4, IPv6 compressed and lowercased. */
export function canonicalIp(ip: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (mapped) return mapped[1]!;
  if (isIPv4(ip)) return ip;
  try {
    return canonicalIPv6(ip);
  } catch {
    return ip.toLowerCase();
  }
}

export type DnsCheck = { ok: true } | { ok: false; message: string };

/**
 * Before an order: the domain must resolve to at least one shield server of the domain, or the
 * authority's validation would reach someone else. The message says what to fix.
 */
export function checkPointsHere(domain: string, resolved: readonly string[], serverAddresses: readonly string[]): DnsCheck {
  const ours = new Set(serverAddresses.map(canonicalIp));
  const theirs = [...new Set(resolved.map(canonicalIp))];
  if (theirs.some((a) => ours.has(a))) return { ok: true };
  const servers = serverAddresses.length ? ` (${[...ours].join(', ')})` : ' (none has an address yet: connect its agent or set its publicIp)';
  if (theirs.length === 0) return { ok: false, message: `${domain} does not resolve; point it to a shield server of this domain${servers}` };
  return { ok: false, message: `${domain} resolves to ${theirs.join(', ')}, not to a shield server of this domain${servers}` };
}
