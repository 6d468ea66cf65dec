import type { ServiceContext } from './context.js';
import { credentialMessages, newNonce, type CredentialAck, type CredentialChange, type CredentialChangeMessage, type CredentialMessage } from './credential-messages.js';

/**
 * What an API key or a session cookie resolved to, kept in this process so the management API does
 * not ask the database on every request (docs/architecture.md "Several control-plane processes").
 *
 * Revocation stays instant: whatever ends a credential or changes an account's state publishes a
 * credential message on the change bus after its commit, and every process, this one included,
 * drops the matching entries on receipt and acknowledges it on the bus. The publisher drops its
 * own at once and answers its request only once every process listening on the bus has
 * acknowledged (or after ECHO_TIMEOUT_MS), so the very next request, wherever it lands, is refused.
 * An entry also expires after `ttlMs` (a safety net, not the mechanism), the least recently used
 * go first beyond `maxEntries`, and nothing is cached while the bus is not listening.
 */

export interface CachedCredential {
  kind: 'key' | 'session';
  accountId: string;
  plan: string;
  state: string;
  /** API keys: the key's id, and when its last_used_at was last written (ms). */
  keyId?: string;
  keyName?: string;
  keyPrefix?: string;
  /** Sessions: the signed-in user's e-mail (who the audit log names). */
  email?: string;
  lastUsedMs?: number | null;
  /** Sessions: the token's SHA-256 and when the session expires (ms). */
  tokenHash?: string;
  expiresMs?: number;
}

interface Entry {
  value: CachedCredential;
  cachedAt: number;
}

export interface CredentialCacheOptions {
  maxEntries?: number;
  ttlMs?: number;
}

export const CREDENTIAL_CACHE_DEFAULTS = { maxEntries: 10_000, ttlMs: 60_000 } as const;

/** How long a publisher waits for every process's acknowledgement before answering anyway. */
export const ACK_TIMEOUT_MS = 2_000;

interface AckWait {
  /** How many processes must acknowledge; undefined until known (acks are collected meanwhile). */
  expected: number | undefined;
  from: Set<string>;
  done(ok: boolean): void;
}

export class CredentialCache {
  private readonly entries = new Map<string, Entry>();
  private readonly waits = new Map<string, AckWait>();
  /** This process's id in acknowledgements. */
  readonly instanceId = newNonce();
  readonly maxEntries: number;
  readonly ttlMs: number;
  /**
   * Bumped by every invalidation. A lookup that began before an invalidation does not store what
   * it read: it may be the very credential just revoked.
   */
  generation = 0;

  constructor(options: CredentialCacheOptions = {}) {
    this.maxEntries = options.maxEntries ?? CREDENTIAL_CACHE_DEFAULTS.maxEntries;
    this.ttlMs = options.ttlMs ?? CREDENTIAL_CACHE_DEFAULTS.ttlMs;
  }

  get size(): number {
    return this.entries.size;
  }

  get(key: string, now: number): CachedCredential | undefined {
    const e = this.entries.get(key);
    if (!e) return undefined;
    const age = now - e.cachedAt;
    if (age < 0 || age >= this.ttlMs) {
      this.entries.delete(key);
      return undefined;
    }
    this.entries.delete(key);
    this.entries.set(key, e); // most recently used last
    return e.value;
  }

  /** Stores what a lookup begun at `generation` read, unless something was invalidated since. */
  set(key: string, value: CachedCredential, now: number, generation: number): void {
    if (generation !== this.generation) return;
    this.entries.delete(key);
    this.entries.set(key, { value, cachedAt: now });
    while (this.entries.size > this.maxEntries) this.entries.delete(this.entries.keys().next().value as string);
  }

  /**
   * What the bus delivered. A change drops the entries it names and is acknowledged through `ack`;
   * an acknowledgement counts towards the wait of the process that published the change.
   */
  receive(m: CredentialMessage, ack?: (a: CredentialAck) => void): void {
    if (m.kind === 'credential-ack') {
      const wait = this.waits.get(m.nonce);
      if (wait) {
        wait.from.add(m.from);
        this.settle(m.nonce, wait);
      }
      return;
    }
    this.apply(m);
    ack?.({ kind: 'credential-ack', nonce: m.nonce, from: this.instanceId });
  }

  /** Drops every entry the message names. */
  apply(m: CredentialChangeMessage): void {
    this.generation++;
    const drop = (match: (v: CachedCredential) => boolean) => {
      for (const [key, e] of this.entries) if (match(e.value)) this.entries.delete(key);
    };
    if ('keyIds' in m) {
      const ids = new Set(m.keyIds);
      drop((v) => v.keyId !== undefined && ids.has(v.keyId));
    } else if ('tokenHashes' in m) {
      const hashes = new Set(m.tokenHashes);
      drop((v) => v.tokenHash !== undefined && hashes.has(v.tokenHash));
    } else {
      const ids = new Set(m.accountIds);
      const sessionsOnly = m.kind === 'session-ended';
      drop((v) => ids.has(v.accountId) && (!sessionsOnly || v.kind === 'session'));
    }
  }

  /**
   * Starts collecting acknowledgements of message `nonce`; `expect` then says how many processes
   * must acknowledge. Resolves true once they all have, false after timeoutMs.
   */
  awaitAcks(nonce: string, timeoutMs: number): { expect(n: number): void; done: Promise<boolean> } {
    let wait!: AckWait;
    const done = new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => wait.done(false), timeoutMs);
      timer.unref();
      wait = {
        expected: undefined,
        from: new Set(),
        done: (ok) => {
          clearTimeout(timer);
          this.waits.delete(nonce);
          resolve(ok);
        },
      };
    });
    this.waits.set(nonce, wait);
    return {
      expect: (n) => {
        wait.expected = Math.max(1, n);
        this.settle(nonce, wait);
      },
      done,
    };
  }

  private settle(nonce: string, wait: AckWait): void {
    if (this.waits.get(nonce) === wait && wait.expected !== undefined && wait.from.size >= wait.expected) wait.done(true);
  }

  /** Forgets everything (the bus may have missed messages). */
  clear(): void {
    this.generation++;
    this.entries.clear();
  }
}

const caches = new WeakMap<ServiceContext, CredentialCache>();

/** The cache of this context's process (one per ServiceContext). */
export function credentialCache(ctx: ServiceContext): CredentialCache {
  let cache = caches.get(ctx);
  if (!cache) {
    cache = new CredentialCache();
    caches.set(ctx, cache);
  }
  return cache;
}

/** Whether cached credentials may be used now: not while the bus may be missing messages. */
export function credentialCacheUsable(ctx: ServiceContext): boolean {
  const live = ctx.credentialBus?.live() ?? true;
  // Nothing cached before a gap in the bus is trusted after it (resync clears it too).
  if (!live) credentialCache(ctx).clear();
  return live;
}

/**
 * After the commit that ended credentials or changed an account: drops them here at once, then
 * publishes the change to every process and waits (at most ACK_TIMEOUT_MS) until every process
 * listening on the bus, this one included, has acknowledged it, so the answer that follows is not
 * sent before they all forgot the credential.
 */
export async function credentialsChanged(ctx: ServiceContext, change: CredentialChange): Promise<void> {
  const cache = credentialCache(ctx);
  const messages = credentialMessages(change);
  for (const m of messages) cache.apply(m);
  const bus = ctx.credentialBus;
  if (!bus || messages.length === 0) return;
  // While the bus is down nobody could acknowledge; the others are not using their caches then.
  const live = bus.live();
  await Promise.all(
    messages.map(async (m) => {
      const acks = live ? cache.awaitAcks(m.nonce, ACK_TIMEOUT_MS) : undefined;
      try {
        const [listeners] = await Promise.all([bus.listeners ? bus.listeners() : 1, bus.publish(m)]);
        acks?.expect(listeners);
      } catch (err) {
        // The change is committed; other processes drop the entry within the cache's TTL at worst.
        acks?.expect(0);
        bus.warn?.(`publishing ${m.kind} failed: ${String(err)}`);
        return;
      }
      if (acks && !(await acks.done)) bus.warn?.(`${m.kind}: not every process acknowledged it within ${ACK_TIMEOUT_MS} ms`);
    }),
  );
}
