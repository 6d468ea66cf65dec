import { Resolver } from 'node:dns/promises';
import { BlockList, isIP, isIPv4 } from 'node:net';
import { isCrawlerPrefix, SEARCH_CRAWLERS, searchCrawler, underCrawlerDomain, type CrawlerAddressList } from '@rampart/protocol';
import { systemClock, type Clock } from './backoff.js';
import { canonicalIp } from './certificates/resolve.js';

/**
 * Verified search crawlers (docs/bots.md "Verified crawlers"): a request whose User-Agent claims a
 * search crawler passes the bot challenge only once its address is verified: by the owner's
 * published address list when the control plane sent a current one (crawlers/ranges), otherwise by
 * forward-confirmed reverse DNS. HAProxy logs the claim with the challenge (events.ts); the agent
 * verifies the address here, off the request path, and hands `address -> crawler id` to the
 * running HAProxy's map through its runtime API (RuntimeCrawlerMap). No DNS answer is trusted
 * beyond that check.
 */

/** The DNS questions FCrDNS asks; node's `dns/promises` Resolver, or a stand-in in tests. */
export interface CrawlerDns {
  reverse(ip: string): Promise<string[]>;
  resolve4(name: string): Promise<string[]>;
  resolve6(name: string): Promise<string[]>;
  /** Ends this resolver's outstanding queries (called when a lookup runs past its timeout). */
  cancel?(): void;
}

/** Where verifications go: the running HAProxy's verified crawler map. */
export interface CrawlerMapSink {
  add(ip: string, crawlerId: string): void;
  remove(ip: string): void;
}

export interface CrawlerVerifierOptions {
  /** A resolver per lookup (so one that times out can be cancelled alone). */
  dns: () => CrawlerDns;
  sink?: CrawlerMapSink;
  clock?: Clock;
  /** How long a verified address stays verified (24 h). */
  verifiedTtlMs?: number;
  /** How long an address that failed the check is not asked about again (1 h). */
  failedTtlMs?: number;
  /**
   * The same after a DNS error or timeout, which proves nothing either way (5 min); a network one
   * of whose lookups timed out waits behind every other network for as long.
   */
  errorTtlMs?: number;
  /** One lookup (reverse and forward queries together) gives up after this long (3 s). */
  lookupTimeoutMs?: number;
  /** Lookups at the same time (16); one network (networkOf) has at most one running. */
  concurrency?: number;
  /** Networks remembered as slow (a lookup timed out); past it the oldest is forgotten (10,000). */
  maxSlowNetworks?: number;
  /** Addresses waiting for a lookup, all networks together (1,024). */
  queueMax?: number;
  /** Addresses of one network waiting for a lookup; its further claims are dropped, to come back later (8). */
  networkQueueMax?: number;
  /** Verified addresses kept; past it the oldest is forgotten and leaves the map (10,000). */
  maxVerified?: number;
  /** Failed addresses remembered; past it the oldest is forgotten (10,000). */
  maxFailed?: number;
  /** PTR names of one address looked at (4). */
  maxNames?: number;
  /** How often expired entries are swept out (60 s). */
  sweepIntervalMs?: number;
  log?: (level: 'info' | 'warn' | 'error', msg: string) => void;
}

/** DNS answers that say "no such record": a definite failure, cached for failedTtlMs. */
const NO_RECORD = new Set(['ENOTFOUND', 'ENODATA', 'ENONAME', 'NXDOMAIN']);
/** A DNS name as it may appear in a PTR answer: letters, digits, hyphens, dots (and `_`, seen in the wild). */
const NAME_RE = /^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252})$/;

type Outcome = { id: string } | { id: null; transient: boolean; timedOut?: boolean };

/**
 * The network a claim is queued under, for fairness: the IPv4 /16 or the IPv6 /32 of the address.
 * Whoever makes lookups hang runs the reverse zones of its addresses, so it holds address space;
 * spread over many such networks it is rare and dear, and each network gets one lookup at a time.
 */
export function networkOf(ip: string): string {
  if (isIPv4(ip)) return `${ip.split('.').slice(0, 2).join('.')}/16`;
  const groups = canonicalIp(ip).split('::')[0]!.split(':');
  return `${groups[0] || '0'}:${groups[1] ?? '0'}::/32`;
}

/** The claims waiting for one network's turn. */
interface NetworkQueue {
  addresses: string[];
  running: number;
}

/** One crawler's published ranges as the agent checks them, until they expire. */
interface AddressList {
  ranges: BlockList;
  expires: number;
}

/**
 * The check of the addresses that claim a crawler: the owners' published lists first (no DNS),
 * then FCrDNS, bounded and fair: one lookup per address at a time (claims for an address already
 * queued, in flight or cached cost nothing), queues per network taking turns with at most one
 * lookup each (a network whose lookups hang holds one slot, and waits behind the others once one
 * timed out), at most `concurrency` lookups at once, bounded queues, a short timeout per lookup,
 * and caches of verified and failed addresses, each with an expiry and a size cap. A verification
 * is added to the sink; an expiry or eviction removes it.
 *
 * The cache is per address, not per claim: the check finds which crawler (if any) the address
 * belongs to, and HAProxy compares that with what each request claims, so an address verified as
 * Google that claims Bingbot stays challenged without another lookup.
 */
export class CrawlerVerifier {
  private readonly verified = new Map<string, { id: string; expires: number }>();
  private readonly failed = new Map<string, number>();
  /** Waiting claims by network, in turn order (a network that got a turn goes to the back). */
  private readonly networks = new Map<string, NetworkQueue>();
  private waiting = 0;
  /** Networks one of whose lookups timed out -> until when their turn comes only when no other network waits. */
  private readonly slow = new Map<string, number>();
  /** Queued or in flight. */
  private readonly pending = new Set<string>();
  private active = 0;
  private lists = new Map<string, AddressList>();
  private idleWaiters: (() => void)[] = [];
  private readonly clock: Clock;
  private readonly o: Required<Omit<CrawlerVerifierOptions, 'sink' | 'clock' | 'log' | 'dns'>>;
  /** Lookups started, claims dropped because a queue was full, and addresses settled by a published list (for tests and logs). */
  lookups = 0;
  dropped = 0;
  listed = 0;

  constructor(private readonly options: CrawlerVerifierOptions) {
    this.clock = options.clock ?? systemClock;
    this.o = {
      verifiedTtlMs: options.verifiedTtlMs ?? 24 * 3_600_000,
      failedTtlMs: options.failedTtlMs ?? 3_600_000,
      errorTtlMs: options.errorTtlMs ?? 300_000,
      lookupTimeoutMs: options.lookupTimeoutMs ?? 3_000,
      concurrency: options.concurrency ?? 16,
      queueMax: options.queueMax ?? 1024,
      networkQueueMax: options.networkQueueMax ?? 8,
      maxSlowNetworks: options.maxSlowNetworks ?? 10_000,
      maxVerified: options.maxVerified ?? 10_000,
      maxFailed: options.maxFailed ?? 10_000,
      maxNames: options.maxNames ?? 4,
      sweepIntervalMs: options.sweepIntervalMs ?? 60_000,
    };
  }

  /**
   * The owners' published address lists, as the control plane last sent them (crawlers/ranges):
   * they replace the previous ones, and the failures cached so far are forgotten (they were found
   * without these lists). A list past its expiry, or with a prefix the protocol does not allow, is
   * not used (its crawler falls back to reverse DNS).
   */
  setAddressLists(lists: readonly CrawlerAddressList[]): void {
    this.failed.clear();
    const next = new Map<string, AddressList>();
    for (const l of lists) {
      if (!searchCrawler(l.crawlerId) || !l.prefixes.every(isCrawlerPrefix)) {
        this.options.log?.('warn', `ignored the published address list of crawler ${JSON.stringify(l.crawlerId).slice(0, 40)}: not a known crawler, or a prefix out of bounds`);
        continue;
      }
      const ranges = new BlockList();
      for (const p of l.prefixes) {
        const [addr, bits] = p.split('/') as [string, string];
        ranges.addSubnet(addr, Number(bits), isIPv4(addr) ? 'ipv4' : 'ipv6');
      }
      next.set(l.crawlerId, { ranges, expires: l.expiresAt * 1000 });
    }
    this.lists = next;
  }

  /**
   * An address claimed to be crawler `crawlerId` (from an authenticated event line). Unknown ids
   * and anything that is not an IP address are ignored. An address in a crawler's current
   * published list is verified at once, without DNS; one outside every list, claiming a crawler
   * that has a current list, fails at once. Otherwise the address is queued for a lookup unless it
   * is already cached, queued or being looked up.
   */
  claim(ip: string, crawlerId: string): void {
    if (typeof ip !== 'string' || typeof crawlerId !== 'string' || !searchCrawler(crawlerId) || !isIP(ip)) return;
    const key = canonicalIp(ip);
    this.expire(key);
    if (this.verified.has(key) || this.failed.has(key) || this.pending.has(key)) return;
    const listed = this.inPublishedList(key, crawlerId);
    if (listed !== undefined) {
      this.listed++;
      this.settle(key, listed === null ? { id: null, transient: false } : { id: listed }, 'its published address list');
      return;
    }
    this.enqueue(key);
    this.pump();
  }

  /**
   * The crawler whose current published list holds the address; null when none does and the
   * claimed crawler has a current list (the list is the owner's word); undefined when DNS must tell.
   */
  private inPublishedList(key: string, crawlerId: string): string | null | undefined {
    const now = this.clock.now();
    const family = isIPv4(key) ? 'ipv4' : 'ipv6';
    for (const [id, l] of this.lists) if (l.expires > now && l.ranges.check(key, family)) return id;
    const own = this.lists.get(crawlerId);
    return own && own.expires > now ? null : undefined;
  }

  /**
   * Queues an address under its network. Bounded twice: a network's own queue (its further claims
   * are dropped) and all queues together, where a newcomer displaces the last claim of the longest
   * queue when its own is shorter, so a flood from some networks never shuts out another one.
   */
  private enqueue(key: string): void {
    const net = networkOf(key);
    const own = this.networks.get(net) ?? { addresses: [], running: 0 };
    if (own.addresses.length >= this.o.networkQueueMax) {
      this.dropped++;
      return;
    }
    if (this.waiting >= this.o.queueMax) {
      let longest: NetworkQueue | undefined;
      for (const q of this.networks.values()) if (!longest || q.addresses.length > longest.addresses.length) longest = q;
      if (!longest || longest.addresses.length <= own.addresses.length + 1) {
        this.dropped++;
        return;
      }
      this.pending.delete(longest.addresses.pop()!);
      this.waiting--;
      this.dropped++;
    }
    this.networks.set(net, own);
    own.addresses.push(key);
    this.waiting++;
    this.pending.add(key);
  }

  /** The next network whose turn it is: the first one waiting with no lookup running, slow ones last. */
  private nextNetwork(): [string, NetworkQueue] | undefined {
    const now = this.clock.now();
    let slow: [string, NetworkQueue] | undefined;
    for (const entry of this.networks) {
      const q = entry[1];
      if (q.running > 0 || q.addresses.length === 0) continue;
      if ((this.slow.get(entry[0]) ?? 0) <= now) return entry;
      slow ??= entry;
    }
    return slow;
  }

  /** The verified addresses now (address -> crawler id): what the map must hold. */
  entries(): Map<string, string> {
    const now = this.clock.now();
    const out = new Map<string, string>();
    for (const [ip, v] of this.verified) if (v.expires > now) out.set(ip, v.id);
    return out;
  }

  /** Removes every expired entry (verified ones from the sink too). */
  sweep(): void {
    for (const key of [...this.verified.keys()]) this.expire(key);
    for (const key of [...this.failed.keys()]) this.expire(key);
    const now = this.clock.now();
    for (const [net, until] of [...this.slow]) if (until <= now) this.slow.delete(net);
  }

  /** Sweeps every sweepIntervalMs until the signal aborts. */
  async start(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      await this.clock.sleep(this.o.sweepIntervalMs, signal);
      if (!signal.aborted) this.sweep();
    }
  }

  /** Resolves when nothing is queued or in flight. */
  settled(): Promise<void> {
    if (this.active === 0 && this.waiting === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  get inFlight(): number {
    return this.active;
  }

  get queued(): number {
    return this.waiting;
  }

  private expire(key: string): void {
    const now = this.clock.now();
    const v = this.verified.get(key);
    if (v && v.expires <= now) {
      this.verified.delete(key);
      this.options.sink?.remove(key);
    }
    const f = this.failed.get(key);
    if (f !== undefined && f <= now) this.failed.delete(key);
  }

  private pump(): void {
    while (this.active < this.o.concurrency) {
      const next = this.nextNetwork();
      if (!next) break;
      const [net, q] = next;
      const key = q.addresses.shift()!;
      this.waiting--;
      // Its turn is taken: to the back of the line.
      this.networks.delete(net);
      this.networks.set(net, q);
      q.running++;
      this.active++;
      this.lookups++;
      void this.verify(key, net).finally(() => {
        this.active--;
        q.running--;
        if (q.running === 0 && q.addresses.length === 0 && this.networks.get(net) === q) this.networks.delete(net);
        this.pending.delete(key);
        this.pump();
        if (this.active === 0 && this.waiting === 0) for (const w of this.idleWaiters.splice(0)) w();
      });
    }
  }

  private async verify(key: string, network: string): Promise<void> {
    const dns = this.options.dns();
    const stop = new AbortController();
    const timedOut = this.clock.sleep(this.o.lookupTimeoutMs, stop.signal).then((): Outcome => ({ id: null, transient: true, timedOut: true }));
    let outcome: Outcome;
    try {
      outcome = await Promise.race([fcrdns(dns, key, this.o.maxNames), timedOut]);
    } catch (err) {
      this.options.log?.('warn', `verifying crawler address ${key}: ${(err as Error).message}`);
      outcome = { id: null, transient: true };
    } finally {
      stop.abort();
    }
    if (outcome.id === null && outcome.transient) dns.cancel?.();
    if (outcome.id === null && outcome.timedOut) this.markSlow(network);
    this.settle(key, outcome, 'forward-confirmed reverse DNS');
  }

  private markSlow(network: string): void {
    this.slow.delete(network);
    this.slow.set(network, this.clock.now() + this.o.errorTtlMs);
    while (this.slow.size > this.o.maxSlowNetworks) this.slow.delete(this.slow.keys().next().value as string);
  }

  /** Caches what the check found: a verified address goes to the sink, a failed one is not asked about again for a while. */
  private settle(key: string, outcome: Outcome, how: string): void {
    const now = this.clock.now();
    if (outcome.id !== null) {
      this.verified.delete(key);
      this.verified.set(key, { id: outcome.id, expires: now + this.o.verifiedTtlMs });
      this.options.sink?.add(key, outcome.id);
      this.options.log?.('info', `verified ${key} as search crawler ${outcome.id} by ${how}`);
      while (this.verified.size > this.o.maxVerified) {
        const oldest = this.verified.keys().next().value as string;
        this.verified.delete(oldest);
        this.options.sink?.remove(oldest);
      }
    } else {
      this.failed.delete(key);
      this.failed.set(key, now + (outcome.transient ? this.o.errorTtlMs : this.o.failedTtlMs));
      while (this.failed.size > this.o.maxFailed) this.failed.delete(this.failed.keys().next().value as string);
    }
  }
}

/**
 * Forward-confirmed reverse DNS of one address: its PTR names (the first maxNames), each kept only
 * when it lies under a search crawler's documented domains, must resolve (A for an IPv4 address,
 * AAAA for IPv6) to the same address. Returns the crawler the address belongs to, or null, and
 * whether a null came from a DNS error rather than an answer.
 */
export async function fcrdns(dns: CrawlerDns, ip: string, maxNames = 4): Promise<Outcome> {
  const key = canonicalIp(ip);
  let transient = false;
  let names: string[];
  try {
    names = await dns.reverse(key);
  } catch (err) {
    return { id: null, transient: !NO_RECORD.has((err as NodeJS.ErrnoException).code ?? '') };
  }
  for (const raw of names.slice(0, maxNames)) {
    if (typeof raw !== 'string') continue;
    const name = raw.replace(/\.$/, '');
    if (!NAME_RE.test(name)) continue;
    const crawler = SEARCH_CRAWLERS.find((c) => underCrawlerDomain(c, name));
    if (!crawler) continue;
    let addresses: string[];
    try {
      addresses = isIPv4(key) ? await dns.resolve4(name) : await dns.resolve6(name);
    } catch (err) {
      if (!NO_RECORD.has((err as NodeJS.ErrnoException).code ?? '')) transient = true;
      continue;
    }
    if (addresses.some((a) => typeof a === 'string' && isIP(a) !== 0 && canonicalIp(a) === key)) return { id: crawler.id };
  }
  return { id: null, transient };
}

/** The real DNS: `server` (HOST:PORT, the agent's --resolver) or the system's servers. */
export function crawlerDns(server?: string): () => CrawlerDns {
  return () => {
    const resolver = new Resolver({ timeout: 1000, tries: 2 });
    if (server) resolver.setServers([server]);
    return resolver;
  };
}

/** A map path safe to put on an HAProxy CLI line (no blank, `;`, quote, backslash or control character). */
const SAFE_PATH_RE = /^\/[A-Za-z0-9._/@+,=-]+$/;
/** Entries per `add map` payload, well inside HAProxy's 16 KiB command buffer. */
const PAYLOAD_LINES = 100;

export interface RuntimeCrawlerMapOptions {
  /** One command on the master CLI, answered by the current worker (`@1 ...`). */
  command: (cmd: string) => Promise<string>;
  /** The map file as the running configuration names it (<configDir>/verified_crawlers.map), if any. */
  mapPath: () => Promise<string | undefined>;
  log?: (level: 'info' | 'warn' | 'error', msg: string) => void;
}

/**
 * The running HAProxy's verified crawler map, changed through its runtime API (no reload). Every
 * change runs after the previous one (a single chain), so a resync and single updates never
 * interleave. Only validated addresses and known crawler ids reach a command line.
 *
 * HAProxy 2.6's answers: `add map` of an existing key adds a second entry, `set map` of a missing
 * one answers "entry not found.", `del map` of a missing one "Key not found.", any command on a map
 * the running configuration lacks (bot protection off) "Unknown map identifier ...".
 */
export class RuntimeCrawlerMap implements CrawlerMapSink {
  private chain: Promise<void> = Promise.resolve();
  private warnedPath = false;

  constructor(private readonly options: RuntimeCrawlerMapOptions) {}

  add(ip: string, crawlerId: string): void {
    if (!safeEntry(ip, crawlerId)) return;
    void this.enqueue(`adding ${ip}`, async (path) => {
      // set first, so an address already in the map never gets a second entry
      const set = await this.run(`@1 set map ${path} ${ip} ${crawlerId}`);
      if (set === '') return;
      if (!/^entry not found\.?$/i.test(set)) throw new Error(set);
      const add = await this.run(`@1 add map ${path} ${ip} ${crawlerId}`);
      if (add !== '') throw new Error(add);
    });
  }

  remove(ip: string): void {
    if (!isIP(ip) || canonicalIp(ip) !== ip) return;
    void this.enqueue(`removing ${ip}`, async (path) => {
      const del = await this.run(`@1 del map ${path} ${ip}`);
      if (del !== '' && !/^key not found\.?$/i.test(del)) throw new Error(del);
    });
  }

  /**
   * Makes the running map hold exactly `entries()` (read when the turn comes), atomically: a new
   * version is prepared, filled and committed, which drops every older entry at once. For after a
   * reload or a (re)start, when the worker's map is the file rendered earlier.
   */
  sync(entries: () => ReadonlyMap<string, string>): Promise<void> {
    return this.enqueue('resyncing', async (path) => {
      const prepared = await this.run(`@1 prepare map ${path}`);
      const version = /^New version created: (\d+)$/.exec(prepared)?.[1];
      if (!version) throw new Error(prepared);
      const lines = [...entries()].filter(([ip, id]) => safeEntry(ip, id)).map(([ip, id]) => `${ip} ${id}`);
      for (let i = 0; i < lines.length; i += PAYLOAD_LINES) {
        const added = await this.run(`@1 add map @${version} ${path} <<\n${lines.slice(i, i + PAYLOAD_LINES).join('\n')}\n`);
        if (added !== '') throw new Error(added);
      }
      const committed = await this.run(`@1 commit map @${version} ${path}`);
      if (committed !== '') throw new Error(committed);
    });
  }

  /** Resolves when every change asked for so far has run. */
  idle(): Promise<void> {
    return this.chain;
  }

  private async run(cmd: string): Promise<string> {
    return (await this.options.command(cmd)).trim();
  }

  private enqueue(what: string, step: (path: string) => Promise<void>): Promise<void> {
    this.chain = this.chain.then(async () => {
      try {
        const path = await this.options.mapPath();
        if (!path) return;
        if (!SAFE_PATH_RE.test(path)) {
          if (!this.warnedPath)
            this.options.log?.(
              'warn',
              `the verified crawler map's path cannot go on an HAProxy command line (${JSON.stringify(path)}); verified crawlers take effect with the next configuration only`,
            );
          this.warnedPath = true;
          return;
        }
        await step(path);
      } catch (err) {
        const msg = (err as Error).message ?? String(err);
        // Bot protection is off in the running configuration: no map, nothing to keep current.
        if (/^Unknown map identifier/i.test(msg)) return;
        this.options.log?.('warn', `verified crawler map: ${what} failed: ${msg.slice(0, 200)}`);
      }
    });
    return this.chain;
  }
}

/** Only a canonical IP address and a known crawler id: nothing else reaches an HAProxy command. */
function safeEntry(ip: string, crawlerId: string): boolean {
  return typeof ip === 'string' && isIP(ip) !== 0 && canonicalIp(ip) === ip && !!searchCrawler(crawlerId) && /^[a-z0-9_-]+$/.test(crawlerId);
}
