import { backendName, formatHostPort, isHostname, isIP, isPort } from '@rampart/protocol';

export interface Origin {
  ip: string;
  port: number;
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
    if (!isIP(o.ip)) throw new UnsafeValueError('origin address', o.ip);
    if (!isPort(o.port)) throw new UnsafeValueError('origin port', o.port);
  }
}

/**
 * One backend per domain, as SPEC.md describes it: health check on "/", the three request headers,
 * and one health-checked server line per origin named origin0, origin1, ... The export template
 * says X-Forwarded-Proto https as SPEC.md gives it; a live shield server says what the client used.
 */
export function renderBackend(d: RoutedDomain, forwardedProto: 'https' | 'from-connection' = 'https', requestRules: readonly string[] = []): string {
  assertRenderable(d);
  const proto = forwardedProto === 'https' ? 'https' : '%[ssl_fc,iif(https,http)]';
  const lines = [
    `backend ${backendName(d.domain)}`,
    '    option httpchk',
    `    http-check send meth GET uri / ver HTTP/1.1 hdr Host ${d.domain}`,
    ...requestRules,
    `    http-request set-header X-Forwarded-Proto ${proto}`,
    '    http-request set-header X-Real-IP %[src]',
    `    http-request set-header Host ${d.domain}`,
    ...d.origins.map((o, i) => `    server origin${i} ${formatHostPort(o.ip, o.port)} check`),
  ];
  return lines.join('\n');
}

/** Code-point order, the same on every machine whatever its locale (localeCompare is not). */
export function byDomain(a: { domain: string }, b: { domain: string }): number {
  return a.domain < b.domain ? -1 : a.domain > b.domain ? 1 : 0;
}
