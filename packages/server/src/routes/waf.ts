import { AI_BOTS } from '@rampart/protocol';
import { Type } from '@sinclair/typebox';
import { createRule, deleteRule, listRules, ruleSetVersion, updateRule } from '../services/waf.js';
import { listEvents } from '../services/events.js';
import { rotateBotSecret } from '../services/bot-keys.js';
import { pagedListRoute } from './paging.js';
import { RuleListCache } from '../rule-list-cache.js';
import { AiBotView, BotKeyRotationView, EventQuery, IdParams, RuleCreate, RuleUpdate, RuleView, WafEvent } from '../schemas.js';
import { ERROR_RESPONSES, SECURITY, type App, type RouteDeps } from './types.js';

export function wafRoutes(app: App, { ctx }: RouteDeps): void {
  const tags = ['WAF'];
  const cache = new RuleListCache();
  app.get('/api/waf', {
    schema: { tags, security: SECURITY, summary: 'All WAF rules of the account, by priority', response: { 200: Type.Array(RuleView), ...ERROR_RESPONSES } },
    handler: async (req, reply) => {
      const { accountId } = req.principal;
      // Read fresh (one row by primary key): credentials come from a cache, the rule set must not.
      const wafVersion = await ruleSetVersion(ctx, accountId);
      let body = cache.get(accountId, wafVersion);
      if (body === undefined) {
        body = JSON.stringify(await listRules(ctx, accountId));
        cache.set(accountId, wafVersion, body);
      }
      return reply.type('application/json; charset=utf-8').send(body);
    },
  });
  app.post('/api/waf', {
    schema: {
      tags,
      security: SECURITY,
      summary: 'Create a WAF rule (409 when the account has one of the same type, value and scope)',
      body: RuleCreate,
      response: { 201: RuleView, ...ERROR_RESPONSES, 409: { $ref: 'Error#' } },
    },
    handler: async (req, reply) => reply.code(201).send(await createRule(ctx, req.principal.accountId, req.body, req.principal.actor)),
  });
  app.put('/api/waf/:id', {
    schema: {
      tags,
      security: SECURITY,
      summary: 'Change value, enabled or priority; rule_type and domain_id are fixed',
      params: IdParams,
      body: RuleUpdate,
      response: { 200: RuleView, ...ERROR_RESPONSES, 409: { $ref: 'Error#' } },
    },
    handler: async (req) => updateRule(ctx, req.principal.accountId, req.params.id, req.body, req.principal.actor),
  });
  app.delete('/api/waf/:id', {
    schema: { tags, security: SECURITY, summary: 'Delete a WAF rule', params: IdParams, response: { 200: Type.Object({ success: Type.Literal(true), id: Type.String() }), ...ERROR_RESPONSES } },
    handler: async (req) => deleteRule(ctx, req.principal.accountId, req.params.id, req.principal.actor),
  });
  pagedListRoute(
    app,
    '/api/waf/events',
    {
      tags,
      summary: 'WAF events (blocked, challenged, or detected and let through in detect mode), newest first, in pages; by default the 50 newest',
      description:
        'Filters: `domain`, `reason`, `ip` (exact), `since` and `until` (ISO times on the first occurrence, within the 7 days kept), `requestId` (the event holding that request id). ' +
        'Repeats of the very same event (same server, source, reason, rule, domain, method, path, location and blocked) within 60 s are one entry with a `count`.',
    },
    WafEvent,
    (accountId, query) => listEvents(ctx, accountId, query),
    EventQuery,
  );
  app.post('/api/waf/bot-secret/rotate', {
    schema: {
      tags,
      security: SECURITY,
      summary: 'Rotate the bot protection key now',
      description:
        "A new key signs challenges and pass cookies on all the account's shield servers from the next push; the previous key stays accepted until `previous_valid_until` " +
        '(one pass-cookie lifetime), so visitors who passed are not challenged again. Keys also rotate on a schedule. The key itself is never shown.',
      response: { 200: BotKeyRotationView, ...ERROR_RESPONSES },
    },
    handler: async (req) => rotateBotSecret(ctx, req.principal.accountId, req.principal.actor),
  });
  app.get('/api/waf/ai-bots', {
    schema: { tags, security: SECURITY, summary: 'AI crawler names accepted by block_ai_bot rules', response: { 200: Type.Array(AiBotView), ...ERROR_RESPONSES } },
    handler: () => AI_BOTS,
  });
}
