import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { HDKey } from '@scure/bip32';
import { startEvmChain, type EvmChain } from '../support/evm-chain.js';
import { CLI, freePort, startProcess, startServe, waitFor, type Proc } from '../support/processes.js';

// docs/billing.md, "Confirming deposits": a payment is credited once per transfer (chain,
// transaction hash, log index), whichever path sees it first. Real processes: the built
// `rampart serve` with on-chain deposits on, a ganache chain with an ERC-20, and a multisend (one
// transaction paying two deposit addresses).
//
// Found: the watcher keyed the first address a transaction paid by the bare hash and the others by
// `hash:logIndex`, the operator by the bare hash; a multisend confirmed by the operator for its
// second deposit credited that deposit twice and left the first pending forever.

const ADMIN = 'e2e-admin-token';

describe('a multisend paying two deposits, one confirmed by the operator', () => {
  let chain: EvmChain;
  let serve: (Proc & { url: string }) | undefined;
  const dataDir = mkdtempSync(join(tmpdir(), 'rampart-e2e-chain-'));
  const xpub = HDKey.fromMasterSeed(randomBytes(32)).derive("m/44'/60'/0'/0").publicExtendedKey;
  let port = 0;
  /** A look at the chain at start-up only (the job's first run): the test decides when the watcher reads. */
  const start = async () => {
    serve = await startServe({
      port,
      dataDir,
      adminToken: ADMIN,
      env: {
        RAMPART_CHAIN_RPC_URL: chain.rpcUrl,
        RAMPART_CHAIN_XPUB: xpub,
        RAMPART_CHAIN_TOKEN_ADDRESS: chain.token,
        RAMPART_CHAIN_TOKEN_DECIMALS: String(chain.decimals),
        RAMPART_CHAIN_NETWORK: 'Testnet',
        RAMPART_CHAIN_CONFIRMATIONS: '3',
        RAMPART_CHAIN_POLL_MS: '3600000',
      },
    });
  };
  const api = async (method: string, path: string, body?: unknown, auth: Record<string, string> = {}) => {
    const r = await fetch(`${serve!.url}${path}`, {
      method,
      headers: { ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...auth },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: r.status, body: (await r.json()) as any };
  };
  const admin = { authorization: `Bearer ${ADMIN}` };

  before(async () => {
    chain = await startEvmChain();
    port = await freePort();
    await start();
  });
  after(async () => {
    await serve?.stop();
    await chain.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  test('each deposit is credited once, by its own transfer; the operator cannot credit the transaction again', async () => {
    const created = await api('POST', '/admin/accounts', { email: `multisend-${randomUUID()}@example.com`, plan: 'pro', balance: 0 }, admin);
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const key = { 'x-api-key': created.body.apiKey as string };
    const a = (await api('POST', '/api/billing/deposits', { amount: 20 }, key)).body;
    const b = (await api('POST', '/api/billing/deposits', { amount: 50 }, key)).body;
    assert.ok(a.address && b.address, JSON.stringify({ a, b }));
    const unit = 10n ** BigInt(chain.decimals);
    const hash = await chain.multisend([
      { to: a.address, amount: 20n * unit },
      { to: b.address, amount: 50n * unit },
    ]);
    await chain.mine(2); // 3 deep
    // The operator confirms the second deposit by the transaction (rampart admin), before the watcher looks.
    const cli = startProcess(process.execPath, [CLI, 'admin', 'confirm-deposit', '--url', serve!.url, '--id', b.id, '--tx-hash', hash], { RAMPART_ADMIN_TOKEN: ADMIN });
    await waitFor(() => cli.child.exitCode !== null, 'rampart admin confirm-deposit to finish');
    assert.equal(cli.child.exitCode, 0, cli.output());
    const confirmed = JSON.parse(cli.output());
    assert.deepEqual([confirmed.deposit.id, confirmed.deposit.delta, confirmed.account.balance], [b.id, 50, 50]);
    // The watcher's look at start-up reads the multisend's block.
    await serve!.stop();
    await start();
    const balance = async () => (await api('GET', '/api/account', undefined, key)).body.balance as number;
    await waitFor(async () => (await balance()) > 50, 'the watcher to credit the other transfer');
    const rows = (await api('GET', '/api/billing/transactions', undefined, key)).body as { id: string; status: string; delta: number; txHash: string | null; logIndex: number | null }[];
    const deposits = rows.filter((r) => r.status === 'confirmed' && r.delta > 0);
    assert.deepEqual(
      deposits.map((r) => [r.id, r.delta, r.txHash]).sort(),
      [
        [a.id, 20, hash],
        [b.id, 50, hash],
      ].sort(),
      'each deposit once, nothing credited twice',
    );
    assert.notEqual(deposits[0]!.logIndex, deposits[1]!.logIndex, 'two transfers of one transaction: two log indexes');
    assert.equal(await balance(), 70);
    // Naming the transaction (or one transfer of it) again, for either deposit, credits nothing.
    for (const [id, logIndex] of [
      [a.id, undefined],
      [b.id, undefined],
      [a.id, deposits.find((r) => r.id === a.id)!.logIndex],
    ]) {
      const again = await api('POST', `/admin/deposits/${id}/confirm`, { txHash: hash, logIndex }, admin);
      assert.equal(again.status, 409, JSON.stringify(again.body));
      assert.deepEqual(again.body, { error: 'txHash: this transaction was already credited' });
    }
    assert.equal(await balance(), 70);
  });
});
