import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, describe, test } from 'node:test';
import { sql } from 'kysely';
import { dropSchema } from '../src/db/database.js';
import { startServer } from '../src/serve.js';
import { addMonth, billingIntervalFromEnv, nextChargeAfter } from '../src/services/billing.js';
import { runChargeJob } from '../src/services/billing-charge.js';
import { waitFor } from '../../../test/support/processes.js';
import { ledgerProblems } from './billing-support.js';
import { ADMIN_TOKEN, backends, call, makeTestApp, newAccount, postgresUrl } from './helpers.js';

// docs/billing.md, "The monthly charge": a job charges every account whose charge is due, its
// plan's price for the period starting at its due date; a short balance freezes the account with
// an account_frozen notification. No account is ever charged twice for one period, whatever the
// number of runs at once or of processes.

const DAY = 86_400_000;
const FROZEN = { error: 'account is frozen, renew the plan to make changes' };

type Db = Parameters<typeof ledgerProblems>[0]['ctx']['db'];

/** A test-only write: the account's charge falls due at `at`. */
async function dueAt(db: Db, accountIds: string[], at: Date) {
  await sql`update accounts set next_charge_at = ${at.toISOString()}::timestamptz where id in (${sql.join(accountIds)})`.execute(db);
}
async function chargeRows(db: Db, accountIds: string[]) {
  const { rows } = await sql<{ account_id: string; period_start: Date; status: string }>`
    select account_id, period_start, status from transactions where kind = 'charge' and account_id in (${sql.join(accountIds)})`.execute(db);
  return rows;
}

test('RAMPART_BILLING_INTERVAL: seconds, default 60', () => {
  assert.equal(billingIntervalFromEnv(undefined), 60);
  assert.equal(billingIntervalFromEnv(' '), 60);
  assert.equal(billingIntervalFromEnv('5'), 5);
  assert.equal(billingIntervalFromEnv('0.5'), 0.5);
  for (const bad of ['0', '-1', 'x', '86401']) assert.throws(() => billingIntervalFromEnv(bad), /RAMPART_BILLING_INTERVAL must be a number of seconds/);
});

test('calendar months in UTC, the day clamped to the month', () => {
  assert.equal(addMonth(new Date('2026-01-31T10:00:00Z')).toISOString(), '2026-02-28T10:00:00.000Z');
  assert.equal(addMonth(new Date('2028-01-31T10:00:00Z')).toISOString(), '2028-02-29T10:00:00.000Z');
  assert.equal(addMonth(new Date('2026-12-15T00:00:00Z')).toISOString(), '2027-01-15T00:00:00.000Z');
  assert.equal(addMonth(new Date('2026-03-31T23:59:59.999Z'), -1).toISOString(), '2026-02-28T23:59:59.999Z');
  const now = new Date('2026-05-10T00:00:00Z');
  assert.equal(nextChargeAfter(new Date('2026-05-01T00:00:00Z'), now).toISOString(), '2026-06-01T00:00:00.000Z');
  assert.equal(nextChargeAfter(new Date('2026-02-01T00:00:00Z'), now).toISOString(), '2026-06-10T00:00:00.000Z', 'months missed: a month from now');
});

for (const backend of await backends()) {
  describe(`the monthly charge job (${backend})`, async () => {
    const t = await makeTestApp(backend);

    test('charges the due accounts their price for the period from the due date; the others are left alone', async () => {
      const due = await newAccount(t.app, 'pro', 100);
      const ent = await newAccount(t.app, 'enterprise', 300);
      const free = await newAccount(t.app, 'free', 0);
      const later = await newAccount(t.app, 'pro', 100);
      const at = new Date(t.clock.now().getTime() - DAY);
      await dueAt(t.ctx.db, [due.accountId, ent.accountId, free.accountId], at);
      const results = await runChargeJob(t.ctx);
      const mine = (id: string) => results.find((r) => r.accountId === id);
      assert.deepEqual(mine(due.accountId), { accountId: due.accountId, charged: true, state: 'active', balance: 71 });
      assert.deepEqual(mine(ent.accountId), { accountId: ent.accountId, charged: true, state: 'active', balance: 1 });
      assert.deepEqual(mine(free.accountId), { accountId: free.accountId, charged: true, state: 'active', balance: 0 });
      assert.equal(mine(later.accountId), undefined);
      const account = (await call(t.app, 'GET', '/api/account', { key: due.key })).body;
      assert.equal(account.nextChargeAt, addMonth(at).toISOString(), 'the next period follows on');
      const [charge] = await chargeRows(t.ctx.db, [due.accountId]);
      assert.equal(new Date(charge!.period_start).toISOString(), at.toISOString());
      assert.deepEqual(await runChargeJob(t.ctx).then((r) => r.filter((x) => [due.accountId, ent.accountId].includes(x.accountId))), [], 'not due any more');
      assert.deepEqual(await ledgerProblems(t), []);
    });

    test('the due dates SQL computes are those of addMonth, month ends and leap years included', async () => {
      const start = t.clock.now();
      try {
        for (const due of ['2027-01-31T08:00:00.000Z', '2028-01-30T23:30:00.000Z', '2027-03-31T00:00:00.000Z', '2027-12-31T12:00:00.000Z']) {
          const a = await newAccount(t.app, 'pro', 100);
          await dueAt(t.ctx.db, [a.accountId], new Date(due));
          t.clock.set(new Date(Date.parse(due) + 3_600_000));
          await runChargeJob(t.ctx);
          const account = (await call(t.app, 'GET', '/api/account', { key: a.key })).body;
          assert.equal(account.nextChargeAt, nextChargeAfter(new Date(due), t.clock.now()).toISOString(), due);
        }
        // Months behind (the control plane was down): the next charge is a month from now.
        const a = await newAccount(t.app, 'pro', 100);
        await dueAt(t.ctx.db, [a.accountId], new Date('2027-01-15T00:00:00Z'));
        t.clock.set(new Date('2027-04-20T00:00:00Z'));
        await runChargeJob(t.ctx);
        assert.equal((await call(t.app, 'GET', '/api/account', { key: a.key })).body.nextChargeAt, '2027-05-20T00:00:00.000Z');
        assert.equal((await chargeRows(t.ctx.db, [a.accountId])).length, 1, 'the missed months are not charged at once');
      } finally {
        t.clock.set(start);
      }
    });

    test('a short balance freezes the account: a failed charge, account_frozen saying how much to deposit, mutations 403 at once', async () => {
      const a = await newAccount(t.app, 'pro', 10.5);
      // Cached as active first: the freeze must reach the credential cache.
      assert.equal((await call(t.app, 'POST', '/api/servers', { key: a.key, body: { name: 'before' } })).status, 201);
      await dueAt(t.ctx.db, [a.accountId], new Date(t.clock.now().getTime() - 1000));
      const [r] = (await runChargeJob(t.ctx)).filter((x) => x.accountId === a.accountId);
      assert.deepEqual(r, { accountId: a.accountId, charged: false, state: 'frozen', balance: 10.5 });
      const blocked = await call(t.app, 'POST', '/api/servers', { key: a.key, body: { name: 'after' } });
      assert.equal(blocked.status, 403);
      assert.deepEqual(blocked.body, FROZEN);
      const rows = await chargeRows(t.ctx.db, [a.accountId]);
      assert.deepEqual(
        rows.map((x) => x.status),
        ['failed'],
      );
      const notes = (await call(t.app, 'GET', '/api/notifications', { key: a.key })).body.filter((n: { kind: string }) => n.kind === 'account_frozen');
      assert.equal(notes.length, 1);
      assert.equal(
        notes[0].message,
        'The monthly charge of $29.00 for the Pro plan failed: the balance is $10.50. The account is frozen: changes are blocked until it is renewed, ' +
          'while your domains keep being served and protected as configured. Deposit at least $18.50 (POST /api/billing/deposits) to make it active again.',
      );
      // A frozen account is not picked again (no second failed row, no second notification).
      t.clock.advance(DAY);
      await runChargeJob(t.ctx);
      assert.equal((await chargeRows(t.ctx.db, [a.accountId])).length, 1);
      assert.equal((await call(t.app, 'GET', '/api/account', { key: a.key })).body.balance, 10.5);
    });

    test('in batches: every due account is charged once, whatever the batch size', async () => {
      const accounts = [];
      for (let i = 0; i < 11; i++) accounts.push((await newAccount(t.app, 'pro', i === 4 ? 1 : 50)).accountId);
      await dueAt(t.ctx.db, accounts, new Date(t.clock.now().getTime() - DAY));
      const results = (await runChargeJob(t.ctx, 3)).filter((r) => accounts.includes(r.accountId));
      assert.equal(results.length, 11);
      assert.equal(results.filter((r) => !r.charged).length, 1);
      assert.deepEqual(await ledgerProblems(t, accounts), []);
    });

    test('never twice for one period: several runs at once, again and again, and across a month', async () => {
      const accounts = [];
      for (let i = 0; i < 30; i++) accounts.push((await newAccount(t.app, i % 7 === 0 ? 'enterprise' : 'pro', 1000)).accountId);
      const start = t.clock.now();
      try {
        await dueAt(t.ctx.db, accounts, new Date(start.getTime() - 1000));
        for (let round = 0; round < 3; round++) await Promise.all(Array.from({ length: 5 }, () => runChargeJob(t.ctx, 4)));
        let rows = (await chargeRows(t.ctx.db, accounts)).filter((r) => r.status === 'confirmed');
        assert.equal(rows.length, 30, 'one charge each');
        // A month on, the next period: once more each.
        t.clock.set(addMonth(new Date(start.getTime() + 1000)));
        for (let round = 0; round < 3; round++) await Promise.all(Array.from({ length: 5 }, () => runChargeJob(t.ctx, 4)));
        rows = (await chargeRows(t.ctx.db, accounts)).filter((r) => r.status === 'confirmed');
        assert.equal(rows.length, 60);
        const periods = new Set(rows.map((r) => `${r.account_id} ${new Date(r.period_start).toISOString()}`));
        assert.equal(periods.size, 60, 'one charge per account and period');
        assert.deepEqual(await ledgerProblems(t, accounts), []);
      } finally {
        t.clock.set(start);
      }
    });

    test('a frozen account made active by a deposit is charged for its due period, then the next period once', async () => {
      const a = await newAccount(t.app, 'pro', 0);
      const start = t.clock.now();
      try {
        const due = new Date(start.getTime() - 1000);
        await dueAt(t.ctx.db, [a.accountId], due);
        await runChargeJob(t.ctx);
        const d = await call(t.app, 'POST', '/api/billing/deposits', { key: a.key, body: { amount: 60 } });
        const c = await call(t.app, 'POST', `/admin/deposits/${d.body.id}/confirm`, { admin: true });
        assert.equal(c.status, 200);
        assert.deepEqual(c.body.account, { id: a.accountId, state: 'active', balance: 31 });
        const account = (await call(t.app, 'GET', '/api/account', { key: a.key })).body;
        assert.equal(account.nextChargeAt, addMonth(due).toISOString());
        await Promise.all([runChargeJob(t.ctx), runChargeJob(t.ctx)]);
        t.clock.set(new Date(addMonth(due).getTime() + 1000));
        await Promise.all([runChargeJob(t.ctx), runChargeJob(t.ctx)]);
        const rows = (await chargeRows(t.ctx.db, [a.accountId])).filter((r) => r.status === 'confirmed').map((r) => new Date(r.period_start).toISOString());
        assert.deepEqual(rows.sort(), [due.toISOString(), addMonth(due).toISOString()]);
        assert.equal((await call(t.app, 'GET', '/api/account', { key: a.key })).body.balance, 2);
        const kinds = (await call(t.app, 'GET', '/api/notifications', { key: a.key })).body.map((n: { kind: string }) => n.kind);
        assert.deepEqual(kinds.filter((k: string) => k.startsWith('account_') || k === 'deposit_confirmed').sort(), ['account_active', 'account_frozen', 'deposit_confirmed']);
      } finally {
        t.clock.set(start);
      }
    });
  });
}

const url = await postgresUrl();

describe('two control-plane processes on one PostgreSQL', { skip: url ? false : 'no PostgreSQL answers (set RAMPART_TEST_DATABASE_URL)' }, async () => {
  const schema = `t_bill_${randomBytes(5).toString('hex')}`;
  const options = { port: 0, host: '127.0.0.1', adminToken: ADMIN_TOKEN, databaseUrl: url, schema, logger: false as const, chain: null, billingIntervalSeconds: 0.05 };
  const a = await startServer(options);
  const b = await startServer(options);
  after(async () => {
    await Promise.all([a.close(), b.close()]);
    await dropSchema(url!, schema);
  });

  test('their scheduled jobs and direct runs at once charge each due account once for its period', async () => {
    const accounts: string[] = [];
    const keys: string[] = [];
    for (let i = 0; i < 40; i++) {
      const acct = await newAccount(i % 2 ? a.app : b.app, 'pro', i % 10 === 0 ? 5 : 100);
      accounts.push(acct.accountId);
      keys.push(acct.key);
    }
    const due = new Date(Date.now() - 60_000);
    // Both processes' jobs run every 50 ms; the direct runs below go around their advisory lock.
    await Promise.all([dueAt(a.ctx.db, accounts, due), runChargeJob(a.ctx, 3), runChargeJob(b.ctx, 3), runChargeJob(a.ctx, 7), runChargeJob(b.ctx, 5)]);
    await Promise.all([runChargeJob(a.ctx, 3), runChargeJob(b.ctx, 3)]);
    await waitFor(async () => (await chargeRows(a.ctx.db, accounts)).length === 40, 'every account charged or frozen by the jobs', 20_000);
    // More runs on both: nothing new.
    await Promise.all([runChargeJob(a.ctx), runChargeJob(b.ctx), runChargeJob(a.ctx), runChargeJob(b.ctx)]);
    const rows = await chargeRows(a.ctx.db, accounts);
    assert.equal(rows.length, 40, 'one row per account');
    assert.equal(rows.filter((r) => r.status === 'confirmed').length, 36);
    assert.equal(rows.filter((r) => r.status === 'failed').length, 4);
    for (const r of rows) assert.equal(new Date(r.period_start).toISOString(), due.toISOString());
    assert.deepEqual(await ledgerProblems(a, accounts), []);
    // The frozen ones are refused by both processes at once.
    for (const [i, key] of keys.entries()) {
      if (i % 10 !== 0) continue;
      for (const srv of [a, b]) {
        const r = await call(srv.app, 'POST', '/api/servers', { key, body: { name: 'x' } });
        assert.equal(r.status, 403);
        assert.deepEqual(r.body, FROZEN);
      }
    }
  });
});
