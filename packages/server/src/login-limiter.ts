import { isIPv4, isIPv6 } from 'node:net';
import { AppError } from './errors.js';

/**
 * Failed sign-ins, counted in this process's memory (docs/api.md "Browser sessions"):
 *
 * - per source address: 50 failures in 15 minutes, whatever the emails, stop that address; this
 *   is what stops one attacker, and a legitimate user elsewhere never notices it;
 * - per account (email): 10 failures in 15 minutes, from any addresses, stop that email from
 *   every address that has failed sign-ins of its own in the window; an address without any
 *   failure is always let through to the password check, so guessing spread over many addresses
 *   gets one guess per address and window, and never locks out the owner who comes from an
 *   address of its own with the right password;
 * - except from an address this account signed in from successfully (in the last 30 days, as far
 *   as this process remembers): there only that address's own failures on the account count
 *   (10 in 15 minutes), so the owner's usual address keeps working while someone else guesses.
 *
 * Attempts still being checked count as failures until they end, so a burst of concurrent
 * guesses cannot slip past a limit before the first of them fails. Over a limit the answer is
 * 429 with Retry-After (seconds until the oldest counted failure leaves the window), before any
 * password is hashed. IPv6 addresses are counted by /64 (what one subscriber usually gets), IPv4
 * by address.
 */

export interface LoginLimits {
  windowMs: number;
  perAccount: number;
  perAddress: number;
  /** How long an address that signed in successfully is remembered for its account. */
  knownAddressMs: number;
  /** Entries per table; the least recently touched go first. */
  maxEntries: number;
}

export const LOGIN_LIMITS: LoginLimits = {
  windowMs: 15 * 60_000,
  perAccount: 10,
  perAddress: 50,
  knownAddressMs: 30 * 86_400_000,
  maxEntries: 100_000,
};

/** Known addresses remembered per account. */
const MAX_KNOWN_PER_ACCOUNT = 20;

interface Log {
  /** Failure times (ms), oldest first, at most the limit of their table. */
  times: number[];
  /** Attempts begun and not yet ended. */
  pending: number;
}

/** A map that forgets its least recently touched entries beyond a size. */
class Table<V> {
  private readonly map = new Map<string, V>();
  constructor(private readonly max: number) {}

  get(key: string): V | undefined {
    const v = this.map.get(key);
    if (v !== undefined) {
      this.map.delete(key);
      this.map.set(key, v);
    }
    return v;
  }

  set(key: string, v: V): void {
    this.map.delete(key);
    this.map.set(key, v);
    while (this.map.size > this.max) {
      const oldest = this.map.keys().next().value as string;
      this.map.delete(oldest);
    }
  }

  delete(key: string): void {
    this.map.delete(key);
  }

  get size(): number {
    return this.map.size;
  }
}

/** The key an address is counted under: IPv4 as is (also when IPv4-mapped), IPv6 by its /64. */
export function addressKey(address: string | undefined): string {
  if (!address) return 'unknown';
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return mapped[1]!;
  if (isIPv4(address)) return address;
  if (!isIPv6(address)) return address;
  const zoneless = address.split('%')[0]!;
  const [head = '', tail = ''] = zoneless.split('::');
  const left = head ? head.split(':') : [];
  const right = tail ? tail.split(':') : [];
  const missing = zoneless.includes('::') ? 8 - left.length - right.length : 0;
  const groups = [...left, ...Array<string>(Math.max(0, missing)).fill('0'), ...right];
  return `${groups
    .slice(0, 4)
    .map((g) => (parseInt(g, 16) || 0).toString(16))
    .join(':')}::/64`;
}

export type LoginOutcome = 'success' | 'failure' | 'aborted';

export class LoginLimiter {
  private readonly byAddress: Table<Log>;
  private readonly byAccount: Table<Log>;
  private readonly byPair: Table<Log>;
  private readonly known: Table<Map<string, number>>;

  constructor(
    private readonly now: () => number,
    readonly limits: LoginLimits = LOGIN_LIMITS,
  ) {
    this.byAddress = new Table(limits.maxEntries);
    this.byAccount = new Table(limits.maxEntries);
    this.byPair = new Table(limits.maxEntries);
    this.known = new Table(limits.maxEntries);
  }

  /**
   * Before a password is checked: throws 429 (too_many_logins, with Retry-After) when the address
   * or the account is over its limit; otherwise counts the attempt as begun. The caller must call
   * the returned function exactly once with how the attempt ended.
   */
  begin(email: string, address: string | undefined): (outcome: LoginOutcome) => void {
    const now = this.now();
    const account = email.toLowerCase();
    const addr = addressKey(address);
    const pair = `${account}\n${addr}`;
    // From a known address only its own failures on the account count; from an address without
    // any failure (or attempt in progress) none of the account's count; elsewhere all of them.
    const checks: [Table<Log>, string, number][] = [[this.byAddress, addr, this.limits.perAddress]];
    if (this.isKnown(account, addr, now)) checks.push([this.byPair, pair, this.limits.perAccount]);
    else if (!this.isClean(addr, now)) checks.push([this.byAccount, account, this.limits.perAccount]);
    let retryMs = 0;
    for (const [table, key, limit] of checks) retryMs = Math.max(retryMs, this.overBy(table, key, limit, now));
    if (retryMs > 0) throw new AppError('too_many_logins', undefined, { retryAfterSeconds: Math.max(1, Math.ceil(retryMs / 1000)) });

    const logs: [Table<Log>, string, number][] = [
      [this.byAddress, addr, this.limits.perAddress],
      [this.byAccount, account, this.limits.perAccount],
      [this.byPair, pair, this.limits.perAccount],
    ];
    for (const [table, key] of logs) this.log(table, key).pending++;
    let ended = false;
    return (outcome) => {
      if (ended) return;
      ended = true;
      const at = this.now();
      for (const [table, key, limit] of logs) {
        const log = this.log(table, key);
        log.pending = Math.max(0, log.pending - 1);
        if (outcome === 'failure') {
          log.times.push(at);
          if (log.times.length > limit) log.times.splice(0, log.times.length - limit);
        }
      }
      if (outcome === 'success') {
        // This address's own failures on the account are forgiven, and it is known from now on.
        // The address's and the account's totals stay: a success elsewhere must not reset them.
        this.byPair.delete(pair);
        this.remember(account, addr, at);
      }
      for (const [table, key] of logs) this.dropIfEmpty(table, key, at);
    };
  }

  private log(table: Table<Log>, key: string): Log {
    let log = table.get(key);
    if (!log) {
      log = { times: [], pending: 0 };
      table.set(key, log);
    }
    return log;
  }

  /** 0 when under the limit; otherwise how long (ms) until an attempt would be let through. */
  private overBy(table: Table<Log>, key: string, limit: number, now: number): number {
    const log = table.get(key);
    if (!log) return 0;
    const cutoff = now - this.limits.windowMs;
    while (log.times.length > 0 && (log.times[0]! <= cutoff || log.times[0]! > now)) log.times.shift();
    const counted = log.times.length + log.pending;
    if (counted < limit) return 0;
    // Enough failures leave the window for the count to drop below the limit; attempts in progress
    // end within moments, so they alone ask for a retry after one second.
    const mustExpire = counted - limit + 1;
    if (mustExpire > log.times.length) return 1000;
    return Math.max(1000, log.times[mustExpire - 1]! + this.limits.windowMs - now);
  }

  private dropIfEmpty(table: Table<Log>, key: string, now: number): void {
    const log = table.get(key);
    if (!log || log.pending > 0) return;
    const cutoff = now - this.limits.windowMs;
    if (log.times.every((t) => t <= cutoff)) table.delete(key);
  }

  /** No failure of this address in the window, and no attempt of it in progress. */
  private isClean(addr: string, now: number): boolean {
    const log = this.byAddress.get(addr);
    return !log || (log.pending === 0 && log.times.every((t) => t <= now - this.limits.windowMs || t > now));
  }

  private isKnown(account: string, addr: string, now: number): boolean {
    const seen = this.known.get(account)?.get(addr);
    return seen !== undefined && now - seen < this.limits.knownAddressMs && now >= seen;
  }

  private remember(account: string, addr: string, now: number): void {
    let addresses = this.known.get(account);
    if (!addresses) {
      addresses = new Map();
      this.known.set(account, addresses);
    }
    addresses.delete(addr);
    addresses.set(addr, now);
    while (addresses.size > MAX_KNOWN_PER_ACCOUNT) addresses.delete(addresses.keys().next().value as string);
  }
}
