import { cents, hasAtMostTwoDecimals } from '../plans.js';
import { getAccount } from '../services/accounts.js';
import { listTransactions } from '../services/billing.js';
import { changePlan } from '../services/billing-charge.js';
import { createDeposit } from '../services/billing-deposits.js';
import { buildExport, exportFilename } from '../services/export.js';
import { invalidField } from '../errors.js';
import { AccountView, DepositCreate, DepositView, PlanChange, PlanChanged, TransactionView } from '../schemas.js';
import { pagedListRoute } from './paging.js';
import { ERROR_RESPONSES, SECURITY, type App, type RouteDeps } from './types.js';

export function accountRoutes(app: App, { ctx }: RouteDeps): void {
  app.get('/api/account', {
    schema: { tags: ['Account'], security: SECURITY, summary: 'Plan, price, balance and state', response: { 200: AccountView, ...ERROR_RESPONSES } },
    handler: async (req) => getAccount(ctx, req.principal.accountId),
  });
  app.put('/api/account/plan', {
    schema: {
      tags: ['Account'],
      security: SECURITY,
      summary: 'Change the plan at once, with a pro-rata charge (upgrade) or credit (downgrade) for the rest of the period',
      description:
        '402 when the balance does not cover the pro-rata charge (the message names the amount); 409 when the account uses what the new plan does not have (API keys, DNS failover) or has more shield servers or custom rules than it allows (the message names how many to remove). See docs/billing.md, "Changing plans".',
      body: PlanChange,
      response: { 200: PlanChanged, 402: { $ref: 'Error#' }, 409: { $ref: 'Error#' }, ...ERROR_RESPONSES },
    },
    handler: async (req) => {
      const { transaction } = await changePlan(ctx, req.principal.accountId, req.body.plan, req.principal.actor);
      return { account: await getAccount(ctx, req.principal.accountId), transaction };
    },
  });
  app.post('/api/billing/deposits', {
    config: { frozen: 'allow' },
    schema: {
      tags: ['Account'],
      security: SECURITY,
      summary: 'Announce a deposit; with on-chain deposits it gets its own address to pay to. Credited once confirmed. Open for 24 hours, at most 5 open at once (409). Works while frozen.',
      body: DepositCreate,
      response: { 201: DepositView, 409: { $ref: 'Error#' }, 503: { $ref: 'Error#' }, ...ERROR_RESPONSES },
    },
    handler: async (req, reply) => {
      if (!hasAtMostTwoDecimals(req.body.amount)) throw invalidField('amount', 'must have at most two decimals');
      return reply.code(201).send(await createDeposit(ctx, req.principal.accountId, cents(req.body.amount), req.principal.actor));
    },
  });
  pagedListRoute(app, '/api/billing/transactions', { tags: ['Account'], summary: 'The ledger: charges, deposits and adjustments, newest first, in pages' }, TransactionView, (accountId, query) =>
    listTransactions(ctx, accountId, query),
  );
  app.get('/api/settings/export', {
    schema: {
      tags: ['Account'],
      security: SECURITY,
      summary: 'Portable configuration export (works while frozen)',
      description: 'Served as an attachment named rampart-export-YYYY-MM-DD.json.',
    },
    handler: async (req, reply) => {
      const doc = await buildExport(ctx, req.principal.accountId);
      return reply
        .header('content-type', 'application/json; charset=utf-8')
        .header('content-disposition', `attachment; filename="${exportFilename(new Date(doc.exported_at))}"`)
        .send(JSON.stringify(doc, null, 2));
    },
  });
}
