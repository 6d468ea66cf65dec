import { Type } from '@sinclair/typebox';
import { createApiKey, deleteApiKey, listApiKeys } from '../services/api-keys.js';
import { ApiKeyCreate, ApiKeyCreated, ApiKeyDeleteQuery, ApiKeyListItem, Success } from '../schemas.js';
import { ERROR_RESPONSES, SECURITY, type App, type RouteDeps } from './types.js';

export function apiKeyRoutes(app: App, { ctx }: RouteDeps): void {
  const tags = ['API keys'];
  app.post('/api/settings/api-keys', {
    schema: { tags, security: SECURITY, summary: 'Create an API key (Pro and Enterprise)', body: ApiKeyCreate, response: { 201: ApiKeyCreated, ...ERROR_RESPONSES } },
    handler: async (req, reply) => reply.code(201).send(await createApiKey(ctx, req.principal.accountId, req.body.name, req.principal.actor)),
  });
  app.get('/api/settings/api-keys', {
    schema: { tags, security: SECURITY, summary: 'List API keys (never the full key)', response: { 200: Type.Array(ApiKeyListItem), ...ERROR_RESPONSES } },
    handler: async (req) => listApiKeys(ctx, req.principal.accountId),
  });
  app.delete('/api/settings/api-keys', {
    schema: { tags, security: SECURITY, summary: 'Delete an API key; it stops working at once', querystring: ApiKeyDeleteQuery, response: { 200: Success, ...ERROR_RESPONSES } },
    handler: async (req) => deleteApiKey(ctx, req.principal.accountId, req.query.id, req.principal.actor),
  });
}
