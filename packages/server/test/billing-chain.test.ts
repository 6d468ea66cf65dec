import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { after, describe, test } from 'node:test';
import { HDKey } from '@scure/bip32';
import { depositAddress } from '../src/chain/addresses.js';
import type { ChainConfig } from '../src/chain/config.js';
import type { ConfirmedTransfer } from '../src/chain/watcher.js';
import { readJobState, writeJobState } from '../src/data/job-state.js';
import { startServer, type RunningServer } from '../src/serve.js';
import { CHAIN_CURSOR, chainCredits, pollChainDeposits } from '../src/services/billing-chain.js';
import { startEvmChain } from '../../../test/support/evm-chain.js';
import { freePort, waitFor } from '../../../test/support/processes.js';
import { ledgerProblems } from './billing-support.js';
import { ADMIN_TOKEN, call, makeTestApp, newAccount } from './helpers.js';

// docs/billing.md, "On-chain deposits" and "Confirming deposits": a real local chain (ganache)
// with an ERC-20; the control plane hands out an address per deposit, its chain-watcher job finds
// the transfer once deep enough and confirms the deposit (a frozen account is active again), once
// per transaction hash, across polls and restarts.

const hash = (n: number) => `0x${n.toString(16).padStart(64, '0')}` as `0x${string}`;
const addr = (n: number) => `0x${n.toString(16).padStart(40, '0')}` as `0x${string}`;
const transfer = (to: number, amount: bigint, tx: number, logIndex: number): ConfirmedTransfer => ({
  from: addr(999),
  to: addr(to),
  amount,
  txHash: hash(tx),
  logIndex,
  blockNumber: 1n,
});

test('transfers become credits: one per transfer, keyed by chain, transaction hash and log index; amounts in cents rounded down', () => {
  const unit = 10n ** 6n;
  const key = (address: number, tx: number, logIndex: number, amountCents: number) => ({ chain: 'eip155:8453', txHash: hash(tx), logIndex, address: addr(address), amountCents });
  assert.deepEqual(
    chainCredits(
      [
        transfer(1, 5n * unit, 1, 0),
        transfer(2, 7n * unit, 1, 1), // a multisend: the same transaction pays another deposit address
        transfer(1, 2n * unit + 9_999n, 1, 3), // and the first one again
        transfer(3, 1n * unit, 2, 0),
      ],
      'eip155:8453',
      6,
    ),
    [key(1, 1, 0, 500), key(2, 1, 1, 700), key(1, 1, 3, 200), key(3, 2, 0, 100)],
  );
});

test('a deposit while the RPC that names the network does not answer: 503, nothing stored', async () => {
  const t = await makeTestApp();
  const xpub = HDKey.fromMasterSeed(randomBytes(32)).derive("m/44'/60'/0'/0").publicExtendedKey;
  const rpcUrl = `http://127.0.0.1:${await freePort()}`;
  t.ctx.billing = { chain: { rpcUrl, xpub, token: addr(1), symbol: 'USDC', decimals: 6, network: undefined, confirmations: 1, pollMs: 1000 } };
  const { key } = await newAccount(t.app, 'pro', 0);
  const r = await call(t.app, 'POST', '/api/billing/deposits', { key, body: { amount: 5 } });
  assert.equal(r.status, 503);
  assert.deepEqual(r.body, { error: 'The payment network cannot be reached right now, try again' });
  assert.deepEqual((await call(t.app, 'GET', '/api/billing/transactions', { key })).body, []);
  // With the network named in the settings, no RPC is needed to hand out an address.
  t.ctx.billing = { chain: { ...t.ctx.billing.chain!, network: 'Base' } };
  const ok = await call(t.app, 'POST', '/api/billing/deposits', { key, body: { amount: 5 } });
  assert.equal(ok.status, 201);
  assert.equal(ok.body.network, 'Base');
  assert.equal(ok.body.address, depositAddress(xpub, 0));
});

describe('deposits paid on a local chain', async () => {
  const chain = await startEvmChain();
  const unit = 10n ** BigInt(chain.decimals);
  const xpub = HDKey.fromMasterSeed(randomBytes(32)).derive("m/44'/60'/0'/0").publicExtendedKey;
  const config: ChainConfig = {
    rpcUrl: chain.rpcUrl,
    xpub,
    token: chain.token,
    symbol: 'TUSD',
    decimals: chain.decimals,
    network: undefined,
    confirmations: 3,
    pollMs: 100,
  };
  const dataDir = mkdtempSync(join(tmpdir(), 'rampart-billing-chain-'));
  const start = (pollMs = config.pollMs) => startServer({ port: 0, host: '127.0.0.1', dataDir, adminToken: ADMIN_TOKEN, logger: false, chain: { ...config, pollMs }, billingIntervalSeconds: 3600 });
  let server: RunningServer = await start();
  after(async () => {
    await server.close();
    await chain.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const account = async (key: string) => (await call(server.app, 'GET', '/api/account', { key })).body as { state: string; balance: number };
  const transactions = async (key: string) => (await call(server.app, 'GET', '/api/billing/transactions', { key })).body as Record<string, any>[];
  /** The watcher has read every block up to the newest deep enough. */
  const caughtUp = async () => {
    const safeHead = (await chain.blockNumber()) - BigInt(config.confirmations) + 1n;
    await waitFor(async () => BigInt((await readJobState(server.ctx.db, CHAIN_CURSOR)) ?? '0') > safeHead, 'the watcher to read the newest blocks', 20_000, 20);
  };

  let key = '';
  let accountId = '';
  let depositId = '';
  let address = '';
  let paid = '';

  test('a deposit gets its own address from the xpub, the network, the token and its contract', async () => {
    ({ key, accountId } = await newAccount(server.app, 'pro', 10));
    await call(server.app, 'POST', '/admin/billing/charge', { admin: true, body: { accountId } });
    assert.equal((await account(key)).state, 'frozen');
    const r = await call(server.app, 'POST', '/api/billing/deposits', { key, body: { amount: 50 } });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.equal(r.body.status, 'pending');
    assert.equal(r.body.amount, 50);
    assert.equal(r.body.network, 'EVM chain 1337');
    assert.equal(r.body.token, 'TUSD');
    assert.equal(r.body.tokenContract, chain.token);
    assert.equal(r.body.address, depositAddress(xpub, 0), 'the first value of deposit_address_index');
    assert.equal(r.body.description, `Pay 50.00 TUSD on EVM chain 1337 to ${r.body.address}`);
    ({ id: depositId, address } = r.body);
    const second = await call(server.app, 'POST', '/api/billing/deposits', { key, body: { amount: 1 } });
    assert.equal(second.body.address, depositAddress(xpub, 1), 'unique per deposit');
  });

  test('the transfer confirms the deposit once it is 3 blocks deep; the frozen account is active again', async () => {
    paid = await chain.transfer(address as `0x${string}`, 50n * unit);
    // Its block is 1 deep: nothing yet, however many polls run.
    await caughtUp();
    assert.equal((await account(key)).state, 'frozen');
    assert.equal((await transactions(key)).find((x) => x.id === depositId)!.status, 'pending');
    await chain.mine(2);
    await waitFor(async () => (await account(key)).state === 'active', 'the account to be active');
    assert.deepEqual(await account(key).then((a) => a.balance), 10 + 50 - 29);
    const dep = (await transactions(key)).find((x) => x.id === depositId)!;
    assert.equal(dep.status, 'confirmed');
    assert.equal(dep.txHash, paid);
    assert.equal(dep.delta, 50);
    const kinds = (await call(server.app, 'GET', '/api/notifications', { key })).body.map((n: { kind: string }) => n.kind);
    assert.ok(kinds.includes('deposit_confirmed') && kinds.includes('account_active'), kinds.join(', '));
    assert.equal((await call(server.app, 'POST', '/api/servers', { key, body: { name: 'after payment' } })).status, 201);
  });

  test('more polls, a restart, and the blocks read again from the start credit nothing again', async () => {
    await chain.mine(5);
    await caughtUp();
    const stopped = BigInt((await readJobState(server.ctx.db, CHAIN_CURSOR))!); // no new blocks: it stays
    await server.close();
    await chain.mine(2);
    // Restarted with one look at start-up only, so the look below is the only other one. That
    // first look goes on from where reading stopped, over the two new blocks.
    server = await start(3_600_000);
    await waitFor(async () => (await readJobState(server.ctx.db, CHAIN_CURSOR)) === String(stopped + 2n), 'the first look after the restart');
    assert.equal((await account(key)).balance, 31);
    // A test-only write: the next look reads every block again from the start of the chain.
    await writeJobState(server.ctx.db, CHAIN_CURSOR, '0');
    assert.deepEqual(await pollChainDeposits(server.ctx, config), ['duplicate']);
    assert.equal((await account(key)).balance, 31);
    assert.equal((await transactions(key)).filter((x) => x.txHash === paid).length, 1);
    assert.deepEqual(await ledgerProblems(server), []);
    await server.close();
    server = await start();
  });

  test('a second payment to the same address is credited as a deposit of its own', async () => {
    const again = await chain.transfer(address as `0x${string}`, 3n * unit);
    await chain.mine(2);
    await waitFor(async () => (await account(key)).balance === 34, 'the second payment to be credited');
    const row = (await transactions(key)).find((x) => x.txHash === again)!;
    assert.equal(row.kind, 'deposit');
    assert.equal(row.status, 'confirmed');
    assert.equal(row.delta, 3);
    assert.equal(row.description, `Another payment to ${address} of deposit ${depositId}`);
  });

  test('less than asked credits what arrived; less than a cent credits nothing', async () => {
    const r = await call(server.app, 'POST', '/api/billing/deposits', { key, body: { amount: 40 } });
    const dust = await call(server.app, 'POST', '/api/billing/deposits', { key, body: { amount: 5 } });
    await chain.transfer(dust.body.address, unit / 1000n); // 0.001 TUSD
    await chain.transfer(r.body.address, 15n * unit + unit / 200n); // 15.005 TUSD: 15.00
    await chain.mine(2);
    await waitFor(async () => (await account(key)).balance === 49, 'the partial payment to be credited');
    const rows = await transactions(key);
    const partial = rows.find((x) => x.id === r.body.id)!;
    assert.equal(partial.amount, 15);
    assert.equal(partial.description, 'Requested $40.00, received $15.00');
    await caughtUp();
    assert.equal(rows.find((x) => x.id === dust.body.id)!.status, 'pending');
    assert.equal((await account(key)).balance, 49);
    assert.deepEqual(await ledgerProblems(server), []);
  });
});
