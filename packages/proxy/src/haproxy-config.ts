import { createHash } from 'node:crypto';
import { isAbsolute } from 'node:path';
import { HEALTH_PATH, isHostname, isPort, type ServerSnapshot, type SnapshotDomain } from '@rampart/protocol';
import { backendName } from '@rampart/protocol';
import { assertRenderable, byDomain, hasNamedOrigin, MISDIRECTED, renderBackend, RESOLVERS_SECTION, UnsafeValueError } from './backend.js';
import { renderWaf } from './waf.js';
import { errorLines, REQUEST_ID_HEADER, TEXT_404 } from './waf-pages.js';

export interface RenderOptions {
  /** Address:port pairs are the agent's own settings, never user input. */
  httpBind: { address: string; port: number };
  /** Bound (same address as httpBind) only while at least one domain has a certificate. */
  httpsPort?: number | undefined;
  /** Served certificates: one PEM file (chain and key) per domain with sslEnabled. */
  certificates?: readonly ServedCertificate[] | undefined;
  /** Loopback port of the agent's ACME HTTP-01 responder. */
  acmePort?: number | undefined;
  /** Absolute directory for HAProxy's runtime sockets (stable across revisions). */
  runDir: string;
  /** Loopback UDP port of the agent's syslog listener for WAF events. */
  eventsPort?: number | undefined;
  /** The agent's per-start secret every event line carries (hex), so no other local process can inject events. */
  eventsSecret?: string | undefined;
  /** Worker threads (HAProxy's default: one per CPU). */
  nbthread?: number | undefined;
  /**
   * Absolute path of the CIDR -> country map: block_country rules and custom rules that read
   * ip.src.country look the client up in it (no country is refused or read without it).
   */
  countryMap?: string | undefined;
  /**
   * When countryMap's values are classes of countries (countryClasses) rather than the countries:
   * each country's class. A domain's refused countries and a custom rule's comparison then become
   * the classes they hold for.
   */
  countryClasses?: ReadonlyMap<string, string> | undefined;
}

export interface ServedCertificate {
  domain: string;
  /** Absolute path of the PEM file; its name changes with its content, so a renewal changes the hash. */
  file: string;
}

export interface RenderTarget {
  /** Absolute directory the files will be written to (one per configuration). */
  configDir: string;
  /**
   * Search crawler addresses the agent has verified (address -> crawler id), written into the
   * verified crawler map. Not part of the hash: the agent keeps the running map current through
   * HAProxy's runtime API, so a verification never needs a reload.
   */
  verifiedCrawlers?: ReadonlyMap<string, string> | undefined;
}

export interface RenderedConfig {
  /** File name -> content, to be written into target.configDir. */
  files: Record<string, string>;
  /** Hash of everything that decides the output (revision excluded): equal hash, same files. */
  hash: string;
}

/** The defaults every shield server runs with (the export template's timeouts, docs/api.md); benchmarks reuse them. */
export const DEFAULTS_SECTION: readonly string[] = [
  'defaults',
  '    mode http',
  '    option http-keep-alive',
  '    timeout connect 5000',
  '    timeout client 50000',
  '    timeout server 50000',
  '    timeout http-request 10000',
  '    default-server init-addr none',
];

/**
 * TLS as Mozilla's "intermediate" profile has it: TLS 1.2 and 1.3 only, forward-secret AEAD
 * ciphers, no session tickets (their keys would never rotate). Benchmarks reuse it.
 */
export const TLS_GLOBAL: readonly string[] = [
  '    ssl-default-bind-ciphers ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305',
  '    ssl-default-bind-ciphersuites TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256',
  '    ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets',
];
export const ALPN = 'h2,http/1.1';

/** The path of the ACME HTTP-01 challenge, answered for every host before anything else. */
export const ACME_CHALLENGE_PATH = '/.well-known/acme-challenge/';

/**
 * What every shield server answers at HEALTH_PATH (the service's probe): 200 `ok`, never cached.
 * HAProxy's monitor-uri compares the request's path (any method; a query makes it another path) as
 * soon as the request is parsed, before any rule: a rule testing the path would cost every
 * forwarded request about 750 instructions (callgrind), the monitor-uri almost none.
 */
export const HEALTH_LINES = [`    monitor-uri ${HEALTH_PATH}`, '    http-error status 200 content-type text/plain string ok hdr cache-control no-store'];

export const HEALTH_SOCKET = 'health.sock';
export const MASTER_SOCKET = 'master.sock';
export const ADMIN_SOCKET = 'admin.sock';

const SAFE_PATH = /^[A-Za-z0-9_./-]+$/;

function checkOptions(o: RenderOptions, t: RenderTarget): void {
  if (!isAbsolute(o.runDir) || !SAFE_PATH.test(o.runDir)) throw new UnsafeValueError('runDir', o.runDir);
  if (!isAbsolute(t.configDir) || !SAFE_PATH.test(t.configDir)) throw new UnsafeValueError('configDir', t.configDir);
  if (!/^(?:\*|[0-9.]+|\[[0-9a-fA-F:]+\])$/.test(o.httpBind.address)) throw new UnsafeValueError('bind address', o.httpBind.address);
  if (!isPort(o.httpBind.port)) throw new UnsafeValueError('bind port', o.httpBind.port);
  if (o.countryMap !== undefined && (!isAbsolute(o.countryMap) || !SAFE_PATH.test(o.countryMap))) throw new UnsafeValueError('countryMap', o.countryMap);
  for (const id of o.countryClasses?.values() ?? []) if (!/^c[0-9]{3,5}$/.test(id)) throw new UnsafeValueError('countryClasses', id);
  if (o.eventsPort !== undefined && !isPort(o.eventsPort)) throw new UnsafeValueError('events port', o.eventsPort);
  if (o.eventsSecret !== undefined && !/^[0-9a-f]{32,64}$/.test(o.eventsSecret)) throw new UnsafeValueError('events secret', '<redacted>');
  if (o.httpsPort !== undefined && !isPort(o.httpsPort)) throw new UnsafeValueError('https port', o.httpsPort);
  if (o.acmePort !== undefined && !isPort(o.acmePort)) throw new UnsafeValueError('acme port', o.acmePort);
  for (const c of o.certificates ?? []) {
    if (!isHostname(c.domain)) throw new UnsafeValueError('certificate domain', c.domain);
    if (!isAbsolute(c.file) || !SAFE_PATH.test(c.file)) throw new UnsafeValueError('certificate file', c.file);
  }
  if (o.nbthread !== undefined && (!Number.isInteger(o.nbthread) || o.nbthread < 1 || o.nbthread > 64)) throw new UnsafeValueError('nbthread', o.nbthread);
}

/**
 * The renderer's own version: raised whenever the same input renders differently, so an upgraded
 * agent does not skip its running (older) configuration as identical. 2: the health path. 3: request ids
 * on WAF answers, IPv6 clients rate limited by their /64. 5: HAProxy's Prometheus exporter on the health socket. 6: native WAF decisions and answers, the detectors behind a gate, the default buffer size. 7: noreuseport; our pages for 404 (unknown host) and 502/503/504, origins by name. 8: one country map of classes of countries, the agent naming the rule of a country event. 9: the rate limiter clears only a window that ran out. 10: the request id made only where read (no unique-id-format), the error pages' format from a captured Accept header. 11: the health path as monitor-uri, one HTML page for 502/503/504 (no capture, no marker), one server's one domain routed by an ACL, one log-level rule, a refusal's event fields set by its answer's body, a connection remembering its address's verdict for a domain and its pass cookie (after the User-Agent steps), the rate limiter and the cookie check in fewer rules, tune.http.logurilen 1.
 */
const RENDER_VERSION = 11;

export function inputHash(snapshot: ServerSnapshot, options: RenderOptions): string {
  const { revision: _revision, ...state } = snapshot;
  return (
    createHash('sha256')
      // (a Map as its entries: JSON.stringify writes any Map as {})
      .update(JSON.stringify({ state, options, v: RENDER_VERSION }, (_key, value: unknown) => (value instanceof Map ? [...value] : value)))
      .digest('hex')
  );
}

/**
 * Host routing: the Host header lowercased, any `:port` dropped, gives the domain's backend. The
 * one domain of a server that has one is one ACL, as a plain HAProxy user writes it; several go
 * through domains.map, one lookup whatever their number (a dynamic use_backend costs a forwarded
 * request about 1,100 instructions more than the ACL, callgrind; each more ACL about 1,700).
 */
function routeLines(domains: readonly SnapshotDomain[], mapFile: string): string[] {
  const host = 'req.hdr(host),lower,field(1,:)';
  if (domains.length === 1) return [`    use_backend ${backendName(domains[0]!.domain)} if { ${host} -m str ${domains[0]!.domain} }`];
  return domains.length ? [`    use_backend %[${host},map(${mapFile},default_404)]`] : [];
}

/**
 * Snapshot -> haproxy.cfg and domains.map. The hash leaves out the revision and the target
 * directory, so an agent can skip identical state before it renders anything. Pure: no
 * filesystem, environment or clock. User values reach the configuration only as validated tokens
 * (hostnames, addresses, ports, ids) or as map data and escaped Lua data.
 */
export function renderHaproxyConfig(snapshot: ServerSnapshot, options: RenderOptions, target: RenderTarget): RenderedConfig {
  checkOptions(options, target);
  const mapFile = `${target.configDir}/domains.map`;
  const domains = [...snapshot.domains].sort(byDomain);
  domains.forEach(assertRenderable);
  const hash = inputHash(snapshot, options);
  const waf = renderWaf(snapshot, target.configDir, {
    eventsPort: options.eventsPort,
    eventsSecret: options.eventsSecret,
    countryMap: options.countryMap,
    countryClasses: options.countryClasses,
    verifiedCrawlers: target.verifiedCrawlers,
  });
  const bindAddress = options.httpBind.address;
  // Only the certificates of domains this snapshot serves with sslEnabled; each domain once.
  const sslDomains = new Set(domains.filter((d) => d.sslEnabled).map((d) => d.domain));
  const certs = new Map<string, string>();
  for (const c of options.certificates ?? []) if (sslDomains.has(c.domain) && !certs.has(c.domain)) certs.set(c.domain, c.file);
  const https = options.httpsPort !== undefined && certs.size > 0;
  const httpsOrigin = (domain: string) => `https://${domain}${options.httpsPort === 443 ? '' : `:${options.httpsPort}`}`;
  const acme = options.acmePort !== undefined;

  const cfg = [
    [
      'global',
      `    stats socket ${options.runDir}/${ADMIN_SOCKET} mode 600 level admin expose-fd listeners`,
      '    hard-stop-after 30s',
      // Listeners are this HAProxy's alone: without SO_REUSEPORT a port another process serves is
      // a bind failure the agent reports, not traffic split by the kernel. Reloads stay seamless:
      // the new worker takes the listeners over from the old one (expose-fd listeners above).
      '    noreuseport',
      ...(options.nbthread ? [`    nbthread ${options.nbthread}`] : []),
      ...TLS_GLOBAL,
      ...waf.global,
      '',
      ...DEFAULTS_SECTION,
    ].join('\n'),
    // Origins by name are looked up by HAProxy itself, at run time (backend.ts).
    ...(hasNamedOrigin(domains) ? [RESOLVERS_SECTION] : []),
    [
      'frontend http_in',
      `    bind ${bindAddress}:${options.httpBind.port}`,
      // strict-sni: no handshake without an SNI naming one of the certificates (no default one).
      ...(https ? [`    bind ${bindAddress}:${options.httpsPort} ssl crt-list ${target.configDir}/certificates.list alpn ${ALPN} strict-sni`] : []),
      ...waf.frontend,
      // The service's health probe: this exact path (no query), any method, any Host, answered
      // here with a constant body before any rule, routing, redirect and the WAF. It reaches no
      // backend, so it is no way past the WAF to an origin.
      ...HEALTH_LINES,
      // Our own pages for the answers HAProxy makes when an origin fails (waf-pages.ts).
      ...errorLines(target.configDir),
      // The ACME challenge reaches the agent's responder before host routing, redirects and the
      // WAF (whose decisions are taken in the domain backends), for every host.
      ...(acme ? [`    use_backend acme_responder if { path_beg ${ACME_CHALLENGE_PATH} }`] : []),
      ...routeLines(domains, mapFile),
      '    default_backend default_404',
    ].join('\n'),
    [
      "# The agent asks this socket which configuration a worker runs, and reads HAProxy's Prometheus exporter here.",
      'frontend rampart_health',
      `    bind unix@${options.runDir}/${HEALTH_SOCKET} mode 600`,
      '    http-request use-service prometheus-exporter if { path /metrics }',
      `    http-request return status 200 content-type text/plain string ${hash}`,
    ].join('\n'),
    [
      'backend default_404',
      // Over TLS, a Host this server has no domain for is not the SNI's domain either: misdirected.
      ...(https ? [`    ${MISDIRECTED} if { ssl_fc }`] : []),
      // A Host no domain here has: our page (browsers) or text, with the request id.
      `    http-request return status 404 content-type "text/html; charset=utf-8" lf-file ${target.configDir}/notfound.html ${REQUEST_ID_HEADER} if { req.fhdr(accept) -m sub -i text/html }`,
      `    http-request return status 404 content-type "text/plain; charset=utf-8" lf-string ${TEXT_404} ${REQUEST_ID_HEADER}`,
    ].join('\n'),
    ...waf.sections,
    ...(acme ? [['backend acme_responder', `    server responder 127.0.0.1:${options.acmePort}`].join('\n')] : []),
    ...domains.map((d) => renderBackend(d, { requestRules: waf.backend(d), httpsRedirect: https && certs.has(d.domain) ? httpsOrigin(d.domain) : undefined, checkSni: https })),
  ];
  const map = domains.map((d) => `${d.domain} ${backendName(d.domain)}`).join('\n');
  return {
    files: {
      ...waf.files,
      'haproxy.cfg': `# Generated by Rampart. Do not edit.\n${cfg.join('\n\n')}\n`,
      'domains.map': map ? `${map}\n` : '',
      ...(https ? { 'certificates.list': [...certs].map(([domain, file]) => `${file} ${domain}\n`).join('') } : {}),
    },
    hash,
  };
}
