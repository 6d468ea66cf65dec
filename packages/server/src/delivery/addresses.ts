import { BlockList, isIP, isIPv4 } from 'node:net';

/**
 * Address ranges a webhook may not reach: what is not globally routable (IANA's special-purpose
 * registries), so a customer's webhook URL cannot make the control plane call itself, its
 * database, the cloud metadata service (169.254.169.254) or anything else on its own network.
 */
const NOT_PUBLIC = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8], // "this network", includes the unspecified address
  ['10.0.0.0', 8], // private
  ['100.64.0.0', 10], // carrier-grade NAT
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local, cloud metadata
  ['172.16.0.0', 12], // private
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // documentation
  ['192.88.99.0', 24], // 6to4 relay anycast (deprecated)
  ['192.168.0.0', 16], // private
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // documentation
  ['203.0.113.0', 24], // documentation
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, includes broadcast
] as const) {
  NOT_PUBLIC.addSubnet(net, prefix, 'ipv4');
}

/**
 * IPv6 global unicast (2000::/3): nothing outside it is public (loopback, unique-local,
 * link-local, multicast...), and within it the ranges below are not either.
 */
const GLOBAL_UNICAST_V6 = new BlockList();
GLOBAL_UNICAST_V6.addSubnet('2000::', 3, 'ipv6');
for (const [net, prefix] of [
  ['2001::', 23], // IETF protocol assignments: Teredo, benchmarking, ORCHID
  ['2001:db8::', 32], // documentation
  ['2002::', 16], // 6to4 (deprecated), which embeds any IPv4 address
  ['3fff::', 20], // documentation
] as const) {
  NOT_PUBLIC.addSubnet(net, prefix, 'ipv6');
}

/**
 * The eight 16-bit groups of an IPv6 address (one net.isIPv6 accepts, without a zone), so the
 * IPv4 address some forms carry can be read.
 */
function ipv6Groups(ip: string): number[] {
  let text = ip;
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head = '', tail] = text.split('::');
  const headGroups = head ? head.split(':') : [];
  const tailGroups = tail ? tail.split(':') : [];
  const zeros = tail === undefined ? [] : Array<string>(8 - headGroups.length - tailGroups.length).fill('0');
  return [...headGroups, ...zeros, ...tailGroups].map((g) => parseInt(g, 16));
}

/**
 * The IPv4 address an IPv4-mapped (::ffff:a.b.c.d) or NAT64 (64:ff9b::a.b.c.d) address reaches,
 * else null: such an address is as public as the IPv4 address it carries.
 */
function embeddedIPv4(ip: string): string | null {
  const g = ipv6Groups(ip);
  const mapped = g.slice(0, 5).every((x) => x === 0) && g[5] === 0xffff;
  const nat64 = g[0] === 0x64 && g[1] === 0xff9b && g.slice(2, 6).every((x) => x === 0);
  if (!mapped && !nat64) return null;
  const [hi = 0, lo = 0] = g.slice(6);
  return [hi >> 8, hi & 0xff, lo >> 8, lo & 0xff].join('.');
}

/**
 * Whether an address is globally routable: not private, loopback, link-local, unique-local,
 * carrier-grade NAT, multicast, unspecified, documentation or otherwise reserved, nor an
 * IPv4-mapped or NAT64 form of one. Anything that is not an IP address (a name, an address with
 * a zone such as fe80::1%eth0) is not public either.
 */
export function isPublicAddress(ip: string): boolean {
  if (isIPv4(ip)) return !NOT_PUBLIC.check(ip, 'ipv4');
  if (isIP(ip) !== 6 || ip.includes('%')) return false;
  const v4 = embeddedIPv4(ip);
  if (v4 !== null) return isPublicAddress(v4);
  return GLOBAL_UNICAST_V6.check(ip, 'ipv6') && !NOT_PUBLIC.check(ip, 'ipv6');
}
