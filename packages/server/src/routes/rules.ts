import { Type } from '@sinclair/typebox';
import { createRule, deleteRule, getRule, listRules, updateRule } from '../services/custom-rules.js';
import { CustomRuleCreate, CustomRuleUpdate, CustomRuleView, IdParams } from '../schemas.js';
import { ERROR_RESPONSES, SECURITY, type App, type RouteDeps } from './types.js';

// Custom rules (docs/rules.md): the rules users write in the expression language. SPEC.md's
// /api/waf and its rule types are routes/waf.ts.
export function customRuleRoutes(app: App, { ctx }: RouteDeps): void {
  const tags = ['Custom rules'];
  const expressionHelp =
    'A parse error answers 400 naming the column and what was expected there; a regular expression that can backtrack catastrophically is refused; ' +
    'the plan limits the number of rules (free 5, pro 25, enterprise 250).';
  app.get('/api/rules', {
    schema: { tags, security: SECURITY, summary: 'All custom rules of the account, in the order they run (priority, then age)', response: { 200: Type.Array(CustomRuleView), ...ERROR_RESPONSES } },
    handler: async (req) => listRules(ctx, req.principal.accountId),
  });
  app.post('/api/rules', {
    schema: { tags, security: SECURITY, summary: 'Create a custom rule', description: expressionHelp, body: CustomRuleCreate, response: { 201: CustomRuleView, ...ERROR_RESPONSES } },
    handler: async (req, reply) => reply.code(201).send(await createRule(ctx, req.principal.accountId, req.body, req.principal.actor)),
  });
  app.get('/api/rules/:id', {
    schema: { tags, security: SECURITY, summary: 'One custom rule', params: IdParams, response: { 200: CustomRuleView, ...ERROR_RESPONSES } },
    handler: async (req) => getRule(ctx, req.principal.accountId, req.params.id),
  });
  app.put('/api/rules/:id', {
    schema: {
      tags,
      security: SECURITY,
      summary: 'Change any of name, expression, action, domainId, priority, enabled (fields left out stay)',
      description: expressionHelp,
      params: IdParams,
      body: CustomRuleUpdate,
      response: { 200: CustomRuleView, ...ERROR_RESPONSES },
    },
    handler: async (req) => updateRule(ctx, req.principal.accountId, req.params.id, req.body, req.principal.actor),
  });
  app.delete('/api/rules/:id', {
    schema: { tags, security: SECURITY, summary: 'Delete a custom rule', params: IdParams, response: { 200: Type.Object({ success: Type.Literal(true), id: Type.String() }), ...ERROR_RESPONSES } },
    handler: async (req) => deleteRule(ctx, req.principal.accountId, req.params.id, req.principal.actor),
  });
}
