import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, test } from 'node:test';
import { addMonth } from '../src/services/billing.js';
import { call, makeTestApp, newAccount } from './helpers.js';

// docs/api.md "Account, billing and notifications" and "Frozen accounts": the monthly charge
// (29 dollars on Pro), freezing on an insufficient balance, what a frozen account may and may not
// do, deposits and their confirmation (active again at once), and the due-date logic of the
// operator's charge run.

const FROZEN = { error: 'account is frozen, renew the plan to make changes' };
const PRICE = 29;
const SECOND = 1000;
const DAY = 86_400_000;

describe('billing and the frozen account', async () => {
  const t = await makeTestApp();
  const app = t.app;

  const account = async (key: string) => {
    const r = await call(app, 'GET', '/api/account', { key });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body as { id: string; plan: string; price: number; balance: number; state: string; nextChargeAt: string };
  };
  const charge = async (accountId?: string) => {
    const r = await call(app, 'POST', '/admin/billing/charge', { admin: true, body: accountId ? { accountId } : {} });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.results as { accountId: string; charged: boolean; state: string; balance: number }[];
  };
  const deposit = async (key: string, amount: number) => {
    const r = await call(app, 'POST', '/api/billing/deposits', { key, body: { amount } });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body as { id: string; amount: number; status: string };
  };
  const confirm = (id: string) => call(app, 'POST', `/admin/deposits/${id}/confirm`, { admin: true, body: { txHash: `0x${id.replace(/-/g, '')}` } });
  /** Charges and deposits, newest first (the opening balance, an adjustment, left out). */
  const transactions = async (key: string) => {
    const r = await call(app, 'GET', '/api/billing/transactions', { key });
    assert.equal(r.status, 200);
    return (r.body as { kind: string; amount: number; status: string; createdAt: string }[]).filter((x) => x.kind !== 'adjustment');
  };
  const get = async (key: string, url: string) => {
    const r = await call(app, 'GET', url, { key });
    assert.equal(r.status, 200, `GET ${url}: ${JSON.stringify(r.body)}`);
    return r.body;
  };

  test('a new Pro account is active, priced at 29 dollars, first charge one month after creation', async () => {
    const { key } = await newAccount(app, 'pro', 100);
    const a = await account(key);
    assert.equal(a.plan, 'pro');
    assert.equal(a.price, PRICE);
    assert.equal(a.balance, 100);
    assert.equal(a.state, 'active');
    assert.equal(a.nextChargeAt, addMonth(t.clock.now()).toISOString());
  });

  test('a charge with enough balance debits the price and keeps the account active', async () => {
    const { key, accountId } = await newAccount(app, 'pro', 100);
    const before = await account(key);
    const results = await charge(accountId);
    assert.deepEqual(results, [{ accountId, charged: true, state: 'active', balance: 100 - PRICE }]);
    const a = await account(key);
    assert.equal(a.state, 'active');
    assert.equal(a.balance, 71);
    assert.ok(Date.parse(a.nextChargeAt) > Date.parse(before.nextChargeAt), 'the next charge moves on');
    const txs = await transactions(key);
    assert.equal(txs.length, 1);
    assert.equal(txs[0]!.kind, 'charge');
    assert.equal(txs[0]!.amount, PRICE);
    assert.equal(txs[0]!.status, 'confirmed');
    // A balance of exactly the price is enough.
    const exact = await newAccount(app, 'pro', PRICE);
    assert.deepEqual(await charge(exact.accountId), [{ accountId: exact.accountId, charged: true, state: 'active', balance: 0 }]);
  });

  test('charging an unknown account gives 404', async () => {
    for (const id of [randomUUID(), 'not-a-uuid']) {
      const r = await call(app, 'POST', '/admin/billing/charge', { admin: true, body: { accountId: id } });
      assert.equal(r.status, 404);
      assert.deepEqual(r.body, { error: 'Account not found' });
    }
  });

  describe('the frozen walk-through', () => {
    const PASSWORD = 'frozen-walk-1';
    let key = '';
    let cookie = '';
    let accountId = '';
    let spareKeyId = '';
    let spareKey = '';
    let s1 = '';
    let s2 = '';
    let domainId = '';
    let ruleId = '';
    let depositId = '';
    let snapshot: Record<string, unknown> = {};
    const READS = [
      '/api/account',
      '/api/settings/api-keys',
      '/api/servers',
      '/api/domains',
      '/api/waf',
      '/api/waf/events',
      '/api/waf/ai-bots',
      '/api/billing/transactions',
      '/api/notifications',
      '/api/settings/export',
    ];
    const STATE_READS = ['/api/settings/api-keys', '/api/servers', '/api/domains', '/api/waf', '/api/billing/transactions'];
    const takeSnapshot = async () => {
      const out: Record<string, unknown> = {};
      for (const url of STATE_READS) out[url] = await get(key, url);
      const hashes = await t.database.db.selectFrom('servers').select(['id', 'token_hash']).where('account_id', '=', accountId).orderBy('id').execute();
      out.tokenHashes = hashes;
      return out;
    };

    test('setup: a Pro account with 10 dollars, a spare key, two servers, a domain and a rule', async () => {
      let email = '';
      ({ key, accountId, email } = await newAccount(app, 'pro', 10, PASSWORD));
      const login = await call(app, 'POST', '/api/auth/login', { body: { email, password: PASSWORD } });
      assert.equal(login.status, 200);
      cookie = `rampart_session=${login.cookies.find((c) => c.name === 'rampart_session')!.value}`;
      const k = await call(app, 'POST', '/api/settings/api-keys', { key, body: { name: 'spare' } });
      assert.equal(k.status, 201);
      spareKeyId = k.body.id;
      spareKey = k.body.key;
      s1 = (await call(app, 'POST', '/api/servers', { key, body: { name: 'one' } })).body.id;
      s2 = (await call(app, 'POST', '/api/servers', { key, body: { name: 'two' } })).body.id;
      const d = await call(app, 'POST', '/api/domains', {
        key,
        body: { domain: 'frozen.example.com', origins: [{ ip: '10.0.0.1', port: 80 }], serverIds: [s1], sslEnabled: true },
      });
      assert.equal(d.status, 201);
      domainId = d.body.id;
      const r = await call(app, 'POST', '/api/waf', { key, body: { rule_type: 'block_ip', value: '203.0.113.5' } });
      assert.equal(r.status, 201);
      ruleId = r.body.id;
    });

    test('the monthly charge with balance 10 < 29 freezes the account and debits nothing', async () => {
      const results = await charge(accountId);
      assert.deepEqual(results, [{ accountId, charged: false, state: 'frozen', balance: 10 }]);
      const a = await account(key);
      assert.equal(a.state, 'frozen');
      assert.equal(a.balance, 10);
      const txs = await transactions(key);
      assert.equal(txs.length, 1);
      assert.equal(txs[0]!.kind, 'charge');
      assert.equal(txs[0]!.status, 'failed');
      assert.equal(txs[0]!.amount, PRICE);
      snapshot = await takeSnapshot();
    });

    test('every mutation under /api answers 403 with the renew message and changes nothing', async () => {
      const changesBefore = t.changed.length;
      const mutations: [string, string, unknown?][] = [
        ['POST', '/api/settings/api-keys', { name: 'blocked' }],
        ['DELETE', `/api/settings/api-keys?id=${spareKeyId}`],
        ['POST', '/api/servers', { name: 'blocked' }],
        ['POST', `/api/servers/${s1}/token`],
        ['DELETE', `/api/servers/${s2}`],
        ['POST', '/api/domains', { domain: 'blocked.example.com', origins: [{ ip: '10.0.0.9', port: 80 }], serverIds: [s1], sslEnabled: true }],
        ['PUT', `/api/domains/${domainId}`, { wafLevel: 'high' }],
        ['PUT', `/api/domains/${domainId}`, { sslEnabled: false }],
        ['PUT', `/api/domains/${domainId}`, { serverIds: [s1, s2] }],
        ['PUT', `/api/domains/${domainId}`, { origins: [{ ip: '10.0.0.7', port: 80 }], wafEnabled: false }],
        ['DELETE', `/api/domains/${domainId}`],
        ['POST', '/api/waf', { rule_type: 'block_ip', value: '198.51.100.1' }],
        ['PUT', `/api/waf/${ruleId}`, { enabled: false }],
        ['DELETE', `/api/waf/${ruleId}`],
      ];
      for (const [method, url, body] of mutations) {
        const r = await call(app, method, url, { key, ...(body !== undefined ? { body } : {}) });
        assert.equal(r.status, 403, `${method} ${url} ${JSON.stringify(body)}: ${r.status} ${JSON.stringify(r.body)}`);
        assert.deepEqual(r.body, FROZEN, `${method} ${url}`);
      }
      // The same through a browser session.
      for (const [method, url, body] of mutations.slice(0, 3)) {
        const r = await call(app, method, url, { cookie, ...(body !== undefined ? { body } : {}) });
        assert.equal(r.status, 403, `cookie ${method} ${url}`);
        assert.deepEqual(r.body, FROZEN);
      }
      assert.deepEqual(await takeSnapshot(), snapshot, 'nothing changed');
      assert.equal(t.changed.length, changesBefore, 'nothing was pushed to servers');
      // The key that could not be deleted still works.
      assert.equal((await call(app, 'GET', '/api/account', { key: spareKey })).status, 200);
    });

    test('every GET still answers 200, the export included', async () => {
      for (const url of READS) await get(key, url);
      for (const url of READS) assert.equal((await call(app, 'GET', url, { cookie })).status, 200, `cookie GET ${url}`);
      const exp = await call(app, 'GET', '/api/settings/export', { key });
      assert.equal(exp.status, 200);
      assert.deepEqual(
        exp.body.domains.map((d: { domain: string }) => d.domain),
        ['frozen.example.com'],
      );
      assert.ok(String(exp.headers['content-disposition']).startsWith('attachment; filename='));
    });

    test('origins of an existing domain can still be changed (and are pushed)', async () => {
      const rev = async () => (await get(key, '/api/servers')).find((s: { id: string }) => s.id === s1).desiredRevision as number;
      const before = await rev();
      const r = await call(app, 'PUT', `/api/domains/${domainId}`, {
        key,
        body: {
          origins: [
            { ip: '10.0.0.42', port: 8080 },
            { ip: '2001:db8::42', port: 80 },
          ],
        },
      });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.deepEqual(r.body.origins, [
        { ip: '10.0.0.42', port: 8080 },
        { ip: '2001:db8::42', port: 80 },
      ]);
      const listed = (await get(key, '/api/domains'))[0];
      assert.deepEqual(listed.origins, r.body.origins);
      assert.equal(listed.wafLevel, 'medium', 'nothing else changed');
      assert.equal(await rev(), before + 1, 'the change reaches the assigned server');
      // Invalid origins are still validated.
      const bad = await call(app, 'PUT', `/api/domains/${domainId}`, { key, body: { origins: [{ ip: '10.0.0.1#x', port: 80 }] } });
      assert.equal(bad.status, 400);
      assert.match(bad.body.error, /^origins\[0\]\.ip: /);
      const unknown = await call(app, 'PUT', `/api/domains/${randomUUID()}`, { key, body: { origins: [{ ip: '10.0.0.1', port: 80 }] } });
      assert.equal(unknown.status, 404);
    });

    test('a deposit can be announced while frozen: 201, pending; the account stays frozen until confirmed', async () => {
      t.clock.advance(SECOND);
      const d = await deposit(key, 50);
      assert.equal(d.status, 'pending');
      assert.equal(d.amount, 50);
      assert.equal(typeof d.id, 'string');
      depositId = d.id;
      const a = await account(key);
      assert.equal(a.state, 'frozen');
      assert.equal(a.balance, 10, 'a pending deposit is not credited');
      const blocked = await call(app, 'POST', '/api/servers', { key, body: { name: 'still blocked' } });
      assert.equal(blocked.status, 403);
      assert.deepEqual(blocked.body, FROZEN);
    });

    test('confirming the deposit makes the account active at once with balance 10 + 50 - 29 = 31', async () => {
      t.clock.advance(SECOND);
      const r = await confirm(depositId);
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const a = await account(key);
      assert.equal(a.state, 'active');
      assert.equal(a.balance, 31);
    });

    test('mutations work again right after the confirmation', async () => {
      const k = await call(app, 'POST', '/api/settings/api-keys', { key, body: { name: 'after renewal' } });
      assert.equal(k.status, 201, JSON.stringify(k.body));
      const s = await call(app, 'POST', '/api/servers', { key, body: { name: 'three' } });
      assert.equal(s.status, 201);
      const put = await call(app, 'PUT', `/api/domains/${domainId}`, { key, body: { wafLevel: 'high' } });
      assert.equal(put.status, 200);
      assert.equal(put.body.wafLevel, 'high');
      const rule = await call(app, 'POST', '/api/waf', { key, body: { rule_type: 'block_country', value: 'KP' } });
      assert.equal(rule.status, 201);
      const upd = await call(app, 'PUT', `/api/waf/${ruleId}`, { key, body: { enabled: false } });
      assert.equal(upd.status, 200);
      const delRule = await call(app, 'DELETE', `/api/waf/${ruleId}`, { key });
      assert.equal(delRule.status, 200);
      const delKey = await call(app, 'DELETE', `/api/settings/api-keys?id=${spareKeyId}`, { key });
      assert.deepEqual(delKey.body, { success: true });
      const decom = await call(app, 'DELETE', `/api/servers/${s2}`, { key });
      assert.equal(decom.status, 200);
      const delDomain = await call(app, 'DELETE', `/api/domains/${domainId}`, { key });
      assert.deepEqual(delDomain.body, { success: true });
    });

    test('GET /api/billing/transactions lists the charges and the deposit, newest first', async () => {
      const txs = await transactions(key);
      assert.deepEqual(
        txs.map((x) => [x.kind, x.status, x.amount]),
        [
          ['charge', 'confirmed', PRICE],
          ['deposit', 'confirmed', 50],
          ['charge', 'failed', PRICE],
        ],
      );
      const times = txs.map((x) => Date.parse(x.createdAt));
      assert.deepEqual(
        times,
        [...times].sort((a, b) => b - a),
        'newest first',
      );
    });

    test('confirming the same deposit again gives 409 and credits nothing', async () => {
      const r = await confirm(depositId);
      assert.equal(r.status, 409);
      assert.deepEqual(Object.keys(r.body), ['error']);
      assert.equal((await account(key)).balance, 31);
      assert.equal((await transactions(key)).length, 3);
    });
  });

  test('a confirmed deposit that does not cover the price leaves the account frozen', async () => {
    const { key, accountId } = await newAccount(app, 'pro', 0);
    await charge(accountId);
    assert.equal((await account(key)).state, 'frozen');
    const small = await deposit(key, 5);
    assert.equal((await confirm(small.id)).status, 200);
    let a = await account(key);
    assert.equal(a.state, 'frozen');
    assert.equal(a.balance, 5);
    const blocked = await call(app, 'POST', '/api/servers', { key, body: { name: 'x' } });
    assert.equal(blocked.status, 403);
    assert.deepEqual(blocked.body, FROZEN);
    const rest = await deposit(key, 24);
    assert.equal((await confirm(rest.id)).status, 200);
    a = await account(key);
    assert.equal(a.state, 'active');
    assert.equal(a.balance, 0);
    assert.equal((await call(app, 'POST', '/api/servers', { key, body: { name: 'x' } })).status, 201);
  });

  test('a deposit on an active account is credited in full', async () => {
    const { key } = await newAccount(app, 'pro', 1);
    const d = await deposit(key, 0.01);
    assert.equal(d.amount, 0.01);
    assert.equal((await confirm(d.id)).status, 200);
    const a = await account(key);
    assert.equal(a.state, 'active');
    assert.equal(a.balance, 1.01);
  });

  test('confirming an unknown deposit gives 404', async () => {
    for (const id of [randomUUID(), 'not-a-uuid']) {
      const r = await call(app, 'POST', `/admin/deposits/${id}/confirm`, { admin: true, body: {} });
      assert.equal(r.status, 404, id);
      assert.deepEqual(r.body, { error: 'Deposit not found' });
    }
    // A charge is not a deposit.
    const { key, accountId } = await newAccount(app, 'pro', 100);
    await charge(accountId);
    const chargeId = (await call(app, 'GET', '/api/billing/transactions', { key })).body.find((x: { kind: string }) => x.kind === 'charge').id;
    const r = await call(app, 'POST', `/admin/deposits/${chargeId}/confirm`, { admin: true, body: {} });
    assert.equal(r.status, 404);
  });

  test('POST /admin/deposits/:id/confirm accepts a request without a body (txHash is optional)', async () => {
    const { key } = await newAccount(app, 'pro', 100);
    const d = await deposit(key, 5);
    const c = await call(app, 'POST', `/admin/deposits/${d.id}/confirm`, { admin: true });
    assert.equal(c.status, 200, `confirm without a body: ${JSON.stringify(c.body)}`);
    assert.equal((await account(key)).balance, 105);
  });

  test('POST /admin/billing/charge accepts a request without a body (accountId is optional)', async () => {
    const { key, accountId } = await newAccount(app, 'pro', 100);
    const start = t.clock.now();
    try {
      t.clock.set(new Date(Date.parse((await account(key)).nextChargeAt) + 1000));
      const r = await call(app, 'POST', '/admin/billing/charge', { admin: true });
      assert.equal(r.status, 200, `charge without a body: ${JSON.stringify(r.body)}`);
      assert.ok(r.body.results.some((x: { accountId: string }) => x.accountId === accountId));
    } finally {
      t.clock.set(start);
    }
  });

  test('deposit amounts 0, -1, 1.234, "x", null or missing give 400 naming amount; nothing stored', async () => {
    const { key } = await newAccount(app, 'pro', 100);
    for (const body of [{ amount: 0 }, { amount: -1 }, { amount: 1.234 }, { amount: 'x' }, { amount: '50' }, { amount: null }, {}]) {
      const r = await call(app, 'POST', '/api/billing/deposits', { key, body });
      assert.equal(r.status, 400, `${JSON.stringify(body)}: ${JSON.stringify(r.body)}`);
      assert.deepEqual(Object.keys(r.body), ['error']);
      assert.match(r.body.error, /^amount: /, `${JSON.stringify(body)}: ${r.body.error}`);
    }
    assert.deepEqual(await transactions(key), []);
  });

  test('the charge run without accountId charges only accounts that are due', async () => {
    const start = t.clock.now();
    try {
      const early = await newAccount(app, 'pro', 100);
      const earlyDue = (await account(early.key)).nextChargeAt;
      t.clock.advance(15 * DAY);
      const late = await newAccount(app, 'pro', 100);
      const lateDue = (await account(late.key)).nextChargeAt;
      assert.ok(Date.parse(lateDue) > Date.parse(earlyDue));

      let results = await charge();
      assert.ok(!results.some((r) => r.accountId === early.accountId || r.accountId === late.accountId), 'nobody of ours is due yet');

      t.clock.set(new Date(Date.parse(earlyDue) + DAY));
      results = await charge();
      assert.deepEqual(
        results.find((r) => r.accountId === early.accountId),
        { accountId: early.accountId, charged: true, state: 'active', balance: 100 - PRICE },
      );
      assert.ok(!results.some((r) => r.accountId === late.accountId), 'the later account is not due');
      assert.equal((await account(early.key)).balance, 71);
      assert.equal((await account(late.key)).balance, 100);
      const next = (await account(early.key)).nextChargeAt;
      assert.ok(Date.parse(next) > t.clock.now().getTime(), 'the next charge is in the future');

      // Running again at once charges nobody twice.
      results = await charge();
      assert.ok(!results.some((r) => r.accountId === early.accountId));
      assert.equal((await account(early.key)).balance, 71);

      // Past the later account's due date it is charged too.
      t.clock.set(new Date(Date.parse(lateDue) + DAY));
      results = await charge();
      assert.ok(results.some((r) => r.accountId === late.accountId && r.charged));
      assert.equal((await account(late.key)).balance, 71);
    } finally {
      t.clock.set(start);
    }
  });
});
