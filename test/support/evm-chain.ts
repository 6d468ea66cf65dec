// A real local EVM chain for tests: a ganache JSON-RPC server on 127.0.0.1 (a free port) with an
// OpenZeppelin ERC20PresetMinterPauser deployed as "Test USD" (TUSD). Every transaction is mined
// into its own block at once (instamine "eager"), so a transfer's block exists when the call
// returns; mine(n) adds empty blocks to give it confirmations. multisend pays several addresses in
// one transaction, through an OpenZeppelin TimelockController's executeBatch (as a multisend or a
// wallet's batch does): one transaction hash, one Transfer log per address.
import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import ganache from 'ganache';
import { createPublicClient, createTestClient, createWalletClient, defineChain, encodeFunctionData, http, type Abi, type Hex } from 'viem';
import { privateKeyToAccount, privateKeyToAddress } from 'viem/accounts';
import { createNonceManager, jsonRpc } from 'viem/nonce';

// The compiled contract (abi + bytecode) as OpenZeppelin ships it.
const ERC20 = createRequire(import.meta.url)('@openzeppelin/contracts/build/contracts/ERC20PresetMinterPauser.json') as { abi: Abi; bytecode: Hex };
const TIMELOCK = createRequire(import.meta.url)('@openzeppelin/contracts/build/contracts/TimelockController.json') as { abi: Abi; bytecode: Hex };

export const CHAIN_ID = 1337;
/** The funded account's key: it deploys the tokens, mints and sends. */
const FUNDED_KEY: Hex = `0x${'11'.repeat(32)}`;
export const FUNDED_ADDRESS = privateKeyToAddress(FUNDED_KEY);

/** ERC20PresetMinterPauser keeps ERC-20's default of 18 decimals. */
const TOKEN_DECIMALS = 18;
/** What the funded account holds of each token deployed, for transfer(). */
const FUNDED_TOKENS = 10n ** 9n * 10n ** BigInt(TOKEN_DECIMALS);

export interface TestToken {
  address: `0x${string}`;
  decimals: number;
  /** Mints `amount` base units to `to` (a Transfer from the zero address); the mined tx hash. */
  mint(to: `0x${string}`, amount: bigint): Promise<Hex>;
  /** Sends `amount` base units from the funded account; the mined tx hash. */
  transfer(to: `0x${string}`, amount: bigint): Promise<Hex>;
  /** Sends every transfer from the funded account, all mined in one block; their tx hashes. */
  transferInOneBlock(transfers: readonly { to: `0x${string}`; amount: bigint }[]): Promise<Hex[]>;
}

export interface EvmChain {
  rpcUrl: string;
  /** The "Test USD" token (TUSD). */
  token: `0x${string}`;
  decimals: number;
  mint: TestToken['mint'];
  transfer: TestToken['transfer'];
  transferInOneBlock: TestToken['transferInOneBlock'];
  /** Pays every address in one transaction (Transfer logs in this order); the mined tx hash. */
  multisend(transfers: readonly { to: `0x${string}`; amount: bigint }[]): Promise<Hex>;
  /** Deploys another ERC20PresetMinterPauser, e.g. to check one token's transfers are not taken for another's. */
  deployToken(name: string, symbol: string): Promise<TestToken>;
  /** Mines n empty blocks. */
  mine(n: number): Promise<void>;
  blockNumber(): Promise<bigint>;
  stop(): Promise<void>;
}

export async function startEvmChain(): Promise<EvmChain> {
  const server = ganache.server({
    logging: { quiet: true },
    chain: { chainId: CHAIN_ID },
    miner: { instamine: 'eager' },
    wallet: { accounts: [{ secretKey: FUNDED_KEY, balance: `0x${(10n ** 24n).toString(16)}` }] },
  });
  await new Promise<void>((resolve, reject) => server.listen(0, '127.0.0.1', (err) => (err ? reject(err) : resolve())));
  const rpcUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const chain = defineChain({
    id: CHAIN_ID,
    name: 'ganache',
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
  });
  const transport = http(rpcUrl);
  const publicClient = createPublicClient({ chain, transport });
  // Transactions are signed here; a nonce manager of this chain's own counts those not mined yet.
  const account = privateKeyToAccount(FUNDED_KEY, { nonceManager: createNonceManager({ source: jsonRpc() }) });
  const wallet = createWalletClient({ account, chain, transport });
  const testClient = createTestClient({ mode: 'ganache', chain, transport });

  /** Waits for the receipt and fails loudly on a revert, so a broken setup does not pass for "nothing arrived". */
  const mined = async (hash: Hex): Promise<Hex> => {
    const receipt = await publicClient.waitForTransactionReceipt({ hash, pollingInterval: 20 });
    if (receipt.status !== 'success') throw new Error(`transaction ${hash} reverted`);
    return hash;
  };

  const deployToken = async (name: string, symbol: string): Promise<TestToken> => {
    const hash = await wallet.deployContract({ abi: ERC20.abi, bytecode: ERC20.bytecode, args: [name, symbol] });
    const { contractAddress } = await publicClient.waitForTransactionReceipt({ hash, pollingInterval: 20 });
    if (!contractAddress) throw new Error(`deploying ${symbol} created no contract`);
    const address = contractAddress;
    const send = (functionName: 'mint' | 'transfer', to: `0x${string}`, amount: bigint) => wallet.writeContract({ address, abi: ERC20.abi, functionName, args: [to, amount] });
    const token: TestToken = {
      address,
      decimals: TOKEN_DECIMALS,
      mint: async (to, amount) => mined(await send('mint', to, amount)),
      transfer: async (to, amount) => mined(await send('transfer', to, amount)),
      transferInOneBlock: async (transfers) => {
        await testClient.setAutomine(false);
        const hashes: Hex[] = [];
        try {
          for (const t of transfers) hashes.push(await send('transfer', t.to, t.amount));
          await testClient.mine({ blocks: 1 });
        } finally {
          await testClient.setAutomine(true);
        }
        return Promise.all(hashes.map(mined));
      },
    };
    await token.mint(FUNDED_ADDRESS, FUNDED_TOKENS);
    return token;
  };

  let tusd: TestToken;
  try {
    tusd = await deployToken('Test USD', 'TUSD');
  } catch (err) {
    await server.close(); // else the listening server keeps the test process alive
    throw err;
  }
  /** A timelock without delay, the funded account its proposer and executor: a batch of calls in one transaction. */
  let batcher: `0x${string}` | undefined;
  const multisend = async (transfers: readonly { to: `0x${string}`; amount: bigint }[]): Promise<Hex> => {
    if (!batcher) {
      const hash = await wallet.deployContract({ abi: TIMELOCK.abi, bytecode: TIMELOCK.bytecode, args: [0n, [account.address], [account.address], account.address] });
      const { contractAddress } = await publicClient.waitForTransactionReceipt({ hash, pollingInterval: 20 });
      if (!contractAddress) throw new Error('deploying the batcher created no contract');
      batcher = contractAddress;
    }
    await tusd.mint(
      batcher,
      transfers.reduce((sum, t) => sum + t.amount, 0n),
    );
    const targets = transfers.map(() => tusd.address);
    const values = transfers.map(() => 0n);
    const payloads = transfers.map((t) => encodeFunctionData({ abi: ERC20.abi, functionName: 'transfer', args: [t.to, t.amount] }));
    const batch = [targets, values, payloads, `0x${'00'.repeat(32)}`, `0x${randomBytes(32).toString('hex')}`] as const;
    await mined(await wallet.writeContract({ address: batcher, abi: TIMELOCK.abi, functionName: 'scheduleBatch', args: [...batch, 0n] }));
    return mined(await wallet.writeContract({ address: batcher, abi: TIMELOCK.abi, functionName: 'executeBatch', args: [...batch] }));
  };

  return {
    rpcUrl,
    token: tusd.address,
    multisend,
    decimals: tusd.decimals,
    mint: tusd.mint,
    transfer: tusd.transfer,
    transferInOneBlock: tusd.transferInOneBlock,
    deployToken,
    mine: (n) => testClient.mine({ blocks: n }),
    blockNumber: () => publicClient.getBlockNumber({ cacheTime: 0 }),
    stop: () => server.close(),
  };
}
