import { backendName } from '@rampart/protocol';
import { byDomain } from './backend.js';
import { renderBackend, type RoutedDomain } from './backend.js';

/**
 * The portable starting configuration of the configuration export: plain HTTP on port 80, one
 * host route per domain, a 404 default backend. No TLS, no certificates, no WAF or bot logic.
 */
export function renderExportTemplate(domains: readonly RoutedDomain[]): string {
  const sorted = [...domains].sort(byDomain);
  const routes = sorted.map((d) => `    use_backend ${backendName(d.domain)} if { req.hdr(host),lower,field(1,:) -m str ${d.domain} }`);
  const sections = [
    [
      'global',
      '    maxconn 4096',
      '    log stdout format raw local0',
      '',
      'defaults',
      '    mode http',
      '    log global',
      '    option httplog',
      '    timeout connect 5000',
      '    timeout client 50000',
      '    timeout server 50000',
    ].join('\n'),
    ['frontend http_in', '    bind *:80', ...routes, '    default_backend default_404'].join('\n'),
    ['backend default_404', '    http-request return status 404 content-type text/plain string "Not Found"'].join('\n'),
    ...sorted.map((d) => renderBackend(d)),
  ];
  return sections.join('\n\n') + '\n';
}
