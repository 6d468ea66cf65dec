import { createHash } from 'node:crypto';
import { isAbsolute } from 'node:path';
import { isPort, type ServerSnapshot } from '@rampart/protocol';
import { backendName } from '@rampart/protocol';
import { assertRenderable, byDomain, renderBackend, UnsafeValueError } from './backend.js';
import { renderWaf } from './waf.js';

export interface RenderOptions {
  /** Address:port pairs are the agent's own settings, never user input. */
  httpBind: { address: string; port: number };
  /** Absolute directory for HAProxy's runtime sockets (stable across revisions). */
  runDir: string;
  /** Loopback UDP port of the agent's syslog listener for WAF events. */
  eventsPort?: number | undefined;
  /** Worker threads (HAProxy's default: one per CPU). */
  nbthread?: number | undefined;
  /** Absolute path of the CIDR -> country map, looked up only when a block_country rule exists. */
  countryMap?: string | undefined;
}

export interface RenderTarget {
  /** Absolute directory the files will be written to (one per configuration). */
  configDir: string;
}

export interface RenderedConfig {
  /** File name -> content, to be written into target.configDir. */
  files: Record<string, string>;
  /** Hash of everything that decides the output (revision excluded): equal hash, same files. */
  hash: string;
}

/** The defaults every shield server runs with (SPEC.md's timeouts); benchmarks reuse them. */
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
  if (o.eventsPort !== undefined && !isPort(o.eventsPort)) throw new UnsafeValueError('events port', o.eventsPort);
  if (o.nbthread !== undefined && (!Number.isInteger(o.nbthread) || o.nbthread < 1 || o.nbthread > 64)) throw new UnsafeValueError('nbthread', o.nbthread);
}

export function inputHash(snapshot: ServerSnapshot, options: RenderOptions): string {
  const { revision: _revision, ...state } = snapshot;
  return createHash('sha256').update(JSON.stringify({ state, options, v: 1 })).digest('hex');
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
  const waf = renderWaf(snapshot, target.configDir, { eventsPort: options.eventsPort, botSecret: snapshot.botSecret, countryMap: options.countryMap });
  const bind = `${options.httpBind.address}:${options.httpBind.port}`;

  const cfg = [
    [
      'global',
      `    stats socket ${options.runDir}/${ADMIN_SOCKET} mode 600 level admin expose-fd listeners`,
      '    hard-stop-after 30s',
      ...(options.nbthread ? [`    nbthread ${options.nbthread}`] : []),
      ...waf.global,
      '',
      ...DEFAULTS_SECTION,
    ].join('\n'),
    [
      'frontend http_in',
      `    bind ${bind}`,
      ...waf.frontend,
      `    use_backend %[req.hdr(host),lower,field(1,:),map(${mapFile},default_404)]`,
      '    default_backend default_404',
    ].join('\n'),
    [
      '# The agent asks this socket which configuration a worker runs.',
      'frontend rampart_health',
      `    bind unix@${options.runDir}/${HEALTH_SOCKET} mode 600`,
      `    http-request return status 200 content-type text/plain string ${hash}`,
    ].join('\n'),
    ['backend default_404', '    http-request return status 404 content-type text/plain string "Not Found"'].join('\n'),
    ...domains.map((d) => renderBackend(d, 'from-connection', waf.backend(d))),
  ];
  const map = domains.map((d) => `${d.domain} ${backendName(d.domain)}`).join('\n');
  return {
    files: {
      ...waf.files,
      'haproxy.cfg': `# Generated by Rampart. Do not edit.\n${cfg.join('\n\n')}\n`,
      'domains.map': map ? `${map}\n` : '',
    },
    hash,
  };
}
