import { Type } from '@sinclair/typebox';
import { createDomain, deleteDomain, listDomains, updateDomain } from '../services/domains.js';
import { DomainCreate, DomainUpdate, DomainView, IdParams, Success } from '../schemas.js';
import { ERROR_RESPONSES, SECURITY, type App, type RouteDeps } from './types.js';

export function domainRoutes(app: App, { ctx }: RouteDeps): void {
  const tags = ['Domains'];
  app.get('/api/domains', {
    schema: { tags, security: SECURITY, summary: 'List domains', response: { 200: Type.Array(DomainView), ...ERROR_RESPONSES } },
    handler: async (req) => listDomains(ctx, req.principal.accountId),
  });
  app.post('/api/domains', {
    schema: { tags, security: SECURITY, summary: 'Add a domain', body: DomainCreate, response: { 201: DomainView, 409: { $ref: 'Error#' }, ...ERROR_RESPONSES } },
    handler: async (req, reply) => reply.code(201).send(await createDomain(ctx, req.principal.accountId, req.body, req.principal.actor)),
  });
  app.put('/api/domains/:id', {
    config: { frozen: 'origins-only' },
    schema: {
      tags,
      security: SECURITY,
      summary: 'Change a domain; while the account is frozen only origins may change',
      params: IdParams,
      body: DomainUpdate,
      response: { 200: DomainView, ...ERROR_RESPONSES },
    },
    handler: async (req) => updateDomain(ctx, req.principal.accountId, req.params.id, req.body, req.principal.actor),
  });
  app.delete('/api/domains/:id', {
    schema: { tags, security: SECURITY, summary: 'Delete a domain', params: IdParams, response: { 200: Success, ...ERROR_RESPONSES } },
    handler: async (req) => deleteDomain(ctx, req.principal.accountId, req.params.id, req.principal.actor),
  });
}
