// Billing: the chain (docs/billing.md, "On-chain deposits"). The chain watcher (a look at the
// chain from the stored cursor, each transfer to a watched deposit address credited once, keyed
// by chain, hash and log index), and what the rest of billing reads from the chain: the
// transfers of a named transaction to a deposit's address (transfersToDeposit, creditTransfer:
// billing-deposits.ts confirms with them) and the network's name (chainNetwork).
import { toCents, type ChainConfig } from '../chain/config.js';
import type { ChainWatcher, ConfirmedTransfer } from '../chain/watcher.js';
import type { ServiceContext } from '../context.js';
import { readJobState, writeJobState } from '../data/job-state.js';
import { findCredit, findDepositByAddress, lockDeposit, watchedDepositAddresses, type PaymentKey, type TransactionRow } from '../data/transactions.js';
import type { Tx } from '../db/database.js';
import { AppError, invalidField } from '../errors.js';
import { creditDeposit, runCredit, type CreditResult } from './billing-credit.js';

// ---------------------------------------------------------------------------------------------
// The chain watcher

/** job_state: the next block the watcher reads. */
export const CHAIN_CURSOR = 'chain-watcher.cursor';
/** A deposit's address stays watched this long after its confirmation: a second payment is credited too. */
export const REPAYMENT_WATCH_MS = 30 * 86_400_000;
/**
 * An unpaid deposit's address stays watched this long after it expired: a payment made in its
 * last minutes is credited once deep enough. After that it is not looked for (docs/billing.md).
 */
export const EXPIRED_WATCH_MS = 3_600_000;

/** A transfer to a deposit address as a credit, keyed by the transfer itself. */
export interface ChainCredit extends PaymentKey {
  /** CAIP-2: `eip155:<chain id>`. */
  chain: string;
  logIndex: number;
  address: string;
  amountCents: number;
}

/**
 * Transfers as credits: one per transfer, keyed by its chain, transaction hash and log index (a
 * multisend paying several deposit addresses, or one address twice, is several credits), in cents
 * rounded down.
 */
export function chainCredits(transfers: readonly ConfirmedTransfer[], chain: string, decimals: number): ChainCredit[] {
  return transfers.map((t) => ({ chain, txHash: t.txHash.toLowerCase(), logIndex: t.logIndex, address: t.to, amountCents: toCents(t.amount, decimals) }));
}

export type ChainCreditOutcome = 'credited' | 'duplicate' | 'unknown-address' | 'dust';

/**
 * One transfer credited in the caller's transaction, unless credited before: a pending or expired
 * deposit at its address is settled with what arrived (less or more than asked); a confirmed one
 * gets the payment as a confirmed deposit row of its own.
 */
export async function creditTransfer(ctx: ServiceContext, tx: Tx, c: ChainCredit): Promise<(CreditResult & { reactivated: boolean }) | 'duplicate' | 'unknown-address'> {
  if (await findCredit(tx, c)) return 'duplicate';
  const found = await findDepositByAddress(tx, c.address);
  const dep = found && (await lockDeposit(tx, found.id));
  if (!dep) return 'unknown-address';
  return creditDeposit(ctx, tx, dep, { amountCents: c.amountCents, paid: c });
}

/** A payment the chain watcher saw: credited once per transfer, whichever path (or process) gets there first. */
export async function creditChainPayment(ctx: ServiceContext, c: ChainCredit): Promise<ChainCreditOutcome> {
  if (c.amountCents <= 0) return 'dust';
  try {
    const r = await runCredit(ctx, async (tx) => {
      const r = await creditTransfer(ctx, tx, c);
      if (typeof r === 'string') return { outcome: r, reactivated: false, account: { id: '' } };
      return { ...r, outcome: 'credited' as const };
    });
    return r.outcome;
  } catch (err) {
    if (err instanceof AppError && err.code === 'tx_hash_used') return 'duplicate';
    throw err;
  }
}

/**
 * A watcher of the configured chain, reading from `fromBlock` (the stored cursor) when given. Its
 * module, and viem with it, is loaded with the first watcher (chain/config.ts says why).
 */
async function chainWatcher(chain: ChainConfig, fromBlock?: bigint): Promise<ChainWatcher> {
  const { ChainWatcher } = await import('../chain/watcher.js');
  return new ChainWatcher({ rpcUrl: chain.rpcUrl, token: chain.token, confirmations: chain.confirmations, network: chain.network, fromBlock });
}

/** The chain's part of every on-chain credit's key, `eip155:<chain id>` (CAIP-2), asked of the RPC once per process. */
const chainKeys = new Map<string, Promise<string>>();
function chainKey(chain: ChainConfig): Promise<string> {
  let key = chainKeys.get(chain.rpcUrl);
  if (!key) {
    key = chainWatcher(chain)
      .then((watcher) => watcher.chainId())
      .then((id) => `eip155:${id}`);
    chainKeys.set(chain.rpcUrl, key);
    key.catch(() => chainKeys.delete(chain.rpcUrl)); // asked again next time
  }
  return key;
}

/** An RPC call on behalf of a request: the chain not answering is a 503, not a 500. */
async function askChain<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch {
    throw new AppError('chain_unavailable');
  }
}

/**
 * One look at the chain (the chain-watcher job): the transfers to watched deposit addresses in the
 * blocks from the stored cursor up to the newest deep enough, each credited once; then the cursor
 * moves on. A failure leaves the cursor, so the next run reads the same blocks again (what was
 * credited meanwhile is not credited twice: one credit per transfer).
 */
export async function pollChainDeposits(ctx: ServiceContext, chain: ChainConfig | undefined = ctx.billing?.chain): Promise<ChainCreditOutcome[]> {
  if (!chain) return [];
  const key = await chainKey(chain);
  const stored = await readJobState(ctx.db, CHAIN_CURSOR);
  const watcher = await chainWatcher(chain, stored !== undefined && /^\d+$/.test(stored) ? BigInt(stored) : undefined);
  // Read just before the poll (see ChainWatcher.poll).
  const now = ctx.now().getTime();
  const addresses = await watchedDepositAddresses(ctx.db, { expiresAfter: new Date(now - EXPIRED_WATCH_MS), confirmedSince: new Date(now - REPAYMENT_WATCH_MS) });
  const transfers = await watcher.poll(addresses);
  const outcomes: ChainCreditOutcome[] = [];
  for (const credit of chainCredits(transfers, key, chain.decimals)) outcomes.push(await creditChainPayment(ctx, credit));
  if (watcher.cursor !== undefined) await writeJobState(ctx.db, CHAIN_CURSOR, watcher.cursor.toString());
  return outcomes;
}

// ---------------------------------------------------------------------------------------------
// What an on-chain confirmation reads from the chain

/**
 * The transfers of a named transaction to an on-chain deposit's address (or the one at
 * `logIndex`), read from the chain: refused while the transaction is not as deep as the watcher
 * needs (a reorganisation could still drop it), or when it pays the address nothing.
 */
export async function transfersToDeposit(chain: ChainConfig, dep: TransactionRow, hash: `0x${string}`, logIndex: number | undefined): Promise<ChainCredit[]> {
  const seen = await askChain(async () => (await chainWatcher(chain)).transaction(hash));
  if (seen.state === 'unknown') throw invalidField('txHash', `no such transaction on ${dep.network ?? 'the chain'} (or not mined yet)`);
  if (seen.state === 'shallow') {
    throw new AppError('transfer_not_final', `txHash: the transaction is ${seen.depth} block(s) deep and counts at ${chain.confirmations}: confirm it then`);
  }
  const paysDeposit = seen.transfers.filter((t) => t.to.toLowerCase() === dep.address!.toLowerCase() && (logIndex === undefined || t.logIndex === logIndex));
  if (paysDeposit.length === 0) {
    const other = logIndex === undefined ? undefined : seen.transfers.find((t) => t.logIndex === logIndex);
    if (other) throw invalidField('logIndex', `transfer ${logIndex} of that transaction pays ${other.to}, not this deposit's address ${dep.address}`);
    throw invalidField('txHash', `that transaction pays no ${chain.symbol} to this deposit's address ${dep.address}`);
  }
  const credits = chainCredits(paysDeposit, await askChain(() => chainKey(chain)), chain.decimals).filter((c) => c.amountCents > 0);
  if (credits.length === 0) throw invalidField('txHash', `that transaction pays this deposit's address less than a cent`);
  return credits;
}

// ---------------------------------------------------------------------------------------------
// The network's name

/** How long a deposit waits for the RPC to name the network before answering 503. */
const NETWORK_NAME_TIMEOUT_MS = 5_000;

/** The network's display name for payment details: configured, else from the RPC's chain id (asked once). */
const networkNames = new Map<string, Promise<string>>();
export async function chainNetwork(chain: ChainConfig): Promise<string> {
  if (chain.network) return chain.network;
  let name = networkNames.get(chain.rpcUrl);
  if (!name) {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('no answer')), NETWORK_NAME_TIMEOUT_MS)));
    name = Promise.race([chainWatcher(chain).then((watcher) => watcher.network()), late]).finally(() => clearTimeout(timer));
    networkNames.set(chain.rpcUrl, name);
    name.catch(() => networkNames.delete(chain.rpcUrl)); // asked again next time
  }
  try {
    return await name;
  } catch {
    throw new AppError('chain_unavailable');
  }
}
