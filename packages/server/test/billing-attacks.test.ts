import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, describe, test } from 'node:test';
import { HDKey } from '@scure/bip32';
import { sql } from 'kysely';
import { writeJobState } from '../src/data/job-state.js';
import { proRataCents } from '../src/services/billing-charge.js';
import { paymentSignature } from '../src/services/billing-deposits.js';
import { CHAIN_CURSOR, pollChainDeposits } from '../src/services/billing-chain.js';
import { ledgerProblems } from './billing-support.js';
import { startFakeChain } from './fake-chain.js';
import { backends, call, makeTestApp, newAccount } from './helpers.js';

// An attacker's and auditor's pass over the money paths (docs/billing.md): what a scripted
// attacker tried, kept as tests, whether it found something (and was fixed) or not.

const SECRET = 'whsec_attack_0123456789abcdef';
const HEADER = 'x-rampart-payment-signature';
const DAY = 86_400_000;

describe('pro rata: no sequence of plan changes makes money', () => {
  const next = new Date('2026-03-01T00:00:00Z');
  const prices = { free: 0, pro: 2900, enterprise: 29900 } as const;
  type P = keyof typeof prices;
  /** What the account pays (negative: is credited) moving along `path` at `now`. */
  const pays = (path: P[], nows: Date[]) => path.slice(1).reduce((sum, to, i) => sum + proRataCents(prices[path[i]!], prices[to], next, nows[i]!), 0);

  test('a cycle through three plans at one instant never credits more than it charged', () => {
    // Found: rounded half away from zero, free -> enterprise -> pro -> free paid 1 cent back
    // whenever both smaller amounts rounded up (about 1 instant in 8), as often as it was scripted.
    for (let s = 0; s < 28 * 86_400; s += 97) {
      const now = new Date(next.getTime() - s * 1000);
      for (const path of [
        ['free', 'enterprise', 'pro', 'free'],
        ['free', 'pro', 'enterprise', 'free'],
        ['pro', 'free', 'enterprise', 'pro'],
        ['enterprise', 'pro', 'free', 'enterprise'],
      ] as P[][]) {
        const net = pays(path, [now, now, now]);
        assert.ok(net >= 0, `${path.join(' -> ')} ${s} s before the charge pays ${net}`);
      }
    }
  });

  test('a round trip over a rounding boundary never credits more than it charged', () => {
    // Found: a downgrade just before round(27,000 x remaining) ticks down and the upgrade back just
    // after it gained a cent every ~96 s: the whole price difference in a month, for seconds on Pro.
    for (let s = 1; s < 28 * 86_400; s += 13) {
      const before = new Date(next.getTime() - s * 1000 - 1000);
      const after = new Date(next.getTime() - s * 1000);
      assert.ok(pays(['enterprise', 'pro', 'enterprise'], [before, after]) >= 0, `down/up around ${s} s`);
      assert.ok(pays(['pro', 'enterprise', 'pro'], [before, after]) >= 0, `up/down around ${s} s`);
      assert.ok(pays(['pro', 'free', 'pro'], [before, after]) >= 0, `free and back around ${s} s`);
    }
  });

  test('up then down at one instant costs at most a cent, and nothing when exact; the very last millisecond is free', () => {
    for (let s = 1; s < 28 * 86_400; s += 3607) {
      const now = new Date(next.getTime() - s * 1000);
      const net = pays(['pro', 'enterprise', 'pro'], [now, now]);
      assert.ok(net === 0 || net === 1, `${net}`);
    }
    assert.equal(pays(['pro', 'enterprise', 'pro'], [new Date(next.getTime() - 7 * DAY), new Date(next.getTime() - 7 * DAY)]), 0, '27000 x 7/28 is exact');
    assert.equal(proRataCents(2900, 29900, next, new Date(next.getTime() - 1)), 1, 'a charge of a fraction of a cent is a cent');
    assert.equal(proRataCents(29900, 2900, next, new Date(next.getTime() - 1)), 0, 'a credit of a fraction of a cent is nothing');
  });
});

for (const backend of await backends()) {
  describe(`money paths under attack (${backend})`, async () => {
    const t = await makeTestApp(backend);
    const xpub = HDKey.fromMasterSeed(randomBytes(32)).derive("m/44'/60'/0'/0").publicExtendedKey;
    const fake = await startFakeChain();
    after(() => fake.close());
    const chain = { rpcUrl: fake.rpcUrl, xpub, token: fake.token, symbol: 'USDC', decimals: 6, network: 'Testnet', confirmations: 2, pollMs: 1000 };
    const usdc = (dollars: number) => BigInt(dollars) * 10n ** 6n;
    /** The watcher reads from the next block on. */
    const watchFromHere = () => writeJobState(t.ctx.db, CHAIN_CURSOR, String(fake.head() + 1));
    t.ctx.billing = { webhookSecret: SECRET };
    const nowSeconds = () => Math.floor(t.clock.now().getTime() / 1000);
    const signed = (raw: string, ts = nowSeconds()) => `t=${ts},v1=${paymentSignature(SECRET, ts, raw)}`;
    const webhook = (raw: string | undefined, signature: string | null = signed(raw ?? ''), contentType: string | null = 'application/json') =>
      call(t.app, 'POST', '/api/billing/webhook', {
        ...(raw !== undefined ? { rawBody: raw } : {}),
        headers: { ...(contentType ? { 'content-type': contentType } : {}), ...(signature !== null ? { [HEADER]: signature } : {}) },
      });
    const balance = async (key: string) => (await call(t.app, 'GET', '/api/account', { key })).body.balance as number;
    const deposit = async (key: string, amount: number) => {
      const r = await call(t.app, 'POST', '/api/billing/deposits', { key, body: { amount } });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      return r.body as { id: string; address: string | null };
    };
    const withChain = async <T>(fn: () => Promise<T>): Promise<T> => {
      t.ctx.billing = { webhookSecret: SECRET, chain };
      try {
        return await fn();
      } finally {
        t.ctx.billing = { webhookSecret: SECRET };
      }
    };
    const event = (depositId: string, extra: Record<string, unknown> = {}) => JSON.stringify({ id: `evt_${randomUUID()}`, type: 'deposit.confirmed', depositId, ...extra });

    test('an on-chain deposit confirmed by the operator, then its transfer seen on-chain: credited once', async () => {
      // Found: the operator's confirmation without a txHash left nothing for the watcher to match,
      // so the very payment the operator had seen was credited again as "another payment".
      const { key, accountId } = await newAccount(t.app, 'pro', 0);
      const d = await withChain(() => deposit(key, 40));
      assert.ok(d.address);
      await watchFromHere();
      const bare = await call(t.app, 'POST', `/admin/deposits/${d.id}/confirm`, { admin: true, body: {} });
      assert.equal(bare.status, 400, JSON.stringify(bare.body));
      assert.match(bare.body.error, /^txHash: /);
      const viaHook = await withChain(() => webhook(event(d.id)));
      assert.equal(viaHook.status, 400, JSON.stringify(viaHook.body));
      const hash = fake.send([{ to: d.address as `0x${string}`, amount: usdc(40) }]);
      fake.mine(1);
      // Given in upper case (as some explorers show it), matched to the chain's lower case.
      const ok = await withChain(() => call(t.app, 'POST', `/admin/deposits/${d.id}/confirm`, { admin: true, body: { txHash: hash.toUpperCase().replace('0X', '0x') } }));
      assert.equal(ok.status, 200, JSON.stringify(ok.body));
      assert.equal(ok.body.deposit.txHash, hash);
      assert.equal(ok.body.deposit.logIndex, 0);
      assert.deepEqual(await pollChainDeposits(t.ctx, chain), ['duplicate']);
      assert.equal(await balance(key), 40);
      // A second payment to the address, another transfer, is still credited.
      fake.send([{ to: d.address as `0x${string}`, amount: usdc(5) }]);
      fake.mine(1);
      assert.deepEqual(await pollChainDeposits(t.ctx, chain), ['credited']);
      assert.equal(await balance(key), 45);
      assert.deepEqual(await ledgerProblems(t, [accountId]), []);
    });

    test('one on-chain payment confirmed at once by the operator, webhooks and two watcher looks: credited once', async () => {
      const { key, accountId } = await newAccount(t.app, 'pro', 0);
      const d = await withChain(() => deposit(key, 30));
      await watchFromHere();
      const hash = fake.send([{ to: d.address as `0x${string}`, amount: usdc(30) }]);
      fake.mine(1);
      const results = await withChain(() =>
        Promise.all([
          call(t.app, 'POST', `/admin/deposits/${d.id}/confirm`, { admin: true, body: { txHash: hash } }),
          webhook(event(d.id, { txHash: hash })),
          webhook(event(d.id, { txHash: hash, logIndex: 0 })),
          pollChainDeposits(t.ctx, chain),
          pollChainDeposits(t.ctx, chain),
        ]),
      );
      const credited = results.filter((r) => (Array.isArray(r) ? r.includes('credited') : r.status === 200));
      assert.equal(credited.length, 1, JSON.stringify(results));
      for (const r of results) if (!Array.isArray(r) && r.status !== 200) assert.deepEqual([r.status, r.body], [409, { error: 'txHash: this transaction was already credited' }]);
      assert.equal(await balance(key), 30);
      assert.deepEqual(await ledgerProblems(t, [accountId]), []);
    });

    test('an off-chain confirmation names a transfer the chain shows, deep enough, to this deposit: otherwise 400, 409 or 503 and nothing credited', async () => {
      const { key, accountId } = await newAccount(t.app, 'pro', 0);
      const [a, b] = [await withChain(() => deposit(key, 20)), await withChain(() => deposit(key, 50))];
      const offChain = await deposit(key, 5);
      const confirm = (id: string, body: Record<string, unknown>) => withChain(() => call(t.app, 'POST', `/admin/deposits/${id}/confirm`, { admin: true, body }));
      const multisend = fake.send([
        { to: a.address as `0x${string}`, amount: usdc(20) },
        { to: b.address as `0x${string}`, amount: usdc(50) },
      ]);
      // One block deep, two needed: a reorganisation could still drop it.
      let r = await confirm(b.id, { txHash: multisend });
      assert.deepEqual([r.status, r.body], [409, { error: 'txHash: the transaction is 1 block(s) deep and counts at 2: confirm it then' }]);
      fake.mine(1);
      r = await confirm(b.id, { txHash: `0x${'12'.repeat(32)}` });
      assert.deepEqual([r.status, r.body], [400, { error: 'txHash: no such transaction on Testnet (or not mined yet)' }]);
      r = await confirm(b.id, { txHash: 'pi_123' });
      assert.equal(r.status, 400);
      assert.match(r.body.error, /^txHash: must be the hash/);
      r = await confirm(b.id, { txHash: multisend, logIndex: 0 });
      assert.deepEqual([r.status, r.body], [400, { error: `logIndex: transfer 0 of that transaction pays ${a.address}, not this deposit's address ${b.address}` }]);
      const unrelated = fake.send([{ to: a.address as `0x${string}`, amount: usdc(1) }]);
      fake.mine(1);
      r = await confirm(b.id, { txHash: unrelated });
      assert.deepEqual([r.status, r.body], [400, { error: `txHash: that transaction pays no USDC to this deposit's address ${b.address}` }]);
      const withAmount = await withChain(() => webhook(event(b.id, { txHash: multisend, amount: 500 })));
      assert.equal(withAmount.status, 400);
      assert.match(withAmount.body.error, /^amount: /);
      r = await withChain(() => call(t.app, 'POST', `/admin/deposits/${offChain.id}/confirm`, { admin: true, body: { txHash: 'pay_1', logIndex: 0 } }));
      assert.deepEqual([r.status, r.body.error], [400, 'logIndex: is only for on-chain deposits (those with an address)']);
      t.ctx.billing = { webhookSecret: SECRET, chain: { ...chain, rpcUrl: 'http://127.0.0.1:9' } };
      try {
        r = await call(t.app, 'POST', `/admin/deposits/${b.id}/confirm`, { admin: true, body: { txHash: multisend } });
        assert.deepEqual([r.status, r.body], [503, { error: 'The payment network cannot be reached right now, try again' }]);
      } finally {
        t.ctx.billing = { webhookSecret: SECRET };
      }
      assert.equal(await balance(key), 0, 'nothing credited by any of these');
      // The multisend, confirmed for each deposit: each its own transfer, once.
      r = await confirm(b.id, { txHash: multisend });
      assert.deepEqual([r.status, r.body.deposit.id, r.body.deposit.delta, r.body.deposit.logIndex], [200, b.id, 50, 1]);
      r = await confirm(a.id, { txHash: multisend, logIndex: 0 });
      assert.deepEqual([r.status, r.body.deposit.id, r.body.deposit.delta, r.body.deposit.logIndex], [200, a.id, 20, 0]);
      for (const id of [a.id, b.id]) assert.equal((await confirm(id, { txHash: multisend })).status, 409);
      assert.equal(await balance(key), 70);
      assert.deepEqual(await ledgerProblems(t, [accountId]), []);
    });

    test('a signed POST without a body: 400, not a 500', async () => {
      // Found: the signature was computed over `undefined` and threw.
      const r = await webhook(undefined, signed(''), null);
      assert.equal(r.status, 400, JSON.stringify(r.body));
      const unsigned = await webhook(undefined, `t=${nowSeconds()},v1=${'0'.repeat(64)}`, null);
      assert.equal(unsigned.status, 401, JSON.stringify(unsigned.body));
    });

    test('the signature: the raw bytes, both sides of the time window, header variants', async () => {
      const { key } = await newAccount(t.app, 'pro', 0);
      const d = await deposit(key, 5);
      const raw = event(d.id);
      // Re-serialized (spaces), the signature over the compact body does not match.
      const spaced = JSON.stringify(JSON.parse(raw), null, 1);
      assert.equal((await webhook(spaced, signed(raw))).status, 401);
      // Future and past timestamps beyond 5 minutes, either way.
      assert.equal((await webhook(raw, signed(raw, nowSeconds() + 301))).status, 401);
      assert.equal((await webhook(raw, signed(raw, nowSeconds() - 301))).status, 401);
      // Malformed headers.
      for (const h of ['', 'v1=abc', `t=${nowSeconds()}`, `t=abc,v1=${'a'.repeat(64)}`, `t=${nowSeconds()},v1=${'a'.repeat(63)}`]) {
        assert.equal((await webhook(raw, h)).status, h === '' ? 400 : 400, h);
      }
      // A wrong v1 repeated, another secret's: 401; nothing credited.
      const sig = paymentSignature(SECRET, nowSeconds(), raw);
      assert.equal((await webhook(raw, `t=${nowSeconds()},v1=${'0'.repeat(64)},v1=${paymentSignature('other', nowSeconds(), raw)}`)).status, 401);
      // A t= repeated: the last one is what is checked, and the signature covers it.
      assert.equal((await webhook(raw, `t=${nowSeconds() - 1000},v1=${sig},t=${nowSeconds() - 1000}`)).status, 401);
      assert.equal(await balance(key), 0);
      // Spaces, upper-case hex and one good v1 among bad ones: accepted, once.
      const ok = await webhook(raw, ` t=${nowSeconds()} , v1=${'f'.repeat(64)} , v1=${sig.toUpperCase()} `);
      assert.equal(ok.status, 200, JSON.stringify(ok.body));
      assert.equal(ok.body.applied, true);
      assert.equal(await balance(key), 5);
    });

    test('bodies: not JSON, __proto__, other content types, too large; amounts of every wrong kind', async () => {
      const { key } = await newAccount(t.app, 'pro', 0);
      const d = await deposit(key, 5);
      assert.equal((await webhook('not json')).status, 400);
      const proto = `{"id":"evt_${randomUUID()}","type":"deposit.confirmed","depositId":"${d.id}","__proto__":{"amount":1000000}}`;
      assert.equal((await webhook(proto)).status, 400);
      assert.equal((await webhook(event(d.id), undefined, 'text/plain')).status, 415);
      const big = JSON.stringify({ id: 'evt_big', type: 'deposit.confirmed', depositId: d.id, pad: 'x'.repeat(1024 * 1024) });
      assert.equal((await webhook(big)).status, 413);
      for (const amount of [-5, 0, 0.001, 5.005, '5', 1e16, 2 ** 53 + 1, null, true]) {
        const r = await webhook(event(d.id, { amount }));
        assert.equal(r.status, 400, `${String(amount)}: ${JSON.stringify(r.body)}`);
      }
      for (const amount of [-5, 0, 0.001, 1_000_000.01, '5']) {
        assert.equal((await call(t.app, 'POST', '/api/billing/deposits', { key, body: { amount } })).status, 400, String(amount));
      }
      assert.equal(await balance(key), 0);
    });

    test("replays: one event id with another body, two event ids for one deposit, another account's deposit", async () => {
      const a = await newAccount(t.app, 'pro', 0);
      const b = await newAccount(t.app, 'pro', 0);
      const da = await deposit(a.key, 10);
      const db = await deposit(b.key, 20);
      const id = `evt_${randomUUID()}`;
      const first = await webhook(JSON.stringify({ id, type: 'deposit.confirmed', depositId: da.id, amount: 10 }));
      assert.equal(first.status, 200);
      // The same id, another body (another deposit, another amount): a duplicate, nothing credited.
      const same = await webhook(JSON.stringify({ id, type: 'deposit.confirmed', depositId: db.id, amount: 999 }));
      assert.deepEqual(same.body, { received: true, applied: false, duplicate: true });
      const again = await webhook(JSON.stringify({ id, type: 'deposit.confirmed', depositId: da.id, amount: 999 }));
      assert.deepEqual(again.body, { received: true, applied: false, duplicate: true });
      // Another event id for the deposit already confirmed: 409, not recorded.
      assert.equal((await webhook(event(da.id))).status, 409);
      // B's deposit named in an event credits B, never A.
      const forB = await webhook(event(db.id, { amount: 15 }));
      assert.equal(forB.status, 200);
      assert.equal(forB.body.account.id, b.accountId);
      assert.deepEqual([await balance(a.key), await balance(b.key)], [10, 15]);
      assert.deepEqual(await ledgerProblems(t, [a.accountId, b.accountId]), []);
    });

    test("paging: another account's row as the cursor, or a cursor that is not a UUID: 400", async () => {
      const a = await newAccount(t.app, 'pro', 10);
      const b = await newAccount(t.app, 'pro', 10);
      const [bRow] = (await call(t.app, 'GET', '/api/billing/transactions', { key: b.key })).body;
      for (const before of [bRow.id, 'x', `${bRow.id}' or 1=1`, '', bRow.id.toUpperCase()]) {
        const r = await call(t.app, 'GET', `/api/billing/transactions?before=${encodeURIComponent(before)}`, { key: a.key });
        assert.equal(r.status, 400, `${before}: ${JSON.stringify(r.body)}`);
      }
    });

    test('an operator adjustment that would go below 0 changes nothing; the ledger stays whole', async () => {
      const { accountId } = await newAccount(t.app, 'pro', 10);
      const r = await call(t.app, 'POST', `/admin/accounts/${accountId}/adjustments`, { admin: true, body: { amount: -10.01 } });
      assert.equal(r.status, 409);
      for (const amount of [0, 0.001, '5', 1e9]) {
        assert.equal((await call(t.app, 'POST', `/admin/accounts/${accountId}/adjustments`, { admin: true, body: { amount } })).status, 400, String(amount));
      }
      const rows = (await sql<{ n: number }>`select count(*)::int as n from transactions where account_id = ${accountId}`.execute(t.ctx.db)).rows[0]!.n;
      assert.equal(rows, 1);
      assert.deepEqual(await ledgerProblems(t, [accountId]), []);
    });
  });
}
