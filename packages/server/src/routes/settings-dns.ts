import { Type } from '@sinclair/typebox';
import { deleteDnsSettings, DNS_PROVIDERS, getDnsSettings, putDnsSettings } from '../services/dns-failover.js';
import { Success } from '../schemas.js';
import { ERROR_RESPONSES, SECURITY, type App, type RouteDeps } from './types.js';

// The account's DNS provider for DNS failover (docs/dns-failover.md). Credentials go in, never out.

const strict = { additionalProperties: false } as const;

export const DnsSettingsPut = Type.Object(
  {
    provider: Type.Union(
      DNS_PROVIDERS.map((p) => Type.Literal(p)),
      { description: 'powerdns: apiUrl, apiKey and serverId; cloudflare: apiToken' },
    ),
    apiUrl: Type.Optional(Type.String({ maxLength: 2048, description: "powerdns: the API webserver's base URL, without /api/v1, e.g. http://dns.example.com:8081" })),
    apiKey: Type.Optional(Type.String({ maxLength: 512, description: 'powerdns: its api-key (sent as X-API-Key); stored encrypted, never shown' })),
    serverId: Type.Optional(Type.String({ maxLength: 64, description: 'powerdns: localhost on PowerDNS Authoritative' })),
    apiToken: Type.Optional(Type.String({ maxLength: 512, description: 'cloudflare: an API token with Zone DNS Edit and Zone Read; stored encrypted, never shown' })),
  },
  strict,
);

export const DnsSettingsView = Type.Object({
  provider: Type.Union([...DNS_PROVIDERS.map((p) => Type.Literal(p)), Type.Null()], { description: 'null: no provider connected' }),
  apiUrl: Type.Union([Type.String(), Type.Null()], { description: 'powerdns only' }),
  serverId: Type.Union([Type.String(), Type.Null()], { description: 'powerdns only' }),
  connected: Type.Boolean({ description: 'A provider is stored and its credentials can be read' }),
  error: Type.Union([Type.String(), Type.Null()], { description: 'Why stored settings cannot be used (RAMPART_SECRET_KEY missing or changed)' }),
  updatedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
});

export function dnsSettingsRoutes(app: App, { ctx }: RouteDeps): void {
  const tags = ['DNS failover'];
  app.get('/api/settings/dns', {
    schema: { tags, security: SECURITY, summary: 'The DNS provider for DNS failover, without its credentials', response: { 200: DnsSettingsView, ...ERROR_RESPONSES } },
    handler: async (req) => getDnsSettings(ctx, req.principal.accountId),
  });
  app.put('/api/settings/dns', {
    schema: {
      tags,
      security: SECURITY,
      summary: 'Connect a DNS provider (PowerDNS or Cloudflare) for DNS failover; Pro and Enterprise. The credentials are stored encrypted and never shown',
      body: DnsSettingsPut,
      response: { 200: DnsSettingsView, ...ERROR_RESPONSES },
    },
    handler: async (req) => putDnsSettings(ctx, req.principal.accountId, req.body, req.principal.actor),
  });
  app.delete('/api/settings/dns', {
    schema: {
      tags,
      security: SECURITY,
      summary: 'Disconnect the DNS provider; refused (409) while a domain has dnsFailover on',
      response: { 200: Success, 409: { $ref: 'Error#' }, ...ERROR_RESPONSES },
    },
    handler: async (req) => deleteDnsSettings(ctx, req.principal.accountId, req.principal.actor),
  });
}
