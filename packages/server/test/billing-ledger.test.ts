import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { AppError } from '../src/errors.js';
import type { Plan } from '../src/plans.js';
import { addMonth } from '../src/services/billing.js';
import { changePlan, proRataCents, runChargeJob, runMonthlyCharge } from '../src/services/billing-charge.js';
import { adjustBalance } from '../src/services/billing-credit.js';
import { applyPaymentEvent, confirmDeposit, createDeposit } from '../src/services/billing-deposits.js';
import { ledgerProblems } from './billing-support.js';
import { backends, call, makeTestApp, newAccount } from './helpers.js';

// docs/billing.md, "The ledger": every charge, deposit and adjustment is one row, in cents, and an
// account's balance is always the sum of its rows' deltas, never below 0, whatever runs at once.

const DAY = 86_400_000;

/** Expected refusals (402, 403, 404, 409) are part of the game; anything else fails the run. */
async function expectedOrRefused<T>(p: Promise<T>): Promise<T | AppError> {
  try {
    return await p;
  } catch (err) {
    if (err instanceof AppError && [402, 403, 404, 409].includes(err.status)) return err;
    throw err;
  }
}

type Op =
  | { op: 'deposit'; account: number; cents: number }
  | { op: 'confirm'; deposit: number; partial: boolean }
  | { op: 'webhook'; deposit: number; event: number }
  | { op: 'charge-one'; account: number }
  | { op: 'plan'; account: number; plan: Plan }
  | { op: 'adjust'; account: number; cents: number };

const ACCOUNTS = 3;
const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ op: fc.constant('deposit' as const), account: fc.nat(ACCOUNTS - 1), cents: fc.integer({ min: 1, max: 40_000 }) }),
  fc.record({ op: fc.constant('confirm' as const), deposit: fc.nat(20), partial: fc.boolean() }),
  fc.record({ op: fc.constant('webhook' as const), deposit: fc.nat(20), event: fc.nat(5) }),
  fc.record({ op: fc.constant('charge-one' as const), account: fc.nat(ACCOUNTS - 1) }),
  fc.record({ op: fc.constant('plan' as const), account: fc.nat(ACCOUNTS - 1), plan: fc.constantFrom<Plan>('free', 'pro', 'enterprise') }),
  fc.record({ op: fc.constant('adjust' as const), account: fc.nat(ACCOUNTS - 1), cents: fc.integer({ min: -20_000, max: 20_000 }).filter((n) => n !== 0) }),
);
/** A step: time passes (maybe past due dates) and the charge job runs, or a few operations at once. */
const stepArb = fc.oneof(fc.record({ advanceDays: fc.integer({ min: 0, max: 40 }), jobs: fc.integer({ min: 1, max: 3 }) }), fc.array(opArb, { minLength: 1, maxLength: 4 }));

for (const backend of await backends()) {
  describe(`the ledger (${backend})`, async () => {
    const t = await makeTestApp(backend);

    test('random sequences of deposits, confirmations, charges, plan changes and adjustments, some at once, keep balance = sum of the ledger, never below 0', async () => {
      await fc.assert(
        fc.asyncProperty(fc.array(fc.integer({ min: 0, max: 30_000 }), { minLength: ACCOUNTS, maxLength: ACCOUNTS }), fc.array(stepArb, { minLength: 1, maxLength: 8 }), async (balances, steps) => {
          const accounts = [];
          for (const cents of balances) accounts.push((await newAccount(t.app, 'pro', cents / 100)).accountId);
          const deposits: string[] = [];
          const events = new Map<number, string>();
          const run = async (o: Op): Promise<unknown> => {
            switch (o.op) {
              case 'deposit': {
                // Refused (409) past the cap of open deposits.
                const d = await expectedOrRefused(createDeposit(t.ctx, accounts[o.account]!, o.cents));
                return d instanceof AppError ? d : deposits.push(d.id);
              }
              case 'confirm': {
                const id = deposits[o.deposit % Math.max(deposits.length, 1)] ?? randomUUID();
                return expectedOrRefused(confirmDeposit(t.ctx, id, o.partial ? { amountCents: 1 } : {}));
              }
              case 'webhook': {
                const id = deposits[o.deposit % Math.max(deposits.length, 1)] ?? randomUUID();
                if (!events.has(o.event)) events.set(o.event, randomUUID());
                return expectedOrRefused(applyPaymentEvent(t.ctx, { id: events.get(o.event)!, type: 'deposit.confirmed', depositId: id }));
              }
              case 'charge-one':
                return expectedOrRefused(runMonthlyCharge(t.ctx, accounts[o.account]!));
              case 'plan':
                return expectedOrRefused(changePlan(t.ctx, accounts[o.account]!, o.plan));
              case 'adjust':
                return expectedOrRefused(adjustBalance(t.ctx, accounts[o.account]!, o.cents, undefined));
            }
          };
          for (const step of steps) {
            if (Array.isArray(step)) await Promise.all(step.map(run));
            else {
              t.clock.advance(step.advanceDays * DAY);
              await Promise.all(Array.from({ length: step.jobs }, () => runChargeJob(t.ctx)));
            }
            assert.deepEqual(await ledgerProblems(t, accounts), []);
          }
        }),
        { numRuns: backend === 'pglite' ? 25 : 20 },
      );
    });

    test('an opening balance is an adjustment row; the ledger lists kind, amount, signed delta, status, description and times', async () => {
      const { key, accountId } = await newAccount(t.app, 'pro', 40);
      let r = await call(t.app, 'GET', '/api/billing/transactions', { key });
      assert.equal(r.status, 200);
      assert.equal(r.body.length, 1);
      const [opening] = r.body;
      assert.equal(opening.kind, 'adjustment');
      assert.equal(opening.amount, 40);
      assert.equal(opening.delta, 40);
      assert.equal(opening.status, 'confirmed');
      assert.equal(opening.description, 'Opening balance');
      assert.equal(opening.confirmedAt, opening.createdAt);
      t.clock.advance(1000);
      await runMonthlyCharge(t.ctx, accountId);
      r = await call(t.app, 'GET', '/api/billing/transactions', { key });
      const [charge] = r.body;
      assert.equal(charge.kind, 'charge');
      assert.equal(charge.amount, 29);
      assert.equal(charge.delta, -29);
      assert.equal(charge.description, 'Monthly charge, Pro plan');
      assert.equal(typeof charge.periodStart, 'string');
      const account = (await call(t.app, 'GET', '/api/account', { key })).body;
      assert.equal(account.balance, 11);
      // An account without an opening balance has no such row.
      const empty = await newAccount(t.app, 'pro', 0);
      assert.deepEqual((await call(t.app, 'GET', '/api/billing/transactions', { key: empty.key })).body, []);
    });

    test('GET /api/billing/transactions in pages: limit (default 50, at most 200), before, the Link header', async () => {
      const { key, accountId } = await newAccount(t.app, 'pro', 0);
      for (let i = 0; i < 120; i++) {
        t.clock.advance(i % 3 === 0 ? 0 : 10); // some rows share a time: the id orders them
        await adjustBalance(t.ctx, accountId, i + 1, undefined);
      }
      const first = await call(t.app, 'GET', '/api/billing/transactions', { key });
      assert.equal(first.status, 200);
      assert.equal(first.body.length, 50, 'default 50');
      const seen: string[] = first.body.map((x: { id: string }) => x.id);
      let link = String(first.headers.link);
      assert.match(link, /^<\/api\/billing\/transactions\?before=[0-9a-f-]{36}>; rel="next"$/);
      for (;;) {
        const url = /^<([^>]+)>/.exec(link)![1]!;
        const page = await call(t.app, 'GET', url, { key });
        assert.equal(page.status, 200);
        seen.push(...page.body.map((x: { id: string }) => x.id));
        if (!page.headers.link) break;
        link = String(page.headers.link);
      }
      assert.equal(seen.length, 120);
      assert.equal(new Set(seen).size, 120, 'no row twice');
      const all = (await call(t.app, 'GET', '/api/billing/transactions?limit=200', { key })).body;
      assert.deepEqual(
        all.map((x: { id: string }) => x.id),
        seen,
        'pages join up to the full list, newest first',
      );
      const times = all.map((x: { createdAt: string }) => Date.parse(x.createdAt));
      assert.deepEqual(
        times,
        [...times].sort((a, b) => b - a),
      );
      const small = await call(t.app, 'GET', '/api/billing/transactions?limit=7', { key });
      assert.equal(small.body.length, 7);
      assert.match(String(small.headers.link), /limit=7&before=/);
      assert.equal((await call(t.app, 'GET', '/api/billing/transactions?limit=200', { key })).headers.link, undefined, 'no next page');
      for (const q of ['limit=0', 'limit=201', 'limit=x', 'limit=1.5']) {
        const r = await call(t.app, 'GET', `/api/billing/transactions?${q}`, { key });
        assert.equal(r.status, 400, q);
        assert.match(r.body.error, /^limit: /);
      }
      // Another account's row, or no row at all, is no cursor.
      const other = await newAccount(t.app, 'pro', 5);
      const otherId = (await call(t.app, 'GET', '/api/billing/transactions', { key: other.key })).body[0].id;
      for (const before of [otherId, randomUUID(), 'nope']) {
        const r = await call(t.app, 'GET', `/api/billing/transactions?before=${before}`, { key });
        assert.equal(r.status, 400, before);
        assert.match(r.body.error, /^before: /);
      }
    });

    describe('plan changes, pro rata', () => {
      test('the pro-rata amount: (new - old) x remaining / period, rounded to the cent, symmetric', () => {
        const next = new Date('2026-03-01T00:00:00Z'); // the period is February 2026: 28 days
        const tenDaysLeft = new Date(next.getTime() - 10 * DAY);
        assert.equal(proRataCents(2900, 29900, next, tenDaysLeft), Math.round((27000 * 10) / 28)); // 9642.857 -> 9643
        assert.equal(proRataCents(29900, 2900, next, tenDaysLeft), -9642, 'a credit is rounded down, a charge up');
        assert.equal(proRataCents(0, 2900, next, new Date(next.getTime() - 7 * DAY)), 725);
        assert.equal(proRataCents(2900, 2900, next, tenDaysLeft), 0);
        assert.equal(proRataCents(2900, 29900, next, next), 0, 'nothing left');
        assert.equal(proRataCents(2900, 29900, next, new Date(next.getTime() + DAY)), 0, 'already due');
        assert.equal(proRataCents(0, 2900, next, addMonth(next, -2)), 2900, 'at most a whole period');
      });

      test('an upgrade charges, a downgrade credits, the next charge is at the new price; frozen: 403', async () => {
        const { key, accountId } = await newAccount(t.app, 'pro', 400);
        const due = new Date((await call(t.app, 'GET', '/api/account', { key })).body.nextChargeAt);
        const start = t.clock.now();
        try {
          t.clock.set(new Date(due.getTime() - 10 * DAY));
          const expected = proRataCents(2900, 29900, due, t.clock.now());
          const up = await call(t.app, 'PUT', '/api/account/plan', { key, body: { plan: 'enterprise' } });
          assert.equal(up.status, 200, JSON.stringify(up.body));
          assert.equal(up.body.account.plan, 'enterprise');
          assert.equal(up.body.account.price, 299);
          assert.equal(up.body.transaction.kind, 'charge');
          assert.equal(up.body.transaction.amount, expected / 100);
          assert.equal(up.body.transaction.delta, -expected / 100);
          assert.equal(up.body.account.balance, (40_000 - expected) / 100);
          const down = await call(t.app, 'PUT', '/api/account/plan', { key, body: { plan: 'pro' } });
          assert.equal(down.status, 200);
          assert.equal(down.body.transaction.kind, 'adjustment');
          // A charge is rounded up, a credit down: e.g. 9,642.857 cents charged 9,643, credited 9,642.
          const credit = -proRataCents(29900, 2900, due, t.clock.now());
          assert.ok(credit === expected || credit === expected - 1, `${credit} for ${expected}`);
          assert.equal(down.body.transaction.delta, credit / 100);
          assert.equal(down.body.account.balance, (40_000 - expected + credit) / 100, 'up and down at once costs at most the fraction of a cent');
          const same = await call(t.app, 'PUT', '/api/account/plan', { key, body: { plan: 'pro' } });
          assert.equal(same.status, 200);
          assert.equal(same.body.transaction, null);
          // The next monthly charge is at the new plan's price.
          await call(t.app, 'PUT', '/api/account/plan', { key, body: { plan: 'enterprise' } });
          t.clock.set(new Date(due.getTime() + 1000));
          const [charged] = (await runChargeJob(t.ctx)).filter((r) => r.accountId === accountId);
          assert.ok(charged?.charged);
          const rows = (await call(t.app, 'GET', '/api/billing/transactions', { key })).body;
          assert.equal(rows[0].amount, 299);
          assert.equal(rows[0].description, 'Monthly charge, Enterprise plan');
          assert.deepEqual(await ledgerProblems(t), []);
        } finally {
          t.clock.set(start);
        }
        // Frozen: the SPEC's 403, plan unchanged.
        const frozen = await newAccount(t.app, 'pro', 1);
        await runMonthlyCharge(t.ctx, frozen.accountId);
        const r = await call(t.app, 'PUT', '/api/account/plan', { key: frozen.key, body: { plan: 'enterprise' } });
        assert.equal(r.status, 403);
        assert.deepEqual(r.body, { error: 'account is frozen, renew the plan to make changes' });
        assert.equal((await call(t.app, 'GET', '/api/account', { key: frozen.key })).body.plan, 'pro');
      });

      test('an upgrade the balance does not cover: 402 naming the amount, nothing changed', async () => {
        const { key } = await newAccount(t.app, 'pro', 10);
        const due = new Date((await call(t.app, 'GET', '/api/account', { key })).body.nextChargeAt);
        const amount = proRataCents(2900, 29900, due, t.clock.now());
        const r = await call(t.app, 'PUT', '/api/account/plan', { key, body: { plan: 'enterprise' } });
        assert.equal(r.status, 402);
        assert.deepEqual(r.body, {
          error: `plan: moving to Enterprise costs $${(amount / 100).toFixed(2)} now (pro rata for the rest of the period) and the balance is $10.00; deposit at least $${((amount - 1000) / 100).toFixed(2)} first`,
        });
        const a = (await call(t.app, 'GET', '/api/account', { key })).body;
        assert.equal(a.plan, 'pro');
        assert.equal(a.balance, 10);
        assert.equal((await call(t.app, 'GET', '/api/billing/transactions', { key })).body.length, 1, 'the opening balance only');
      });

      test('a downgrade below what the account uses: 409 naming what to remove; bad plans 400', async () => {
        const { key } = await newAccount(t.app, 'pro', 50);
        const r = await call(t.app, 'PUT', '/api/account/plan', { key, body: { plan: 'free' } });
        assert.equal(r.status, 409);
        assert.deepEqual(r.body, { error: 'plan: the Free plan has no API keys and this account has 1; delete them first (sign in with a password to do so)' });
        assert.equal((await call(t.app, 'GET', '/api/account', { key })).body.plan, 'pro');
        for (const body of [{ plan: 'gold' }, {}, { plan: 'pro', extra: 1 }, { plan: null }]) {
          const bad = await call(t.app, 'PUT', '/api/account/plan', { key, body });
          assert.equal(bad.status, 400, JSON.stringify(body));
          assert.deepEqual(Object.keys(bad.body), ['error']);
        }
      });

      test('a downgrade below the shield servers or custom rules the account has: 409 naming how many to remove, nothing changed', async () => {
        const { key } = await newAccount(t.app, 'enterprise', 100);
        const servers: string[] = [];
        for (let i = 0; i < 27; i++) {
          const r = await call(t.app, 'POST', '/api/servers', { key, body: { name: `edge-${i}` } });
          assert.equal(r.status, 201, JSON.stringify(r.body));
          servers.push(r.body.id);
        }
        const rules: string[] = [];
        for (let i = 0; i < 26; i++) {
          const r = await call(t.app, 'POST', '/api/rules', { key, body: { name: `rule-${i}`, expression: `http.request.uri.path eq "/r${i}"`, action: 'block' } });
          assert.equal(r.status, 201, JSON.stringify(r.body));
          rules.push(r.body.id);
        }
        const toPro = () => call(t.app, 'PUT', '/api/account/plan', { key, body: { plan: 'pro' } });
        const before = (await call(t.app, 'GET', '/api/billing/transactions', { key })).body.length;
        let r = await toPro();
        assert.equal(r.status, 409);
        assert.deepEqual(r.body, { error: 'plan: the Pro plan allows 25 shield servers and this account has 27; decommission 2 first (DELETE /api/servers/{id})' });
        const unchanged = (await call(t.app, 'GET', '/api/account', { key })).body;
        assert.equal(unchanged.plan, 'enterprise');
        assert.equal(unchanged.balance, 100, 'no credit');
        assert.equal((await call(t.app, 'GET', '/api/billing/transactions', { key })).body.length, before, 'no ledger row');
        assert.equal((await call(t.app, 'GET', '/api/servers', { key })).body.length, 27, 'every server kept');
        // One decommissioned is not enough; decommissioned servers do not count.
        assert.equal((await call(t.app, 'DELETE', `/api/servers/${servers[0]}`, { key })).status, 200);
        assert.match((await toPro()).body.error, /allows 25 shield servers and this account has 26; decommission 1 first/);
        assert.equal((await call(t.app, 'DELETE', `/api/servers/${servers[1]}`, { key })).status, 200);
        r = await toPro();
        assert.equal(r.status, 409);
        assert.deepEqual(r.body, { error: 'plan: the Pro plan allows 25 custom rules and this account has 26; delete 1 first' });
        assert.equal((await call(t.app, 'DELETE', `/api/rules/${rules[0]}`, { key })).status, 200);
        r = await toPro();
        assert.equal(r.status, 200, JSON.stringify(r.body));
        assert.equal(r.body.account.plan, 'pro');
        // At the limit now: one more is the plan's usual refusal.
        const more = await call(t.app, 'POST', '/api/servers', { key, body: { name: 'one-more' } });
        assert.deepEqual([more.status, more.body], [403, { error: 'Maximum 25 servers allowed on the Pro plan' }]);
      });

      test('a Free account signed in with a password upgrades to Pro', async () => {
        const email = `planner-${randomUUID()}@example.com`;
        const reg = await call(t.app, 'POST', '/api/auth/register', { body: { email, password: 'correct horse' } });
        assert.equal(reg.status, 201);
        const cookie = `rampart_session=${reg.cookies.find((c) => c.name === 'rampart_session')!.value}`;
        const accountId = reg.body.accountId as string;
        await adjustBalance(t.ctx, accountId, 5000, 'test credit');
        const up = await call(t.app, 'PUT', '/api/account/plan', { cookie, body: { plan: 'pro' } });
        assert.equal(up.status, 200, JSON.stringify(up.body));
        assert.equal(up.body.account.plan, 'pro');
        assert.ok(up.body.transaction.amount > 0 && up.body.transaction.amount <= 29);
        // The session sees the new plan at once: API keys can be created now.
        const k = await call(t.app, 'POST', '/api/settings/api-keys', { cookie, body: { name: 'first' } });
        assert.equal(k.status, 201, JSON.stringify(k.body));
      });
    });

    describe('operator adjustments', () => {
      test('a credit and a debit are ledger rows; a debit below 0 is refused (409), nothing stored; bad input 400', async () => {
        const { key, accountId } = await newAccount(t.app, 'pro', 10);
        const credit = await call(t.app, 'POST', `/admin/accounts/${accountId}/adjustments`, { admin: true, body: { amount: 5.5, description: 'Goodwill' } });
        assert.equal(credit.status, 201, JSON.stringify(credit.body));
        assert.equal(credit.body.transaction.delta, 5.5);
        assert.equal(credit.body.transaction.description, 'Goodwill');
        assert.deepEqual(credit.body.account, { id: accountId, state: 'active', balance: 15.5 });
        const debit = await call(t.app, 'POST', `/admin/accounts/${accountId}/adjustments`, { admin: true, body: { amount: -15.5 } });
        assert.equal(debit.status, 201);
        assert.equal(debit.body.transaction.description, 'Debit by the operator');
        assert.equal(debit.body.account.balance, 0);
        const tooMuch = await call(t.app, 'POST', `/admin/accounts/${accountId}/adjustments`, { admin: true, body: { amount: -0.01 } });
        assert.equal(tooMuch.status, 409);
        assert.deepEqual(tooMuch.body, { error: 'amount: the adjustment would take the balance below 0 (it is $0.00)' });
        for (const body of [{ amount: 0 }, { amount: 1.234 }, { amount: '5' }, {}, { amount: 1, x: 1 }]) {
          const r = await call(t.app, 'POST', `/admin/accounts/${accountId}/adjustments`, { admin: true, body });
          assert.equal(r.status, 400, JSON.stringify(body));
          assert.deepEqual(Object.keys(r.body), ['error']);
        }
        for (const id of [randomUUID(), 'nope']) {
          const r = await call(t.app, 'POST', `/admin/accounts/${id}/adjustments`, { admin: true, body: { amount: 1 } });
          assert.equal(r.status, 404);
        }
        assert.equal((await call(t.app, 'POST', `/admin/accounts/${accountId}/adjustments`, { body: { amount: 1 } })).status, 401);
        assert.equal((await call(t.app, 'GET', '/api/billing/transactions', { key })).body.length, 3);
        assert.deepEqual(await ledgerProblems(t), []);
      });

      test('a credit that covers the price makes a frozen account active at once', async () => {
        const { key, accountId } = await newAccount(t.app, 'pro', 0);
        await runMonthlyCharge(t.ctx, accountId);
        assert.equal((await call(t.app, 'GET', '/api/account', { key })).body.state, 'frozen');
        const r = await call(t.app, 'POST', `/admin/accounts/${accountId}/adjustments`, { admin: true, body: { amount: 30 } });
        assert.equal(r.status, 201);
        assert.deepEqual(r.body.account, { id: accountId, state: 'active', balance: 1 });
        assert.equal((await call(t.app, 'POST', '/api/servers', { key, body: { name: 'after credit' } })).status, 201);
      });
    });
  });
}
