// On-chain deposit settings from the environment (docs/billing.md, "On-chain deposits"), and the
// conversion between token base units and the cents every balance is kept in. viem (half a second
// of CPU to load) is loaded only when the chain is configured: every control plane reads this
// module, few of them take deposits on a chain.

export interface ChainConfig {
  /** EVM JSON-RPC endpoint (http or https) the watcher polls. */
  rpcUrl: string;
  /** The operator's extended public key; deposit i is paid to its child i. */
  xpub: string;
  /** The stablecoin's ERC-20 contract, checksummed. */
  token: `0x${string}`;
  symbol: string;
  decimals: number;
  /** Display name of the network; undefined means "name it from the RPC's chain id" (networkName). */
  network: string | undefined;
  /** A transfer counts once its block is this many blocks deep (its own block counts as 1). */
  confirmations: number;
  pollMs: number;
}

/** The three settings without which there is nothing to watch; they come together or not at all. */
const REQUIRED = ['RAMPART_CHAIN_RPC_URL', 'RAMPART_CHAIN_XPUB', 'RAMPART_CHAIN_TOKEN_ADDRESS'] as const;

const DEFAULT_SYMBOL = 'USDC';
const DEFAULT_DECIMALS = 6;
const DEFAULT_CONFIRMATIONS = 12;
const DEFAULT_POLL_MS = 15_000;
/** ERC-20 `decimals` is a uint8. */
const MAX_DECIMALS = 255;

/**
 * The chain settings, or undefined when none of RPC URL, xpub and token address is set (chain
 * deposits are off). Throws an Error naming the variable at fault when only some of those three
 * are set or any value is invalid, so a half-configured deployment fails at startup rather than
 * handing out addresses nobody watches.
 */
export async function chainConfigFromEnv(env: Readonly<Record<string, string | undefined>>): Promise<ChainConfig | undefined> {
  const value = (name: string): string | undefined => {
    const v = env[name]?.trim();
    return v ? v : undefined;
  };
  const missing = REQUIRED.filter((name) => value(name) === undefined);
  if (missing.length === REQUIRED.length) return undefined;
  if (missing.length > 0) {
    throw new Error(`On-chain deposits need ${REQUIRED.join(', ')} together; missing: ${missing.join(', ')}`);
  }
  const xpub = value('RAMPART_CHAIN_XPUB')!;
  (await import('./addresses.js')).parseAccountXpub(xpub);
  return {
    rpcUrl: rpcUrl(value('RAMPART_CHAIN_RPC_URL')!),
    xpub,
    token: await tokenAddress(value('RAMPART_CHAIN_TOKEN_ADDRESS')!),
    symbol: symbol(value('RAMPART_CHAIN_TOKEN_SYMBOL') ?? DEFAULT_SYMBOL),
    decimals: wholeNumber('RAMPART_CHAIN_TOKEN_DECIMALS', value('RAMPART_CHAIN_TOKEN_DECIMALS'), DEFAULT_DECIMALS, 0, MAX_DECIMALS),
    network: network(value('RAMPART_CHAIN_NETWORK')),
    confirmations: wholeNumber('RAMPART_CHAIN_CONFIRMATIONS', value('RAMPART_CHAIN_CONFIRMATIONS'), DEFAULT_CONFIRMATIONS, 1, 10_000),
    pollMs: wholeNumber('RAMPART_CHAIN_POLL_MS', value('RAMPART_CHAIN_POLL_MS'), DEFAULT_POLL_MS, 100, 86_400_000),
  };
}

function rpcUrl(raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new Error(`RAMPART_CHAIN_RPC_URL must be an http(s) URL, not ${JSON.stringify(raw)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new Error(`RAMPART_CHAIN_RPC_URL must be an http(s) URL, not ${JSON.stringify(raw)}`);
  }
  return raw;
}

/** Mixed-case input must carry a correct EIP-55 checksum: that catches a mistyped character. */
async function tokenAddress(raw: string): Promise<`0x${string}`> {
  const { getAddress, isAddress } = await import('viem');
  if (!isAddress(raw)) {
    throw new Error(`RAMPART_CHAIN_TOKEN_ADDRESS must be a 0x-prefixed 20-byte contract address (with a valid checksum if mixed-case), not ${JSON.stringify(raw)}`);
  }
  return getAddress(raw);
}

function symbol(raw: string): string {
  if (!/^[A-Za-z0-9.$_-]{1,16}$/.test(raw)) {
    throw new Error(`RAMPART_CHAIN_TOKEN_SYMBOL must be 1 to 16 letters, digits or . $ _ -, not ${JSON.stringify(raw)}`);
  }
  return raw;
}

function network(raw: string | undefined): string | undefined {
  if (raw !== undefined && raw.length > 64) throw new Error('RAMPART_CHAIN_NETWORK must be at most 64 characters');
  return raw;
}

function wholeNumber(name: string, raw: string | undefined, fallback: number, min: number, max: number): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n < min || n > max) {
    throw new Error(`${name} must be a whole number from ${min} to ${max}, not ${JSON.stringify(raw)}`);
  }
  return n;
}

/** Names of the networks stablecoin deposits are usually made on, by EIP-155 chain id. */
const NETWORK_NAMES: Readonly<Record<number, string>> = {
  1: 'Ethereum',
  10: 'OP Mainnet',
  56: 'BNB Smart Chain',
  137: 'Polygon',
  8453: 'Base',
  42161: 'Arbitrum One',
  43114: 'Avalanche C-Chain',
  11155111: 'Sepolia',
  84532: 'Base Sepolia',
};

/**
 * The display name for a chain id, when RAMPART_CHAIN_NETWORK does not give one. A small table
 * rather than viem/chains, which takes over a second to load and names some ids twice.
 */
export function networkName(chainId: number): string {
  return NETWORK_NAMES[chainId] ?? `EVM chain ${chainId}`;
}

/**
 * Token base units to USD cents, rounded down: a stablecoin is taken at 1 token = 1 USD, and
 * rounding down never credits more than arrived. Throws a RangeError for a negative amount, bad
 * decimals, or a sum of cents too large to be a safe JavaScript integer.
 */
export function toCents(amount: bigint, decimals: number): number {
  checkDecimals(decimals);
  if (amount < 0n) throw new RangeError(`a token amount cannot be negative (${amount})`);
  const cents = (amount * 100n) / 10n ** BigInt(decimals);
  if (cents > BigInt(Number.MAX_SAFE_INTEGER)) throw new RangeError(`${amount} base units is too many cents to count`);
  return Number(cents);
}

/**
 * USD cents to token base units, rounded up: what a payer must send to be credited at least
 * `cents` (exact whenever the token has 2 decimals or more, as stablecoins do).
 */
export function fromCents(cents: number, decimals: number): bigint {
  checkDecimals(decimals);
  if (!Number.isSafeInteger(cents) || cents < 0) throw new RangeError(`cents must be a whole number of at least 0, not ${cents}`);
  const scaled = BigInt(cents) * 10n ** BigInt(decimals);
  return (scaled + 99n) / 100n;
}

function checkDecimals(decimals: number): void {
  if (!Number.isInteger(decimals) || decimals < 0 || decimals > MAX_DECIMALS) {
    throw new RangeError(`token decimals must be a whole number from 0 to ${MAX_DECIMALS}, not ${decimals}`);
  }
}
