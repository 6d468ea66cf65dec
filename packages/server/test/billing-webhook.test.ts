import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, test } from 'node:test';
import { sql } from 'kysely';
import { paymentSignature } from '../src/services/billing-deposits.js';
import { ledgerProblems } from './billing-support.js';
import { backends, call, makeTestApp, newAccount } from './helpers.js';

// docs/billing.md, "Confirming deposits": the operator API, a payment processor's signed webhook
// and the chain watcher share one confirmation; replays and duplicates credit once.

const SECRET = 'whsec_test_0123456789abcdef';
const HEADER = 'x-rampart-payment-signature';

for (const backend of await backends()) {
  describe(`confirming deposits (${backend})`, async () => {
    const t = await makeTestApp(backend);
    t.ctx.billing = { webhookSecret: SECRET };

    const nowSeconds = () => Math.floor(t.clock.now().getTime() / 1000);
    /** POSTs the raw body to the webhook, signed unless told otherwise. */
    const webhook = (body: unknown, o: { signature?: string | null; raw?: string; contentType?: string } = {}) => {
      const raw = o.raw ?? JSON.stringify(body);
      const ts = nowSeconds();
      const signature = o.signature === undefined ? `t=${ts},v1=${paymentSignature(SECRET, ts, raw)}` : o.signature;
      return call(t.app, 'POST', '/api/billing/webhook', {
        rawBody: raw,
        headers: { 'content-type': o.contentType ?? 'application/json', ...(signature !== null ? { [HEADER]: signature } : {}) },
      });
    };
    const balance = async (key: string) => (await call(t.app, 'GET', '/api/account', { key })).body.balance as number;
    const deposit = async (key: string, amount: number) => {
      const r = await call(t.app, 'POST', '/api/billing/deposits', { key, body: { amount } });
      assert.equal(r.status, 201);
      return r.body.id as string;
    };
    const eventRecorded = async (id: string) => (await sql<{ n: number }>`select count(*)::int as n from payment_events where id = ${id}`.execute(t.ctx.db)).rows[0]!.n;

    test('a signed deposit.confirmed credits the deposit once, without an API key', async () => {
      const { key } = await newAccount(t.app, 'pro', 10);
      const depositId = await deposit(key, 25);
      const event = { id: `evt_${randomUUID()}`, type: 'deposit.confirmed', depositId, txHash: `pay_${randomUUID()}` };
      const r = await webhook(event);
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.received, true);
      assert.equal(r.body.applied, true);
      assert.equal(r.body.deposit.status, 'confirmed');
      assert.equal(r.body.deposit.txHash, event.txHash);
      assert.equal(r.body.account.balance, 35);
      assert.equal(await balance(key), 35);
      const again = await webhook(event);
      assert.equal(again.status, 200);
      assert.deepEqual(again.body, { received: true, applied: false, duplicate: true });
      assert.equal(await balance(key), 35, 'the replay credits nothing');
      const notes = (await call(t.app, 'GET', '/api/notifications', { key })).body.filter((n: { kind: string }) => n.kind === 'deposit_confirmed');
      assert.equal(notes.length, 1);
      assert.equal(notes[0].message, `Deposit of $25.00 confirmed (transaction ${event.txHash}). Balance: $35.00. Nothing to do.`);
    });

    test('the same event five times at once: credited once', async () => {
      const { key } = await newAccount(t.app, 'pro', 0);
      const depositId = await deposit(key, 7);
      const event = { id: `evt_${randomUUID()}`, type: 'deposit.confirmed', depositId };
      const answers = await Promise.all(Array.from({ length: 5 }, () => webhook(event)));
      assert.deepEqual(
        answers.map((a) => a.status),
        [200, 200, 200, 200, 200],
      );
      assert.equal(answers.filter((a) => a.body.applied).length, 1);
      assert.equal(await balance(key), 7);
    });

    test('one deposit confirmed at once by other events and by the operator: credited once, the rest 409', async () => {
      const { key } = await newAccount(t.app, 'pro', 0);
      const depositId = await deposit(key, 9);
      const answers = await Promise.all([
        ...Array.from({ length: 3 }, () => webhook({ id: `evt_${randomUUID()}`, type: 'deposit.confirmed', depositId })),
        ...Array.from({ length: 3 }, () => call(t.app, 'POST', `/admin/deposits/${depositId}/confirm`, { admin: true })),
      ]);
      assert.equal(answers.filter((a) => a.status === 200).length, 1, JSON.stringify(answers.map((a) => a.body)));
      for (const a of answers.filter((x) => x.status !== 200)) {
        assert.equal(a.status, 409);
        assert.deepEqual(a.body, { error: 'Deposit is not pending' });
      }
      assert.equal(await balance(key), 9);
      assert.deepEqual(await ledgerProblems(t), []);
    });

    test('a transaction hash is credited once, whichever path reports it', async () => {
      const { key } = await newAccount(t.app, 'pro', 0);
      const [d1, d2, d3] = [await deposit(key, 5), await deposit(key, 6), await deposit(key, 7)];
      const hash = `0x${randomUUID().replace(/-/g, '')}`;
      assert.equal((await call(t.app, 'POST', `/admin/deposits/${d1}/confirm`, { admin: true, body: { txHash: hash } })).status, 200);
      const again = await call(t.app, 'POST', `/admin/deposits/${d2}/confirm`, { admin: true, body: { txHash: hash } });
      assert.equal(again.status, 409);
      assert.deepEqual(again.body, { error: 'txHash: this transaction was already credited' });
      const viaHook = await webhook({ id: `evt_${randomUUID()}`, type: 'deposit.confirmed', depositId: d3, txHash: hash });
      assert.equal(viaHook.status, 409);
      assert.deepEqual(viaHook.body, { error: 'txHash: this transaction was already credited' });
      assert.equal(await balance(key), 5);
      // Two deposits confirmed at once with one hash: one of them.
      const [e1, e2] = [await deposit(key, 1), await deposit(key, 2)];
      const h2 = `0x${randomUUID().replace(/-/g, '')}`;
      const both = await Promise.all([e1, e2].map((id) => call(t.app, 'POST', `/admin/deposits/${id}/confirm`, { admin: true, body: { txHash: h2 } })));
      assert.deepEqual(both.map((b) => b.status).sort(), [200, 409]);
      assert.ok([6, 7].includes(await balance(key)));
    });

    test('an amount below the one asked for credits what arrived', async () => {
      const { key } = await newAccount(t.app, 'pro', 0);
      const depositId = await deposit(key, 50);
      const r = await webhook({ id: `evt_${randomUUID()}`, type: 'deposit.confirmed', depositId, amount: 12.34 });
      assert.equal(r.status, 200);
      assert.equal(r.body.deposit.amount, 12.34);
      assert.equal(r.body.deposit.delta, 12.34);
      assert.equal(r.body.deposit.description, 'Requested $50.00, received $12.34');
      assert.equal(await balance(key), 12.34);
    });

    test('a frozen account is active again as soon as the webhook confirms enough', async () => {
      const { key, accountId } = await newAccount(t.app, 'pro', 0);
      await call(t.app, 'POST', '/admin/billing/charge', { admin: true, body: { accountId } });
      assert.equal((await call(t.app, 'POST', '/api/servers', { key, body: { name: 'x' } })).status, 403);
      const depositId = await deposit(key, 29);
      const r = await webhook({ id: `evt_${randomUUID()}`, type: 'deposit.confirmed', depositId });
      assert.equal(r.status, 200);
      assert.deepEqual(r.body.account, { id: accountId, state: 'active', balance: 0 });
      assert.equal((await call(t.app, 'POST', '/api/servers', { key, body: { name: 'x' } })).status, 201);
    });

    test('bad signatures, old or future timestamps, tampered bodies: 401 or 400 with {error}, nothing applied', async () => {
      const { key } = await newAccount(t.app, 'pro', 0);
      const depositId = await deposit(key, 5);
      const event = { id: `evt_${randomUUID()}`, type: 'deposit.confirmed', depositId };
      const raw = JSON.stringify(event);
      const ts = nowSeconds();
      const cases: [string, { signature?: string | null; raw?: string }, number, string][] = [
        ['missing header', { signature: null }, 400, 'X-Rampart-Payment-Signature: missing; expected t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">'],
        ['no v1', { signature: `t=${ts}` }, 400, 'X-Rampart-Payment-Signature: malformed; expected t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">'],
        ['no t', { signature: `v1=${paymentSignature(SECRET, ts, raw)}` }, 400, 'X-Rampart-Payment-Signature: malformed; expected t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">'],
        ['wrong secret', { signature: `t=${ts},v1=${paymentSignature('another secret', ts, raw)}` }, 401, 'X-Rampart-Payment-Signature: does not match the body'],
        [
          'tampered body',
          { raw: raw.replace('deposit.confirmed', 'deposit.confirmed '), signature: `t=${ts},v1=${paymentSignature(SECRET, ts, raw)}` },
          401,
          'X-Rampart-Payment-Signature: does not match the body',
        ],
        ['timestamp swapped', { signature: `t=${ts + 1},v1=${paymentSignature(SECRET, ts, raw)}` }, 401, 'X-Rampart-Payment-Signature: does not match the body'],
        [
          'six minutes old',
          { signature: `t=${ts - 360},v1=${paymentSignature(SECRET, ts - 360, raw)}` },
          401,
          "X-Rampart-Payment-Signature: the timestamp is more than 5 minutes away from the server's clock",
        ],
        [
          'six minutes ahead',
          { signature: `t=${ts + 360},v1=${paymentSignature(SECRET, ts + 360, raw)}` },
          401,
          "X-Rampart-Payment-Signature: the timestamp is more than 5 minutes away from the server's clock",
        ],
      ];
      for (const [what, o, status, error] of cases) {
        const r = await webhook(event, o);
        assert.equal(r.status, status, `${what}: ${JSON.stringify(r.body)}`);
        assert.deepEqual(r.body, { error }, what);
      }
      assert.equal(await balance(key), 0);
      assert.equal(await eventRecorded(event.id), 0);
      // Within 5 minutes, and with a second (rotated) signature beside a stale one: accepted.
      const old = ts - 290;
      const ok = await webhook(event, { signature: `t=${old},v1=${'0'.repeat(64)},v1=${paymentSignature(SECRET, old, raw)}` });
      assert.equal(ok.status, 200, JSON.stringify(ok.body));
      assert.equal(await balance(key), 5);
    });

    test('bodies: not JSON, unknown fields, missing depositId, unknown deposit, other event types', async () => {
      const { key } = await newAccount(t.app, 'pro', 0);
      const depositId = await deposit(key, 5);
      const notJson = await webhook(undefined, { raw: '{"id": ' });
      assert.equal(notJson.status, 400);
      assert.deepEqual(notJson.body, { error: 'body: is not valid JSON' });
      const extra = await webhook({ id: 'evt_x', type: 'deposit.confirmed', depositId, account: 'someone' });
      assert.equal(extra.status, 400);
      assert.match(extra.body.error, /unknown field: account/);
      const noDeposit = await webhook({ id: `evt_${randomUUID()}`, type: 'deposit.confirmed' });
      assert.equal(noDeposit.status, 400);
      assert.deepEqual(noDeposit.body, { error: 'depositId: is required for deposit.confirmed' });
      const badAmount = await webhook({ id: `evt_${randomUUID()}`, type: 'deposit.confirmed', depositId, amount: 1.001 });
      assert.equal(badAmount.status, 400);
      assert.match(badAmount.body.error, /^amount: /);
      for (const id of [randomUUID(), 'nope']) {
        const unknown = await webhook({ id: `evt_${randomUUID()}`, type: 'deposit.confirmed', depositId: id });
        assert.equal(unknown.status, 404);
        assert.deepEqual(unknown.body, { error: 'Deposit not found' });
      }
      const other = await webhook({ id: `evt_${randomUUID()}`, type: 'deposit.refunded', depositId });
      assert.equal(other.status, 200);
      assert.deepEqual(other.body, { received: true, applied: false });
      const form = await webhook(undefined, { raw: 'id=1', contentType: 'application/x-www-form-urlencoded' });
      assert.equal(form.status, 415);
      assert.deepEqual(Object.keys(form.body), ['error']);
      assert.equal(await balance(key), 0);
      // The deposit is still pending: a good event applies now.
      assert.equal((await webhook({ id: `evt_${randomUUID()}`, type: 'deposit.confirmed', depositId })).body.applied, true);
    });

    test('without RAMPART_PAYMENT_WEBHOOK_SECRET the webhook answers 503 and applies nothing', async (c) => {
      const saved = t.ctx.billing;
      c.after(() => (t.ctx.billing = saved));
      t.ctx.billing = {};
      const r = await webhook({ id: `evt_${randomUUID()}`, type: 'deposit.confirmed', depositId: randomUUID() });
      assert.equal(r.status, 503);
      assert.deepEqual(r.body, { error: 'The payment webhook is not configured on this server (RAMPART_PAYMENT_WEBHOOK_SECRET)' });
    });
  });
}
