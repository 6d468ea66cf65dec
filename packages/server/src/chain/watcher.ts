// Finds confirmed stablecoin transfers to deposit addresses by polling an EVM JSON-RPC endpoint
// for the token's ERC-20 Transfer logs (docs/billing.md, "On-chain deposits").
//
//   blocks:  ... | cursor ............ safe head | newer blocks (not confirmed yet) ... latest
//                  └──── scanned by one poll ───┘
//
// Only blocks at least `confirmations` deep are read, so a reorganisation shallower than that can
// neither show a transfer that later vanishes nor hide one: nothing above the safe head is looked
// at until it is deep enough. The cursor only moves forward, past what a successful poll read.
import { createPublicClient, getAddress, http, parseAbiItem, parseEventLogs, TransactionReceiptNotFoundError, type Log, type PublicClient } from 'viem';
import { networkName } from './config.js';

const TRANSFER = parseAbiItem('event Transfer(address indexed from, address indexed to, uint256 value)');

/** Many providers refuse eth_getLogs over more than a few thousand blocks. */
const DEFAULT_BLOCK_RANGE = 2_000;
/** Keeps each eth_getLogs request (one topic per address) well within providers' size limits. */
const ADDRESSES_PER_CALL = 500;
/**
 * A poll reads at most this many block ranges, so catching up after downtime takes several
 * polls of bounded length instead of one that may time out and start over.
 */
const RANGES_PER_POLL = 10;

export interface ConfirmedTransfer {
  from: `0x${string}`;
  /** The deposit address paid, checksummed. */
  to: `0x${string}`;
  /** In the token's base units (see toCents). */
  amount: bigint;
  txHash: `0x${string}`;
  logIndex: number;
  blockNumber: bigint;
}

/** One transaction as an off-chain confirmation names it (ChainWatcher.transaction). */
export type SeenTransaction =
  | { state: 'unknown' }
  /** Mined, but not `confirmations` deep yet: `depth` counts its own block as 1. */
  | { state: 'shallow'; depth: number }
  /** Deep enough: its non-zero transfers of the token, by log index. */
  | { state: 'final'; transfers: ConfirmedTransfer[] };

export interface ChainWatcherOptions {
  rpcUrl: string;
  /** The ERC-20 contract whose transfers count; any other contract's are ignored. */
  token: `0x${string}`;
  /** A transfer is returned once its block is this many blocks deep (its own block counts as 1). */
  confirmations: number;
  /**
   * The first block to read: the `cursor` a previous watcher left (stored by the caller). When
   * absent, the first poll starts at the newest block already deep enough.
   */
  fromBlock?: bigint | undefined;
  /** Display name of the network (RAMPART_CHAIN_NETWORK); else named from the RPC's chain id. */
  network?: string | undefined;
  /** Most blocks per eth_getLogs request, for providers with a lower limit than 2,000. */
  blockRange?: number | undefined;
}

export class ChainWatcher {
  private readonly client: PublicClient;
  private readonly token: `0x${string}`;
  private readonly confirmations: bigint;
  private readonly blockRange: bigint;
  private readonly configuredNetwork: string | undefined;
  private nextBlock: bigint | undefined;
  private polling = false;

  constructor(options: ChainWatcherOptions) {
    if (!Number.isInteger(options.confirmations) || options.confirmations < 1) {
      throw new RangeError(`confirmations must be a whole number of at least 1, not ${options.confirmations}`);
    }
    const blockRange = options.blockRange ?? DEFAULT_BLOCK_RANGE;
    if (!Number.isInteger(blockRange) || blockRange < 1) throw new RangeError(`blockRange must be a whole number of at least 1, not ${blockRange}`);
    if (options.fromBlock !== undefined && options.fromBlock < 0n) throw new RangeError(`fromBlock cannot be negative (${options.fromBlock})`);
    this.client = createPublicClient({ transport: http(options.rpcUrl) });
    this.token = getAddress(options.token);
    this.confirmations = BigInt(options.confirmations);
    this.blockRange = BigInt(blockRange);
    this.configuredNetwork = options.network;
    this.nextBlock = options.fromBlock;
  }

  /**
   * The next block a poll reads: store it after each poll and give it back as `fromBlock` to the
   * next watcher. Undefined until the first poll when no `fromBlock` was given.
   */
  get cursor(): bigint | undefined {
    return this.nextBlock;
  }

  /** The chain's EIP-155 id, as the RPC says (part of every on-chain credit's key). */
  async chainId(): Promise<number> {
    return this.client.getChainId();
  }

  /**
   * One transaction, by hash, as an operator or a processor names it: unknown (not mined, or on
   * another chain), mined but not deep enough, or deep enough with its transfers of the token,
   * read from its receipt (the same logs a poll reads).
   */
  async transaction(hash: `0x${string}`): Promise<SeenTransaction> {
    let receipt;
    try {
      receipt = await this.client.getTransactionReceipt({ hash });
    } catch (err) {
      if (err instanceof TransactionReceiptNotFoundError) return { state: 'unknown' };
      throw err;
    }
    const latest = await this.client.getBlockNumber({ cacheTime: 0 });
    const depth = latest - receipt.blockNumber + 1n;
    if (depth < this.confirmations) return { state: 'shallow', depth: Number(depth < 0n ? 0n : depth) };
    const logs = receipt.logs.filter((log) => log.address.toLowerCase() === this.token.toLowerCase());
    return { state: 'final', transfers: transfersOf(parseEventLogs({ abi: [TRANSFER], logs, eventName: 'Transfer', strict: true })) };
  }

  /** The network's display name, for payment details: the configured one, else by chain id. */
  async network(): Promise<string> {
    return this.configuredNetwork ?? networkName(await this.client.getChainId());
  }

  /**
   * The token transfers to any of `addresses` in blocks from the cursor up to the newest block
   * with enough confirmations (at most RANGES_PER_POLL × blockRange blocks; the rest comes next
   * poll), oldest first, and moves the cursor past them. Each transfer is returned by one poll
   * only, since the cursor never goes back. RPC errors propagate and leave the cursor where it
   * was, so the next poll reads the same blocks again. Transfers of 0 are left out: anyone can
   * send those to any address (address-poisoning spam) and they pay nothing.
   *
   * Pass the addresses awaiting payment as read just before the poll: an address left out is not
   * looked for in the blocks this poll reads, and those are never read again. (A deposit created
   * after that read is missed only if it is also paid, N blocks deep, before the poll's first
   * request: the moments between two calls.)
   * Addresses may be in any letter case; invalid ones throw viem's InvalidAddressError.
   */
  async poll(addresses: readonly string[]): Promise<ConfirmedTransfer[]> {
    if (this.polling) throw new Error('ChainWatcher.poll called while another poll is running');
    this.polling = true;
    try {
      return await this.scan(addresses);
    } finally {
      this.polling = false;
    }
  }

  private async scan(addresses: readonly string[]): Promise<ConfirmedTransfer[]> {
    const targets = chunk(uniqueAddresses(addresses), ADDRESSES_PER_CALL);
    const latest = await this.client.getBlockNumber({ cacheTime: 0 });
    const safeHead = latest - this.confirmations + 1n;
    const from = this.nextBlock ?? (safeHead > 0n ? safeHead : 0n);
    if (safeHead < from) {
      this.nextBlock = from;
      return [];
    }
    const lastReadable = from + this.blockRange * BigInt(RANGES_PER_POLL) - 1n;
    const to = safeHead < lastReadable ? safeHead : lastReadable;
    const found: ConfirmedTransfer[] = [];
    for (let start = from; start <= to; start += this.blockRange) {
      const end = start + this.blockRange - 1n < to ? start + this.blockRange - 1n : to;
      for (const group of targets) found.push(...(await this.transfers(group, start, end)));
    }
    this.nextBlock = to + 1n;
    return found.sort((a, b) => Number(a.blockNumber - b.blockNumber) || a.logIndex - b.logIndex);
  }

  /** Non-zero transfers of the token to `to`, in blocks fromBlock..toBlock inclusive. */
  private async transfers(to: `0x${string}`[], fromBlock: bigint, toBlock: bigint): Promise<ConfirmedTransfer[]> {
    return transfersOf(await this.client.getLogs({ address: this.token, event: TRANSFER, args: { to }, fromBlock, toBlock, strict: true }));
  }
}

type TransferLog = Log<bigint, number, false, typeof TRANSFER, true>;

/** Decoded Transfer logs as transfers, those of 0 left out (see poll). */
function transfersOf(logs: readonly TransferLog[]): ConfirmedTransfer[] {
  return logs
    .filter((log) => log.args.value > 0n)
    .map((log) => ({
      from: log.args.from,
      to: log.args.to,
      amount: log.args.value,
      txHash: log.transactionHash,
      logIndex: log.logIndex,
      blockNumber: log.blockNumber,
    }));
}

/** Checksummed and without repeats. */
function uniqueAddresses(addresses: readonly string[]): `0x${string}`[] {
  return [...new Set(addresses.map((a) => getAddress(a.toLowerCase())))];
}

function chunk<T>(items: T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}
