import { Type } from '@sinclair/typebox';
import { cents, hasAtMostTwoDecimals } from '../plans.js';
import { createDeposit, getAccount, listTransactions } from '../services/accounts.js';
import { buildExport, exportFilename } from '../services/export.js';
import { listNotifications } from '../services/notifications.js';
import { invalidField } from '../errors.js';
import { AccountView, DepositCreate, DepositView, NotificationView, TransactionView } from '../schemas.js';
import { ERROR_RESPONSES, SECURITY, type App, type RouteDeps } from './types.js';

export async function accountRoutes(app: App, { ctx }: RouteDeps) {
  app.get('/api/account', {
    schema: { tags: ['Account'], security: SECURITY, summary: 'Plan, price, balance and state', response: { 200: AccountView, ...ERROR_RESPONSES } },
    handler: async (req) => getAccount(ctx, req.principal.accountId),
  });
  app.post('/api/billing/deposits', {
    config: { frozen: 'allow' },
    schema: {
      tags: ['Account'],
      security: SECURITY,
      summary: 'Announce a deposit; it is credited once confirmed on-chain. Works while frozen.',
      body: DepositCreate,
      response: { 201: DepositView, ...ERROR_RESPONSES },
    },
    handler: async (req, reply) => {
      if (!hasAtMostTwoDecimals(req.body.amount)) throw invalidField('amount', 'must have at most two decimals');
      return reply.code(201).send(await createDeposit(ctx, req.principal.accountId, cents(req.body.amount)));
    },
  });
  app.get('/api/billing/transactions', {
    schema: { tags: ['Account'], security: SECURITY, summary: 'Charges and deposits, newest first', response: { 200: Type.Array(TransactionView), ...ERROR_RESPONSES } },
    handler: async (req) => listTransactions(ctx, req.principal.accountId),
  });
  app.get('/api/notifications', {
    schema: { tags: ['Account'], security: SECURITY, summary: 'Notifications, newest first', response: { 200: Type.Array(NotificationView), ...ERROR_RESPONSES } },
    handler: async (req) => listNotifications(ctx, req.principal.accountId),
  });
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
