import { formatHostPort, originTarget } from '@rampart/protocol';
// Only the template's module: the package's index also builds the WAF's gate, which the control plane never needs.
import { renderExportTemplate } from '@rampart/proxy/export-template';
import type { ServiceContext } from '../context.js';
import { portableRules } from '../data/waf-rules.js';
import { listDomains } from './domains.js';
import { listServers } from './servers.js';
import { RAMPART_VERSION } from '@rampart/protocol/version';

export const SERVICE_NAME = 'Rampart';
/** The release, as the root package.json names it (the one place it is written). */
export const SERVICE_VERSION = RAMPART_VERSION;

/**
 * The portable export (docs/api.md): servers without tokens, domains, and only the IP blacklist and
 * rate-limit rules. Bot rules, analytics, billing, notification settings and keys stay out.
 */
export async function buildExport(ctx: ServiceContext, accountId: string) {
  const [servers, domains, rules] = await Promise.all([listServers(ctx, accountId), listDomains(ctx, accountId), portableRules(ctx.db, accountId)]);
  const now = ctx.now();
  return {
    exported_at: now.toISOString(),
    exported_by: `${SERVICE_NAME} ${SERVICE_VERSION}`,
    servers: servers.map((s) => ({ name: s.name, ip: s.ip, status: s.status })),
    domains: domains.map((d) => ({
      domain: d.domain,
      origins: d.origins.map((o) => formatHostPort(originTarget(o), o.port)),
      ssl_enabled: d.sslEnabled,
      ssl_expires: d.sslExpires,
      waf_enabled: d.wafEnabled,
      waf_level: d.wafLevel,
      status: d.status,
    })),
    waf_rules: rules.map((r) => ({
      type: r.rule_type === 'block_ip' ? 'ip_blacklist' : 'rate_limit',
      value: r.value,
      enabled: r.enabled,
    })),
    proxy_config_template: renderExportTemplate(domains),
    note:
      'Portable Rampart configuration. Connection tokens, bot protection rules, analytics, credit balance and ' +
      'transactions, notification settings and API keys are not included. proxy_config_template is a plain ' +
      'HTTP starting point for HAProxy: it has no TLS, certificates, WAF or bot protection.',
  };
}

export function exportFilename(now: Date): string {
  return `rampart-export-${now.toISOString().slice(0, 10)}.json`;
}
