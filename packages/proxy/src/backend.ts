import { backendName, formatHostPort, isHostname, isIP, isOriginHost, isPort, originTarget, type OriginAddress } from '@rampart/protocol';

export type Origin = OriginAddress;

/** The resolvers section origins by name use: the system's resolv.conf, names looked up again every 10 s. */
export const RESOLVERS = 'rampart_dns';
export const RESOLVERS_SECTION = [`resolvers ${RESOLVERS}`, '    parse-resolv-conf', '    hold valid 10s'].join('\n');

export function hasNamedOrigin(domains: readonly RoutedDomain[]): boolean {
  return domains.some((d) => d.origins.some((o) => 'host' in o));
}

export interface RoutedDomain {
  domain: string;
  origins: readonly Origin[];
}

export class UnsafeValueError extends Error {
  constructor(what: string, value: unknown) {
    super(`refusing to render ${what} ${JSON.stringify(value)}: it is not a validated token`);
    this.name = 'UnsafeValueError';
  }
}

/** The renderer's own check: only validated tokens are ever written into configuration syntax. */
export function assertRenderable(d: RoutedDomain): void {
  if (!isHostname(d.domain)) throw new UnsafeValueError('domain', d.domain);
  for (const o of d.origins) {
    if ('host' in o) {
      if (!isOriginHost(o.host)) throw new UnsafeValueError('origin host', o.host);
    } else if (!isIP(o.ip)) throw new UnsafeValueError('origin address', o.ip);
    if (!isPort(o.port)) throw new UnsafeValueError('origin port', o.port);
  }
}

/** What a live shield server adds to a domain's backend; the export template has none of it. */
export interface LiveBackend {
  /** WAF lines, before the request headers are set. */
  requestRules: readonly string[];
  /** Set once the domain has a certificate: plain-HTTP requests get a 301 to this origin ("https://host[:port]"). */
  httpsRedirect?: string | undefined;
  /** HTTPS is bound: a TLS request must have come with this domain's name as SNI (else 421). */
  checkSni?: boolean | undefined;
}

export const MISDIRECTED = 'http-request return status 421 content-type text/plain string "Misdirected Request"';

/**
 * Client-sent headers an origin might take for the client's address or scheme. They are dropped
 * before HAProxy sets its own (X-Forwarded-For by `option forwardfor`, X-Real-IP, X-Forwarded-Proto):
 * every X-Forwarded and X-Forwarded-* (a proxy's word, never a client's: -Ssl and -Scheme make Rack
 * see https), the names PHP's usual client-address lookups read (Client-IP, Forwarded-For, ...);
 * any header with an underscore goes too, since many servers read "X_Real_IP" as "X-Real-IP".
 * X-Original-URL and X-Rewrite-URL go as well: IIS and Symfony route by them, so they would carry a
 * path past the WAF, which inspects the request line.
 */
const SPOOFABLE_NAMES =
  'x-forwarded(?:-[a-z0-9-]+)?|forwarded(?:-for)?|client-ip|true-client-ip|x-client-ip|x-cluster-client-ip|x-originating-ip|x-remote-ip|x-remote-addr|cf-connecting-ip|fastly-client-ip|x-original-url|x-rewrite-url';
const SPOOFABLE_HEADERS = `^(?:${SPOOFABLE_NAMES})$|_`;
/**
 * The same names in req.hdr_names (every name, joined with commas, which no name holds): one regex
 * pass over the list tells whether del-header has anything to do. del-header runs its regex on each
 * header in turn (about 8,500 instructions for an ordinary browser request, callgrind); the guard
 * costs about 2,000, and a request with such a header still loses every one. A name's bounds are
 * lookarounds (after the start or a comma, before a comma or the end), not a group that consumes
 * one: PCRE2 then starts only where a name's first letter is (about 600 instructions fewer a
 * request of the mix).
 */
const SPOOFABLE_PRESENT = `{ req.hdr_names -m reg (?<![^,])(?:${SPOOFABLE_NAMES})(?![^,])|_ }`;

/**
 * One backend per domain, as docs/api.md describes the export template: health check on "/", the three request headers,
 * and one health-checked server line per origin named origin0, origin1, ... The export template
 * says X-Forwarded-Proto https as docs/api.md gives it; a live shield server says what the client used,
 * redirects plain HTTP once the domain has a certificate, and forwards the client address itself.
 */
export function renderBackend(d: RoutedDomain, live?: LiveBackend): string {
  assertRenderable(d);
  const lines = [`backend ${backendName(d.domain)}`, '    option httpchk', `    http-check send meth GET uri / ver HTTP/1.1 hdr Host ${d.domain}`];
  if (live) {
    // Over TLS the Host (which chose this backend) must be the SNI's domain: every certificate names
    // one domain, so no browser sends another; one that does is misdirected (domain fronting, or a
    // domain without its own certificate here), as Cloudflare refuses it too. A static compare
    // here costs less than comparing two fetched values in the frontend.
    if (live.checkSni) lines.push(`    ${MISDIRECTED} if { ssl_fc } !{ ssl_fc_sni -i ${d.domain} }`);
    if (live.httpsRedirect !== undefined) {
      if (!/^https:\/\/[a-z0-9.-]+(?::\d{1,5})?$/.test(live.httpsRedirect)) throw new UnsafeValueError('redirect', live.httpsRedirect);
      // Before the WAF: the redirected request comes back over HTTPS and is checked there.
      lines.push(`    http-request redirect prefix ${live.httpsRedirect} code 301 unless { ssl_fc }`);
    }
    lines.push(
      '    option forwardfor',
      ...live.requestRules,
      // HTX keeps header names lowercased, so one case-sensitive pass finds every spelling.
      `    http-request del-header ${SPOOFABLE_HEADERS} -m reg if ${SPOOFABLE_PRESENT}`,
      '    http-request set-header X-Forwarded-Proto %[ssl_fc,iif(https,http)]',
    );
  } else {
    lines.push('    http-request set-header X-Forwarded-Proto https');
  }
  lines.push(
    '    http-request set-header X-Real-IP %[src]',
    `    http-request set-header Host ${d.domain}`,
    // A name: the system resolver's answer at start (else the last known or none, so HAProxy starts
    // anyway), then HAProxy's own DNS lookups (RESOLVERS) follow its changes. An export template
    // (no live shield server) lets HAProxy resolve it once at start.
    ...d.origins.map((o, i) =>
      'host' in o && live
        ? `    server origin${i} ${o.host}:${o.port} check resolvers ${RESOLVERS} resolve-prefer ipv4 init-addr last,libc,none`
        : `    server origin${i} ${formatHostPort(originTarget(o), o.port)} check`,
    ),
  );
  return lines.join('\n');
}

/** Code-point order, the same on every machine whatever its locale (localeCompare is not). */
export function byDomain(a: { domain: string }, b: { domain: string }): number {
  return a.domain < b.domain ? -1 : a.domain > b.domain ? 1 : 0;
}
