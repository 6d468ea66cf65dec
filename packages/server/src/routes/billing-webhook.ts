import { invalidField } from '../errors.js';
import { cents, hasAtMostTwoDecimals } from '../plans.js';
import { PaymentEventBody, PaymentEventResult } from '../schemas.js';
import { applyPaymentEvent, SIGNATURE_HEADER, verifyPaymentSignature } from '../services/billing-deposits.js';
import type { App, RouteDeps } from './types.js';

/**
 * POST /api/billing/webhook: a payment processor's events (docs/billing.md, "Payment processor
 * webhook"). No API key: the body is signed with RAMPART_PAYMENT_WEBHOOK_SECRET, and the signature
 * is over the raw bytes, so this plugin (its own encapsulation context) reads JSON bodies as a
 * Buffer; the signature is checked before the body is parsed or validated.
 */
export function billingWebhookRoutes(app: App, { ctx }: RouteDeps): void {
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
  app.post('/api/billing/webhook', {
    config: { public: true },
    schema: {
      tags: ['Account'],
      summary: "A payment processor's event, signed in X-Rampart-Payment-Signature; deposit.confirmed confirms a deposit, once per event id",
      description:
        'Header `X-Rampart-Payment-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>`, the timestamp within 5 minutes. ' +
        '400 for a missing or malformed header or body, 401 for a signature that does not match or an old timestamp, 503 when the server has no RAMPART_PAYMENT_WEBHOOK_SECRET.',
      body: PaymentEventBody,
      response: {
        200: PaymentEventResult,
        ...Object.fromEntries([400, 401, 404, 409, 503].map((s) => [s, { $ref: 'Error#' }])),
      },
    },
    preValidation: (req, _reply, done) => {
      // No body at all (no Content-Type): verified as the empty body it is, then refused as not JSON.
      const raw = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
      verifyPaymentSignature(ctx, req.headers[SIGNATURE_HEADER.toLowerCase()], raw); // throws the refusal, answered as done(err)
      let body: unknown;
      try {
        body = JSON.parse(raw.toString('utf8'));
      } catch {
        return done(invalidField('body', 'is not valid JSON'));
      }
      req.body = body as typeof req.body; // checked against the body schema next: preValidation comes before validation
      done();
    },
    handler: async (req) => {
      const { amount } = req.body;
      if (amount !== undefined && !hasAtMostTwoDecimals(amount)) throw invalidField('amount', 'must have at most two decimals');
      return applyPaymentEvent(ctx, {
        id: req.body.id,
        type: req.body.type,
        depositId: req.body.depositId,
        amountCents: amount === undefined ? undefined : cents(amount),
        txHash: req.body.txHash,
        logIndex: req.body.logIndex,
      });
    },
  });
}
