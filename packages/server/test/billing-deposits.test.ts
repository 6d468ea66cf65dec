import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, describe, test } from 'node:test';
import { HDKey } from '@scure/bip32';
import { sql } from 'kysely';
import { bytesToHex, getAddress } from 'viem';
import type { ChainConfig } from '../src/chain/config.js';
import { writeJobState } from '../src/data/job-state.js';
import { confirmDeposit, createDeposit, DEPOSIT_TTL_MS, MAX_OPEN_DEPOSITS, runDepositExpiry } from '../src/services/billing-deposits.js';
import { CHAIN_CURSOR, EXPIRED_WATCH_MS, pollChainDeposits } from '../src/services/billing-chain.js';
import { ledgerProblems } from './billing-support.js';
import { startFakeChain } from './fake-chain.js';
import { backends, call, makeTestApp, migrateOver, newAccount } from './helpers.js';

// docs/billing.md, "Deposits": pending deposits are bounded. Found: one free account asked for
// 1,200 deposits in 10 s, and the chain watcher looked for a payment to every pending one, forever:
// at scale, the RPC provider's rate limit, and everyone's credits stopped. Now an account has at
// most 5 open at once, a deposit expires 24 hours after it was made, and an expired one is looked
// for one more hour, so the watcher's requests do not grow with abandoned deposits.

const LIMIT = { error: 'Maximum 5 open deposits: pay one, or ask again once one has expired (24 hours after it was made)' };
const usdc = (dollars: number) => BigInt(dollars) * 10n ** 6n;

for (const backend of await backends()) {
  describe(`open deposits are bounded (${backend})`, async () => {
    const chain = await startFakeChain();
    after(() => chain.close());
    const t = await makeTestApp(backend);
    const config: ChainConfig = {
      rpcUrl: chain.rpcUrl,
      xpub: HDKey.fromMasterSeed(randomBytes(32)).derive("m/44'/60'/0'/0").publicExtendedKey,
      token: chain.token,
      symbol: 'USDC',
      decimals: 6,
      network: 'Testnet',
      confirmations: 2,
      pollMs: 1000,
    };
    t.ctx.billing = { chain: config };
    const rows = async (accountId: string) =>
      (await sql<{ id: string; status: string }>`select id, status from transactions where account_id = ${accountId} and kind = 'deposit'`.execute(t.ctx.db)).rows;

    test('200 deposits asked for at once: 5 are made, the others answer 409 with the limit, nothing else stored', async () => {
      const { key, accountId } = await newAccount(t.app, 'pro', 0); // an API key to script with
      const answers = await Promise.all(Array.from({ length: 200 }, () => call(t.app, 'POST', '/api/billing/deposits', { key, body: { amount: 10 } })));
      assert.equal(answers.filter((r) => r.status === 201).length, MAX_OPEN_DEPOSITS);
      for (const r of answers.filter((r) => r.status !== 201)) assert.deepEqual([r.status, r.body], [409, LIMIT]);
      assert.equal((await rows(accountId)).length, MAX_OPEN_DEPOSITS);
      // Another account is not held back by this one.
      const other = await newAccount(t.app, 'pro', 0);
      assert.equal((await call(t.app, 'POST', '/api/billing/deposits', { key: other.key, body: { amount: 10 } })).status, 201);
    });

    test('a deposit is open 24 hours: then expired (no longer counted), and a new one can be asked for; a paid one frees its place at once', async () => {
      const { key, accountId } = await newAccount(t.app, 'pro', 0);
      const made = [];
      for (let i = 0; i < MAX_OPEN_DEPOSITS; i++) made.push((await call(t.app, 'POST', '/api/billing/deposits', { key, body: { amount: 1 } })).body);
      assert.equal(made[0].expiresAt, new Date(t.clock.now().getTime() + DEPOSIT_TTL_MS).toISOString());
      assert.equal((await call(t.app, 'POST', '/api/billing/deposits', { key, body: { amount: 1 } })).status, 409);
      // Paid (here by the operator, off-chain): no longer open.
      t.ctx.billing = {};
      const offChain = await createDeposit(t.ctx, (await newAccount(t.app, 'pro', 0)).accountId, 100);
      t.ctx.billing = { chain: config };
      const start = t.clock.now();
      try {
        t.clock.advance(DEPOSIT_TTL_MS - 1);
        assert.equal((await call(t.app, 'POST', '/api/billing/deposits', { key, body: { amount: 1 } })).status, 409, 'still open a millisecond before');
        await runDepositExpiry(t.ctx);
        assert.ok((await rows(accountId)).every((r) => r.status === 'pending'));
        t.clock.advance(1);
        assert.equal((await call(t.app, 'POST', '/api/billing/deposits', { key, body: { amount: 1 } })).status, 201, 'expired ones are not counted, before the job runs too');
        assert.ok((await runDepositExpiry(t.ctx)) >= MAX_OPEN_DEPOSITS);
        const listed = (await call(t.app, 'GET', '/api/billing/transactions', { key })).body as { id: string; status: string }[];
        assert.deepEqual(
          listed.filter((x) => made.some((m) => m.id === x.id)).map((x) => x.status),
          Array(MAX_OPEN_DEPOSITS).fill('expired'),
        );
        // An off-chain deposit paid late (a processor's webhook arriving after a day) is still credited.
        const late = await confirmDeposit(t.ctx, offChain.id, { txHash: `pay_${randomUUID()}` });
        assert.ok('deposit' in late && late.deposit.status === 'confirmed' && late.deposit.delta === 1);
      } finally {
        t.clock.set(start);
      }
    });

    test("the watcher's requests per look do not grow with abandoned deposits; a late payment is credited within the hour after expiry, later by the operator", async () => {
      await writeJobState(t.ctx.db, CHAIN_CURSOR, String(chain.head() + 1));
      const start = t.clock.now();
      /** One look at 5 new blocks: the requests it made, by method. */
      const look = async () => {
        chain.mine(5);
        chain.calls.clear();
        await pollChainDeposits(t.ctx, config);
        return Object.fromEntries(chain.calls);
      };
      try {
        const { accountId } = await newAccount(t.app, 'free', 0);
        await look(); // the chain id, asked once
        const baseline = await look();
        assert.deepEqual(baseline, { eth_blockNumber: 1, eth_getLogs: 1 });
        // 1,200 deposits abandoned (what one account can leave in 240 days), written at once: made
        // an expiry and an hour ago or earlier, still `pending` (the expiry job has not run).
        const abandoned = Array.from({ length: 1200 }, () => getAddress(bytesToHex(randomBytes(20))));
        const made = new Date(t.clock.now().getTime() - DEPOSIT_TTL_MS - EXPIRED_WATCH_MS);
        await t.ctx.db
          .insertInto('transactions')
          .values(
            abandoned.map((address) => ({
              id: randomUUID(),
              account_id: accountId,
              kind: 'deposit',
              amount_cents: 100,
              status: 'pending',
              address,
              network: 'Testnet',
              token: 'USDC',
              created_at: made,
              expires_at: new Date(made.getTime() + DEPOSIT_TTL_MS),
            })),
          )
          .execute();
        const open = await createDeposit(t.ctx, accountId, 100);
        assert.deepEqual(await look(), baseline, 'as many requests as with none abandoned (1,200 addresses asked for would take 3 getLogs)');
        // A payment to the open one is found as before.
        chain.send([{ to: open.address as `0x${string}`, amount: usdc(100) }]);
        assert.deepEqual(await look(), baseline);
        assert.equal((await rows(accountId)).find((r) => r.id === open.id)?.status, 'confirmed');

        // Expired half an hour ago (paid at the last minute, deep enough later): still credited.
        const lastMinute = await createDeposit(t.ctx, accountId, 100);
        t.clock.advance(DEPOSIT_TTL_MS + EXPIRED_WATCH_MS / 2);
        await runDepositExpiry(t.ctx);
        chain.send([{ to: lastMinute.address as `0x${string}`, amount: usdc(100) }]);
        await look();
        assert.equal((await rows(accountId)).find((r) => r.id === lastMinute.id)?.status, 'confirmed');
        // Expired long ago: not looked for; the operator, told by the payer, confirms it by its transaction.
        const hash = chain.send([{ to: abandoned[7] as `0x${string}`, amount: usdc(3) }]);
        await look();
        const before = await rows(accountId);
        assert.equal(before.filter((r) => r.status === 'confirmed').length, 2, 'the watcher did not credit it');
        const abandonedId = (await sql<{ id: string }>`select id from transactions where address = ${abandoned[7]!}`.execute(t.ctx.db)).rows[0]!.id;
        const r = await call(t.app, 'POST', `/admin/deposits/${abandonedId}/confirm`, { admin: true, body: { txHash: hash } });
        assert.equal(r.status, 200, JSON.stringify(r.body));
        assert.deepEqual([r.body.deposit.status, r.body.deposit.delta, r.body.account.balance], ['confirmed', 3, 203]);
        assert.deepEqual(await ledgerProblems(t, [accountId]), []);
      } finally {
        t.clock.set(start);
      }
    });

    test('migration 0014: hashes credited before are split into hash and log index under the chain "legacy"; pending deposits get 24 hours', async () => {
      const account = randomUUID();
      const hash = `0x${'ab'.repeat(32)}`;
      await migrateOver(
        backend,
        '0013_compressed_bodies',
        async (db) => {
          await db
            .insertInto('accounts')
            .values({ id: account, email: `${account}@example.com`, plan: 'pro', bot_secret: 'x', next_charge_at: new Date() })
            .execute();
          const row = { account_id: account, kind: 'deposit', amount_cents: 100, delta_cents: 100, status: 'confirmed', created_at: new Date(), confirmed_at: new Date(), network: 'Base' };
          await db
            .insertInto('transactions')
            .values({ ...row, id: randomUUID(), tx_hash: hash, address: '0x01' })
            .execute();
          await db
            .insertInto('transactions')
            .values({ ...row, id: randomUUID(), tx_hash: `${hash}:4`, address: '0x02' })
            .execute();
          await db
            .insertInto('transactions')
            .values({ ...row, id: randomUUID(), tx_hash: 'pi_123', network: null })
            .execute();
          await db
            .insertInto('transactions')
            .values({ ...row, id: randomUUID(), status: 'pending', delta_cents: 0, confirmed_at: null, network: null })
            .execute();
        },
        async (db) => {
          const got = await db.selectFrom('transactions').select(['chain', 'tx_hash', 'log_index', 'status', 'expires_at']).where('account_id', '=', account).execute();
          assert.deepEqual(
            got.map((r) => JSON.stringify([r.chain, r.tx_hash, r.log_index, r.status])).sort(),
            [
              ['legacy', hash, -1, 'confirmed'],
              ['legacy', hash, 4, 'confirmed'],
              [null, 'pi_123', null, 'confirmed'],
              [null, null, null, 'pending'],
            ]
              .map((r) => JSON.stringify(r))
              .sort(),
          );
          const pending = got.find((r) => r.status === 'pending')!;
          assert.ok(new Date(pending.expires_at).getTime() > Date.now() + DEPOSIT_TTL_MS - 3_600_000, 'open for 24 hours from the upgrade');
        },
      );
    });
  });
}
