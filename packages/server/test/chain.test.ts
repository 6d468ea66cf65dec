import assert from 'node:assert/strict';
import { pbkdf2Sync, randomBytes } from 'node:crypto';
import { after, describe, test } from 'node:test';
import { HDKey } from '@scure/bip32';
import { bytesToHex, getAddress } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { depositAddress } from '../src/chain/addresses.js';
import { chainConfigFromEnv, fromCents, networkName, toCents } from '../src/chain/config.js';
import { ChainWatcher, type ConfirmedTransfer } from '../src/chain/watcher.js';
import { FUNDED_ADDRESS, startEvmChain } from '../../../test/support/evm-chain.js';
import { freePort } from '../../../test/support/processes.js';

// docs/billing.md, "On-chain deposits".

/** The BIP39 seed of a mnemonic without passphrase (BIP39: PBKDF2-SHA512, 2048 rounds, salt "mnemonic"). */
const seedOf = (mnemonic: string): Uint8Array => pbkdf2Sync(mnemonic.normalize('NFKD'), 'mnemonic', 2048, 64, 'sha512');
/** Hardhat's and Anvil's well-known development mnemonic, whose addresses are published everywhere. */
const DEV_MNEMONIC = 'test test test test test test test test test test test junk';
const master = HDKey.fromMasterSeed(seedOf(DEV_MNEMONIC));
/** The operator's account-level key, as a wallet exports it. */
const accountKey = master.derive("m/44'/60'/0'/0");
const XPUB = accountKey.publicExtendedKey;
const XPRV = accountKey.privateExtendedKey;

describe('deposit addresses', () => {
  test("deposit i is the address of the private key at m/44'/60'/0'/0/i: the operator can spend what arrives", () => {
    for (const i of [0, 1, 2, 3, 10, 99, 1000, 123_456, 2 ** 31 - 1]) {
      const privateKey = master.derive(`m/44'/60'/0'/0/${i}`).privateKey!;
      assert.equal(depositAddress(XPUB, i), privateKeyToAccount(bytesToHex(privateKey)).address, `index ${i}`);
    }
  });

  test('the well-known development addresses, checksummed', () => {
    assert.equal(depositAddress(XPUB, 0), '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266');
    assert.equal(depositAddress(XPUB, 1), '0x70997970C51812dc3A010C7d01b50e0d17dc79C8');
    assert.equal(depositAddress(`  ${XPUB}\n`, 1), '0x70997970C51812dc3A010C7d01b50e0d17dc79C8');
  });

  test('another seed gives other addresses', () => {
    const other = HDKey.fromMasterSeed(Uint8Array.from({ length: 32 }, (_, i) => i)).derive("m/44'/60'/0'/0");
    assert.notEqual(depositAddress(other.publicExtendedKey, 0), depositAddress(XPUB, 0));
    assert.equal(depositAddress(other.publicExtendedKey, 7), privateKeyToAccount(bytesToHex(other.deriveChild(7).privateKey!)).address);
  });

  test('an extended private key is refused, naming the variable', () => {
    assert.throws(() => depositAddress(XPRV, 0), /RAMPART_CHAIN_XPUB is an extended private key \(xprv/);
  });

  test('text that is no extended public key is refused, naming the variable', () => {
    for (const bad of ['', 'xpub', XPUB.slice(0, -1), `${XPUB.slice(0, -1)}x`, '0x1234']) {
      assert.throws(() => depositAddress(bad, 0), /RAMPART_CHAIN_XPUB is not a valid extended public key/, JSON.stringify(bad));
    }
  });

  test('indexes outside the non-hardened range are refused', () => {
    for (const bad of [-1, 2 ** 31, 1.5, Number.NaN]) {
      assert.throws(() => depositAddress(XPUB, bad), RangeError, String(bad));
    }
  });
});

describe('chain settings', async () => {
  const TOKEN = '0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48';
  const base = { RAMPART_CHAIN_RPC_URL: 'https://rpc.example.com/v1', RAMPART_CHAIN_XPUB: XPUB, RAMPART_CHAIN_TOKEN_ADDRESS: TOKEN };

  test('off when none of RPC URL, xpub and token is set', async () => {
    assert.equal(await chainConfigFromEnv({}), undefined);
    assert.equal(await chainConfigFromEnv({ RAMPART_CHAIN_RPC_URL: ' ', RAMPART_CHAIN_CONFIRMATIONS: '3' }), undefined);
  });

  test('defaults', async () => {
    assert.deepEqual(await chainConfigFromEnv(base), {
      rpcUrl: 'https://rpc.example.com/v1',
      xpub: XPUB,
      token: TOKEN,
      symbol: 'USDC',
      decimals: 6,
      network: undefined,
      confirmations: 12,
      pollMs: 15_000,
    });
  });

  test('every setting given', async () => {
    const config = await chainConfigFromEnv({
      ...base,
      RAMPART_CHAIN_TOKEN_ADDRESS: TOKEN.toLowerCase(),
      RAMPART_CHAIN_TOKEN_SYMBOL: 'USDT',
      RAMPART_CHAIN_TOKEN_DECIMALS: '18',
      RAMPART_CHAIN_NETWORK: 'Base',
      RAMPART_CHAIN_CONFIRMATIONS: '1',
      RAMPART_CHAIN_POLL_MS: '2000',
    });
    assert.deepEqual(config && { ...config, xpub: undefined }, {
      rpcUrl: 'https://rpc.example.com/v1',
      xpub: undefined,
      token: TOKEN,
      symbol: 'USDT',
      decimals: 18,
      network: 'Base',
      confirmations: 1,
      pollMs: 2000,
    });
  });

  test('only some of the three required settings: the error lists the missing ones', async () => {
    await assert.rejects(() => chainConfigFromEnv({ RAMPART_CHAIN_RPC_URL: base.RAMPART_CHAIN_RPC_URL }), {
      message: 'On-chain deposits need RAMPART_CHAIN_RPC_URL, RAMPART_CHAIN_XPUB, RAMPART_CHAIN_TOKEN_ADDRESS together; missing: RAMPART_CHAIN_XPUB, RAMPART_CHAIN_TOKEN_ADDRESS',
    });
    await assert.rejects(() => chainConfigFromEnv({ ...base, RAMPART_CHAIN_XPUB: '' }), /missing: RAMPART_CHAIN_XPUB$/);
  });

  test('invalid values are refused, naming the variable', async () => {
    const cases: [Record<string, string>, RegExp][] = [
      [{ RAMPART_CHAIN_RPC_URL: 'not a url' }, /RAMPART_CHAIN_RPC_URL must be an http\(s\) URL/],
      [{ RAMPART_CHAIN_RPC_URL: 'wss://rpc.example.com' }, /RAMPART_CHAIN_RPC_URL must be an http\(s\) URL/],
      [{ RAMPART_CHAIN_XPUB: XPRV }, /RAMPART_CHAIN_XPUB is an extended private key/],
      [{ RAMPART_CHAIN_XPUB: 'xpub123' }, /RAMPART_CHAIN_XPUB is not a valid extended public key/],
      [{ RAMPART_CHAIN_TOKEN_ADDRESS: '0x1234' }, /RAMPART_CHAIN_TOKEN_ADDRESS must be/],
      // One character's case changed: the checksum catches it.
      [{ RAMPART_CHAIN_TOKEN_ADDRESS: TOKEN.replace('A0b', 'a0b') }, /RAMPART_CHAIN_TOKEN_ADDRESS must be/],
      [{ RAMPART_CHAIN_TOKEN_SYMBOL: 'US DC' }, /RAMPART_CHAIN_TOKEN_SYMBOL must be/],
      [{ RAMPART_CHAIN_TOKEN_DECIMALS: '256' }, /RAMPART_CHAIN_TOKEN_DECIMALS must be a whole number from 0 to 255/],
      [{ RAMPART_CHAIN_TOKEN_DECIMALS: '6.5' }, /RAMPART_CHAIN_TOKEN_DECIMALS must be/],
      [{ RAMPART_CHAIN_NETWORK: 'x'.repeat(65) }, /RAMPART_CHAIN_NETWORK must be at most 64 characters/],
      [{ RAMPART_CHAIN_CONFIRMATIONS: '0' }, /RAMPART_CHAIN_CONFIRMATIONS must be a whole number from 1/],
      [{ RAMPART_CHAIN_CONFIRMATIONS: '-3' }, /RAMPART_CHAIN_CONFIRMATIONS must be/],
      [{ RAMPART_CHAIN_POLL_MS: 'fast' }, /RAMPART_CHAIN_POLL_MS must be/],
    ];
    for (const [env, message] of cases) {
      await assert.rejects(() => chainConfigFromEnv({ ...base, ...env }), message, JSON.stringify(env));
    }
  });

  test('network names by chain id', () => {
    assert.equal(networkName(1), 'Ethereum');
    assert.equal(networkName(8453), 'Base');
    assert.equal(networkName(1337), 'EVM chain 1337');
  });

  test('token amounts to cents round down, at 1 token = 1 USD', () => {
    assert.equal(toCents(1_234_567n, 6), 123);
    assert.equal(toCents(9_999n, 6), 0);
    assert.equal(toCents(10_000n, 6), 1);
    assert.equal(toCents(12_345_678_900_000_000_000n, 18), 1234);
    assert.equal(toCents(5n, 0), 500);
    assert.equal(toCents(0n, 6), 0);
    assert.throws(() => toCents(-1n, 6), RangeError);
    assert.throws(() => toCents(10n ** 30n, 6), RangeError);
    assert.throws(() => toCents(1n, 256), RangeError);
  });

  test('cents to token amounts round up, so paying that much credits at least as many cents', () => {
    assert.equal(fromCents(123, 6), 1_230_000n);
    assert.equal(fromCents(2900, 18), 29n * 10n ** 18n);
    assert.equal(fromCents(1, 0), 1n);
    assert.equal(fromCents(0, 6), 0n);
    for (const [cents, decimals] of [
      [1, 0],
      [1, 1],
      [199, 1],
      [123, 6],
      [4567, 18],
    ] as const) {
      assert.ok(toCents(fromCents(cents, decimals), decimals) >= cents, `${cents} cents at ${decimals} decimals`);
    }
    assert.throws(() => fromCents(-1, 6), RangeError);
    assert.throws(() => fromCents(1.5, 6), RangeError);
  });
});

describe('chain watcher on a local chain', async () => {
  const chain = await startEvmChain();
  after(() => chain.stop());
  const unit = 10n ** BigInt(chain.decimals);
  let nextIndex = 0;
  /** A deposit address no other test uses. */
  const freshAddress = () => depositAddress(XPUB, nextIndex++);
  /** A watcher that starts at the next block, so earlier tests' transfers are out of its sight. */
  const freshWatcher = async (confirmations: number, options: { blockRange?: number } = {}) =>
    new ChainWatcher({ rpcUrl: chain.rpcUrl, token: chain.token, confirmations, fromBlock: (await chain.blockNumber()) + 1n, ...options });
  const summary = (transfers: ConfirmedTransfer[]) => transfers.map((t) => ({ to: t.to, amount: t.amount, txHash: t.txHash }));

  test('a transfer to a watched address comes once, after N confirmations; one to an unwatched address never', async () => {
    const watcher = await freshWatcher(3);
    const watched = freshAddress();
    const unwatched = freshAddress();
    const txHash = await chain.transfer(watched, 25n * unit);
    await chain.transfer(unwatched, 7n * unit);
    // The watched transfer's block has 2 confirmations now (the unwatched one's block is on top).
    assert.deepEqual(await watcher.poll([watched]), []);
    await chain.mine(1);
    const [transfer, ...rest] = await watcher.poll([watched]);
    assert.deepEqual(rest, []);
    const block = (await chain.blockNumber()) - 2n;
    assert.deepEqual(transfer && { ...transfer, logIndex: undefined }, {
      from: FUNDED_ADDRESS,
      to: watched,
      amount: 25n * unit,
      txHash,
      logIndex: undefined,
      blockNumber: block,
    });
    assert.equal(toCents(transfer!.amount, chain.decimals), 2500);
    await chain.mine(5);
    assert.deepEqual(await watcher.poll([watched]), [], 'a second poll does not return it again');
    assert.deepEqual(await watcher.poll([watched, unwatched.toLowerCase()]), [], 'nor does watching the other address late');
  });

  test('not returned before its block is N deep', async () => {
    const watcher = await freshWatcher(12);
    const watched = freshAddress();
    await chain.transfer(watched, unit);
    for (let depth = 1; depth < 12; depth++) {
      assert.deepEqual(await watcher.poll([watched]), [], `at ${depth} confirmations`);
      await chain.mine(1);
    }
    assert.equal((await watcher.poll([watched])).length, 1, 'at 12 confirmations');
  });

  test('two transfers in one block to two addresses both come, oldest first, with their amounts', async () => {
    const watcher = await freshWatcher(1);
    const [a, b] = [freshAddress(), freshAddress()];
    const hashes = await chain.transferInOneBlock([
      { to: a, amount: 12_345_678_900_000_000_000n },
      { to: b, amount: 1n * unit },
    ]);
    const later = await chain.transfer(a, 3n * unit + unit / 1000n);
    const found = await watcher.poll([b.toLowerCase(), a]);
    assert.deepEqual(summary(found), [
      { to: a, amount: 12_345_678_900_000_000_000n, txHash: hashes[0] },
      { to: b, amount: 1n * unit, txHash: hashes[1] },
      { to: a, amount: 3n * unit + unit / 1000n, txHash: later },
    ]);
    assert.equal(found[0]!.blockNumber, found[1]!.blockNumber);
    assert.ok(found[0]!.logIndex < found[1]!.logIndex);
    assert.deepEqual(
      found.map((t) => toCents(t.amount, chain.decimals)),
      [1234, 100, 300],
    );
  });

  test("another token's transfers to a watched address are ignored, and so are transfers of 0", async () => {
    const other = await chain.deployToken('Other USD', 'OUSD');
    const watcher = await freshWatcher(1);
    const watched = freshAddress();
    await other.transfer(watched, 50n * unit);
    await other.mint(watched, 50n * unit);
    await chain.transfer(watched, 0n);
    const paid = await chain.transfer(watched, 2n * unit);
    assert.deepEqual(summary(await watcher.poll([watched])), [{ to: watched, amount: 2n * unit, txHash: paid }]);
  });

  test('a mint to a watched address counts as a transfer to it', async () => {
    const watcher = await freshWatcher(1);
    const watched = freshAddress();
    const txHash = await chain.mint(watched, 4n * unit);
    const [minted] = await watcher.poll([watched]);
    assert.equal(minted?.txHash, txHash);
    assert.equal(minted?.from, '0x0000000000000000000000000000000000000000');
  });

  test('a fresh watcher from a stored cursor does not read the blocks before it', async () => {
    const watched = freshAddress();
    const first = await freshWatcher(1);
    const start = first.cursor!;
    const old = await chain.transfer(watched, unit);
    assert.equal((await first.poll([watched])).length, 1);
    const stored = first.cursor!;
    assert.equal(stored, (await chain.blockNumber()) + 1n);

    const resumed = new ChainWatcher({ rpcUrl: chain.rpcUrl, token: chain.token, confirmations: 1, fromBlock: stored });
    assert.deepEqual(await resumed.poll([watched]), []);
    const fresh = await chain.transfer(watched, 2n * unit);
    assert.deepEqual(summary(await resumed.poll([watched])), [{ to: watched, amount: 2n * unit, txHash: fresh }]);
    // A watcher from the earlier cursor does see the old transfer: the resumed one skipped it because of its cursor.
    const fromStart = new ChainWatcher({ rpcUrl: chain.rpcUrl, token: chain.token, confirmations: 1, fromBlock: start });
    assert.deepEqual(
      (await fromStart.poll([watched])).map((t) => t.txHash),
      [old, fresh],
    );
  });

  test('without a stored cursor, the first poll starts at the newest block deep enough', async () => {
    const watched = freshAddress();
    await chain.transfer(watched, unit);
    await chain.mine(3);
    const watcher = new ChainWatcher({ rpcUrl: chain.rpcUrl, token: chain.token, confirmations: 2 });
    assert.equal(watcher.cursor, undefined);
    assert.deepEqual(await watcher.poll([watched]), []);
    assert.equal(watcher.cursor, await chain.blockNumber());
  });

  test('long ranges are read in pieces of blockRange blocks, at most 10 per poll, and nothing in them is missed', async () => {
    const watcher = await freshWatcher(1, { blockRange: 2 });
    const from = watcher.cursor!;
    const watched = freshAddress();
    const sent: string[] = [];
    for (let i = 0; i < 20; i++) {
      sent.push(await chain.transfer(watched, BigInt(i + 1) * unit));
      if (i % 3 === 0) await chain.mine(1);
    }
    const head = await chain.blockNumber();
    assert.ok(head - from + 1n > 20n, 'more blocks than one poll reads');
    const first = await watcher.poll([watched]);
    assert.equal(watcher.cursor, from + 20n);
    const second = await watcher.poll([watched]);
    assert.equal(watcher.cursor, head + 1n);
    assert.deepEqual(
      [...first, ...second].map((t) => t.txHash),
      sent,
    );
  });

  test('more addresses than one request takes', async () => {
    const watcher = await freshWatcher(1);
    // Random addresses around the paid ones (deriving 1,200 would take a second and prove nothing more).
    const paid = new Map([
      [3, freshAddress()],
      [700, freshAddress()],
      [1200, freshAddress()],
    ]);
    const addresses = Array.from({ length: 1201 }, (_, i) => paid.get(i) ?? getAddress(bytesToHex(randomBytes(20))));
    for (const to of paid.values()) await chain.transfer(to, unit);
    assert.deepEqual(
      (await watcher.poll(addresses)).map((t) => t.to),
      [...paid.values()],
    );
  });

  test('no addresses: the cursor still moves on', async () => {
    const watcher = await freshWatcher(1);
    await chain.transfer(freshAddress(), unit);
    assert.deepEqual(await watcher.poll([]), []);
    assert.equal(watcher.cursor, (await chain.blockNumber()) + 1n);
  });

  test('a transaction by hash: unknown, then not deep enough, then its transfers of the token (a multisend: one per address, with log indexes)', async () => {
    const watcher = await freshWatcher(3);
    assert.equal(await watcher.chainId(), 1337);
    assert.deepEqual(await watcher.transaction(`0x${'12'.repeat(32)}`), { state: 'unknown' });
    const [a, b] = [freshAddress(), freshAddress()];
    const hash = await chain.multisend([
      { to: a, amount: 2n * unit },
      { to: b, amount: 5n * unit },
    ]);
    assert.deepEqual(await watcher.transaction(hash), { state: 'shallow', depth: 1 });
    await chain.mine(2);
    const seen = await watcher.transaction(hash);
    assert.equal(seen.state, 'final');
    const transfers = seen.state === 'final' ? seen.transfers : [];
    assert.deepEqual(
      transfers.map((t) => ({ to: t.to, amount: t.amount, txHash: t.txHash })),
      [
        { to: a, amount: 2n * unit, txHash: hash },
        { to: b, amount: 5n * unit, txHash: hash },
      ],
    );
    assert.ok(transfers[0]!.logIndex < transfers[1]!.logIndex);
    // The same transfers, with the same log indexes, as a poll finds them.
    const polled = await new ChainWatcher({ rpcUrl: chain.rpcUrl, token: chain.token, confirmations: 3, fromBlock: transfers[0]!.blockNumber }).poll([a, b]);
    assert.deepEqual(polled, transfers);
    // Another token's transaction pays none of ours.
    const other = await chain.deployToken('Other USD', 'OUSD');
    const foreign = await other.transfer(a, unit);
    await chain.mine(2);
    assert.deepEqual(await watcher.transaction(foreign), { state: 'final', transfers: [] });
  });

  test('the network is named from the chain id unless configured', async () => {
    assert.equal(await new ChainWatcher({ rpcUrl: chain.rpcUrl, token: chain.token, confirmations: 1 }).network(), 'EVM chain 1337');
    assert.equal(await new ChainWatcher({ rpcUrl: chain.rpcUrl, token: chain.token, confirmations: 1, network: 'Testnet' }).network(), 'Testnet');
  });

  test('a poll while another runs is refused', async () => {
    const watcher = await freshWatcher(1);
    const running = watcher.poll([]);
    await assert.rejects(watcher.poll([]), /another poll is running/);
    await running;
  });

  test('errors propagate and leave the cursor where it was', async () => {
    const watcher = await freshWatcher(1);
    const cursor = watcher.cursor;
    await assert.rejects(watcher.poll(['not an address']), /Address "not an address" is invalid/);
    assert.equal(watcher.cursor, cursor);
    const unreachable = new ChainWatcher({ rpcUrl: `http://127.0.0.1:${await freePort()}`, token: chain.token, confirmations: 1, fromBlock: 5n });
    await assert.rejects(unreachable.poll([freshAddress()]));
    assert.equal(unreachable.cursor, 5n);
  });
});
