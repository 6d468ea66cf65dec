// Strict validators for every user string that can end up in a generated HAProxy or Lua file.
// The API runs them on the way in and the renderers run them again before writing anything, so a
// value that passes here is a plain token: no spaces, quotes, '#', backslashes or control bytes.

const IPV4_OCTET = '(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)';
const IPV4_RE = new RegExp(`^${IPV4_OCTET}(?:\\.${IPV4_OCTET}){3}$`);
const LABEL_RE = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;
const COUNTRY_RE = /^[A-Z]{2}$/;

export function isIPv4(value: string): boolean {
  return IPV4_RE.test(value);
}

/** RFC 4291 text forms, including an embedded IPv4 tail; no zone index, no brackets. */
export function isIPv6(value: string): boolean {
  if (value.length < 2 || value.length > 45 || !/^[0-9a-fA-F:.]+$/.test(value)) return false;
  let head = value;
  let groupsNeeded = 8;
  const lastColon = value.lastIndexOf(':');
  const tail = value.slice(lastColon + 1);
  if (tail.includes('.')) {
    if (!isIPv4(tail)) return false;
    // "::1.2.3.4" keeps "::"; "1:2:3:4:5:6:1.2.3.4" keeps "1:2:3:4:5:6" (the separator goes).
    head = value.slice(0, lastColon + 1);
    if (!head.endsWith('::')) head = head.slice(0, -1);
    groupsNeeded = 6;
  }
  const parts = head.split('::');
  if (parts.length > 2) return false;
  const groups = (s: string) => (s === '' ? [] : s.split(':'));
  const valid = (g: string[]) => g.every((x) => /^[0-9a-fA-F]{1,4}$/.test(x));
  if (parts.length === 1) {
    const g = groups(parts[0]!);
    return g.length === groupsNeeded && valid(g);
  }
  const left = groups(parts[0]!);
  const right = groups(parts[1]!);
  return valid(left) && valid(right) && left.length + right.length < groupsNeeded;
}

export function isIP(value: string): boolean {
  return isIPv4(value) || isIPv6(value);
}

/** An IPv4 address with an optional /0../32 suffix, or an IPv6 address with an optional /0../128. */
export function isCidr(value: string): boolean {
  const slash = value.indexOf('/');
  if (slash === -1) return isIP(value);
  const addr = value.slice(0, slash);
  const bits = value.slice(slash + 1);
  if (!/^(?:0|[1-9]\d{0,2})$/.test(bits)) return false;
  const n = Number(bits);
  if (isIPv4(addr)) return n <= 32;
  if (isIPv6(addr)) return n <= 128;
  return false;
}

/**
 * One spelling of an IPv6 address (checked by the caller): lowercased, leading zeros dropped, the
 * longest run of zero groups compressed, as RFC 5952 writes it. The WHATWG URL parser (node and
 * browsers alike) serializes an IPv6 host exactly so.
 */
export function canonicalIPv6(addr: string): string {
  return new URL(`http://[${addr}]/`).hostname.slice(1, -1);
}

/**
 * An address or network (isCidr) in one spelling per meaning, so a repeat is found by equality:
 * IPv6 lowercased and written as RFC 5952 says (no leading zeros, the longest run of zero groups
 * as "::"; a form with an IPv4 tail is only lowercased), and a full-length prefix (/32, /128)
 * dropped. Undefined when the value is not isCidr.
 */
export function canonicalCidr(value: string): string | undefined {
  if (!isCidr(value)) return undefined;
  const [addr, bits] = value.split('/') as [string, string | undefined];
  if (isIPv4(addr)) return bits === undefined || bits === '32' ? addr : `${addr}/${bits}`;
  // Written with an IPv4 tail, only lowercased (the WHATWG URL parser would turn the tail into hex).
  const a = addr.includes('.') ? addr.toLowerCase() : canonicalIPv6(addr);
  return bits === undefined || bits === '128' ? a : `${a}/${bits}`;
}

/**
 * An address (isIP) as its bits, most significant first: 32 for IPv4, 128 for IPv6 (an IPv4 tail,
 * ::ffff:192.0.2.1, read as its two groups). A network's first `n` bits are the first `n` of its
 * address. Undefined when the value is no address.
 */
export function ipBits(ip: string): string | undefined {
  const octets = (v4: string) => v4.split('.').map((o) => Number(o).toString(2).padStart(8, '0'));
  if (isIPv4(ip)) return octets(ip).join('');
  if (!isIPv6(ip)) return undefined;
  // the IPv4 tail as two hex groups, then every group written out
  const hex = ip.replace(/(\d+\.\d+\.\d+\.\d+)$/, (v4) => {
    const b = octets(v4).join('');
    return `${parseInt(b.slice(0, 16), 2).toString(16)}:${parseInt(b.slice(16), 2).toString(16)}`;
  });
  const [head, tail] = hex.split('::') as [string, string | undefined];
  const groups = (s: string | undefined) => (s ? s.split(':') : []);
  const h = groups(head);
  const t = groups(tail);
  const all = tail === undefined ? h : [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t];
  return all.map((g) => parseInt(g, 16).toString(2).padStart(16, '0')).join('');
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * The one UUID check of the project: canonical (lowercase) form, as the service stores and sends
 * ids; `anyCase` also takes the upper-case spelling an id may have in a URL.
 */
export function isUuid(value: unknown, anyCase = false): value is string {
  return typeof value === 'string' && UUID_RE.test(anyCase ? value.toLowerCase() : value);
}

/**
 * A fully qualified domain name: at least two labels of [a-z0-9-], no label starting or ending with
 * '-', 253 characters at most, a top-level label that is not all digits. Callers lowercase first.
 */
export function isHostname(value: string): boolean {
  if (value.length < 3 || value.length > 253) return false;
  const labels = value.split('.');
  if (labels.length < 2) return false;
  if (!labels.every((l) => LABEL_RE.test(l))) return false;
  return !/^\d+$/.test(labels[labels.length - 1]!);
}

/**
 * An origin's DNS name (`{ host, port }` origins): a fully qualified name as isHostname has it, or
 * one label such as `localhost` or a container's service name. Callers lowercase first.
 */
export function isOriginHost(value: string): boolean {
  return isHostname(value) || (LABEL_RE.test(value) && !/^\d+$/.test(value));
}

/** An origin by address (SPEC.md) or by DNS name, which HAProxy resolves at run time. */
export type OriginAddress = { ip: string; port: number } | { host: string; port: number };

/** The address or name an origin is reached at. */
export function originTarget(o: OriginAddress): string {
  return 'host' in o ? o.host : o.ip;
}

/** Lowercases and drops one trailing dot; the result still has to pass isHostname. */
export function normalizeHostname(value: string): string {
  const lower = value.toLowerCase();
  return lower.endsWith('.') ? lower.slice(0, -1) : lower;
}

export function isPort(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= 65535;
}

export function isCountryCode(value: string): boolean {
  return COUNTRY_RE.test(value);
}

/** The HAProxy backend name of a domain: "be_" and the name with dots as underscores. */
export function backendName(domain: string): string {
  return `be_${domain.replace(/\./g, '_')}`;
}

/** host:port, with IPv6 literals in brackets. */
export function formatHostPort(ip: string, port: number): string {
  return isIPv6(ip) ? `[${ip}]:${port}` : `${ip}:${port}`;
}
