import { Type } from '@sinclair/typebox';
import { createServer, decommissionServer, listServers, regenerateServerToken, updateServer } from '../services/servers.js';
import { IdParams, ServerCreate, ServerUpdate, ServerView, ServerWithToken } from '../schemas.js';
import { ERROR_RESPONSES, SECURITY, type App, type RouteDeps } from './types.js';

export function serverRoutes(app: App, { ctx }: RouteDeps): void {
  const tags = ['Servers'];
  app.get('/api/servers', {
    schema: { tags, security: SECURITY, summary: 'List shield servers with status and revisions', response: { 200: Type.Array(ServerView), ...ERROR_RESPONSES } },
    handler: async (req) => listServers(ctx, req.principal.accountId),
  });
  app.post('/api/servers', {
    schema: { tags, security: SECURITY, summary: 'Register a shield server; the connection token is shown only here', body: ServerCreate, response: { 201: ServerWithToken, ...ERROR_RESPONSES } },
    handler: async (req, reply) => reply.code(201).send(await createServer(ctx, req.principal.accountId, req.body.name, req.principal.actor)),
  });
  app.put('/api/servers/:id', {
    schema: {
      tags,
      security: SECURITY,
      summary: 'Rename a shield server or set the public address its domains resolve to',
      params: IdParams,
      body: ServerUpdate,
      response: { 200: ServerView, 409: { $ref: 'Error#' }, ...ERROR_RESPONSES },
    },
    handler: async (req) => updateServer(ctx, req.principal.accountId, req.params.id, req.body, req.principal.actor),
  });
  app.post('/api/servers/:id/token', {
    schema: { tags, security: SECURITY, summary: 'Regenerate the connection token; the old one stops working at once', params: IdParams, response: { 200: ServerWithToken, ...ERROR_RESPONSES } },
    handler: async (req) => regenerateServerToken(ctx, req.principal.accountId, req.params.id, req.principal.actor),
  });
  app.delete('/api/servers/:id', {
    schema: { tags, security: SECURITY, summary: 'Decommission a shield server (final)', params: IdParams, response: { 200: ServerView, ...ERROR_RESPONSES } },
    handler: async (req) => decommissionServer(ctx, req.principal.accountId, req.params.id, req.principal.actor),
  });
}
