import { createReadStream } from 'node:fs';
import { Type } from '@sinclair/typebox';
import { checkAdmin } from '../auth.js';
import { backupToTempFile } from '../db/backup.js';
import { invalidField } from '../errors.js';
import { cents, hasAtMostTwoDecimals } from '../plans.js';
import { createAccount } from '../services/accounts.js';
import { runMonthlyCharge } from '../services/billing-charge.js';
import { adjustBalance } from '../services/billing-credit.js';
import { confirmDepositByOperator } from '../services/billing-deposits.js';
import { AdminAccountCreate, AdminAdjusted, AdminAdjustment, AdminCharge, AdminConfirm, AdminInvitationCreate, DepositConfirmed, IdParams, InvitationCreated } from '../schemas.js';
import { createInvitation } from '../services/signup.js';
import { OPERATOR_ACTOR } from '../services/audit.js';
import { ERROR_RESPONSES, type App, type RouteDeps } from './types.js';

/** The operator API: Authorization: Bearer RAMPART_ADMIN_TOKEN. */
export function adminRoutes(app: App, { ctx, adminToken }: RouteDeps): void {
  const tags = ['Operator'];
  const security: { [name: string]: string[] }[] = [{ adminToken: [] }];
  app.addHook('onRequest', (req, _reply, done) => {
    checkAdmin(adminToken, req); // throws the refusal, which Fastify answers as done(err)
    done();
  });
  // These take an optional body: a bare POST means "no options".
  const emptyBody = (req: { body: unknown }, _reply: unknown, done: () => void) => {
    req.body ??= {};
    done();
  };
  app.post('/admin/accounts', {
    schema: {
      tags,
      security,
      summary: 'Create an account; apiKey is null on a plan without API keys. An opening balance is an adjustment in the ledger.',
      body: AdminAccountCreate,
      response: { 201: Type.Object({ accountId: Type.String(), apiKey: Type.Union([Type.String(), Type.Null()]) }), 409: { $ref: 'Error#' }, ...ERROR_RESPONSES },
    },
    handler: async (req, reply) => {
      const balance = req.body.balance ?? 0;
      if (!hasAtMostTwoDecimals(balance)) throw invalidField('balance', 'must have at most two decimals');
      const r = await createAccount(ctx, { email: req.body.email, password: req.body.password, plan: req.body.plan, balanceCents: cents(balance) }, undefined, OPERATOR_ACTOR);
      return reply.code(201).send(r);
    },
  });
  app.post('/admin/invitations', {
    schema: {
      tags,
      security,
      summary: 'Issue a single-use invitation to register (RAMPART_SIGNUP=invite); the token is shown only here, stored as SHA-256',
      body: AdminInvitationCreate,
      response: { 201: InvitationCreated, ...ERROR_RESPONSES },
    },
    preValidation: emptyBody,
    handler: async (req, reply) => reply.code(201).send(await createInvitation(ctx, req.body)),
  });
  app.post('/admin/accounts/:id/adjustments', {
    schema: {
      tags,
      security,
      summary: "Credit (positive amount) or debit (negative) an account's balance; a credit that covers the price makes a frozen account active",
      params: IdParams,
      body: AdminAdjustment,
      response: { 201: AdminAdjusted, 409: { $ref: 'Error#' }, ...ERROR_RESPONSES },
    },
    handler: async (req, reply) => {
      const { amount } = req.body;
      if (amount === 0) throw invalidField('amount', 'must not be 0');
      if (!hasAtMostTwoDecimals(amount)) throw invalidField('amount', 'must have at most two decimals');
      return reply.code(201).send(await adjustBalance(ctx, req.params.id, cents(amount), req.body.description));
    },
  });
  app.post('/admin/billing/charge', {
    schema: {
      tags,
      security,
      summary: 'Run the monthly charge now: for one account whatever its due date, or for every account due',
      body: AdminCharge,
      response: {
        200: Type.Object({
          results: Type.Array(Type.Object({ accountId: Type.String(), charged: Type.Boolean(), state: Type.String(), balance: Type.Number() })),
        }),
        ...ERROR_RESPONSES,
      },
    },
    preValidation: emptyBody,
    handler: async (req) => ({ results: await runMonthlyCharge(ctx, req.body.accountId, OPERATOR_ACTOR) }),
  });
  app.post('/admin/deposits/:id/confirm', {
    schema: {
      tags,
      security,
      summary: 'Confirm a deposit, naming what paid it: an on-chain deposit, the transaction (read from the chain and credited per transfer, as the watcher would); otherwise the payment id',
      params: IdParams,
      body: AdminConfirm,
      response: { 200: DepositConfirmed, 409: { $ref: 'Error#' }, 503: { $ref: 'Error#' }, ...ERROR_RESPONSES },
    },
    preValidation: emptyBody,
    handler: async (req) => confirmDepositByOperator(ctx, req.params.id, { txHash: req.body.txHash, logIndex: req.body.logIndex }),
  });
  app.get('/admin/backup', {
    schema: {
      tags,
      security,
      summary:
        "A consistent backup of the whole database (every table, one read-only repeatable-read transaction) while the control plane runs: gzip'd JSON lines (application/gzip), restored by `rampart restore` into PGlite or PostgreSQL",
      response: ERROR_RESPONSES,
    },
    handler: async (_req, reply) => {
      const now = ctx.now();
      const backup = await backupToTempFile(ctx.db, now);
      const file = createReadStream(backup.path);
      file.once('close', () => void backup.remove());
      return reply
        .header('content-type', 'application/gzip')
        .header('content-disposition', `attachment; filename="rampart-backup-${now.toISOString().replace(/[:.]/g, '-')}.jsonl.gz"`)
        .header('x-rampart-backup-rows', String(backup.summary.rows))
        .send(file);
    },
  });
}
