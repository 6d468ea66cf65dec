import { createHash, randomBytes, randomUUID, scrypt, timingSafeEqual } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { AppError } from './errors.js';

/** The fixed 5-character prefix of every API key. */
export const API_KEY_PREFIX = 'rmpk_';
export const SERVER_TOKEN_PREFIX = 'rmps_';
export const INVITATION_PREFIX = 'rmpi_';

export function sha256(value: string): string {
  return createHash('sha256').update(value).digest('hex');
}

export function newApiKey(): string {
  return API_KEY_PREFIX + randomBytes(32).toString('hex');
}

export function newServerToken(): string {
  return SERVER_TOKEN_PREFIX + randomBytes(32).toString('hex');
}

export function newInvitationToken(): string {
  return INVITATION_PREFIX + randomBytes(32).toString('hex');
}

export function newSessionToken(): string {
  return randomBytes(32).toString('base64url');
}

export function newSecret(): string {
  return randomBytes(32).toString('hex');
}

/** A bot protection key's id (protocol BOT_KEY_ID_PATTERN): 8 random hex digits. */
export function newBotKeyId(): string {
  return randomBytes(4).toString('hex');
}

export function newId(): string {
  return randomUUID();
}

const SCRYPT = { N: 16384, r: 8, p: 1, keylen: 32 } as const;

/**
 * At most `concurrency` tasks run at once and at most `maxWaiting` wait for a turn, first come
 * first served; a task beyond that is refused at once (run throws the error makeFull returns)
 * instead of joining an unbounded queue.
 */
export class BoundedQueue {
  private running = 0;
  private readonly waiting: (() => void)[] = [];
  /** The most tasks ever seen running at once, and how many were run (diagnostics and tests). */
  peak = 0;
  started = 0;

  constructor(
    readonly concurrency: number,
    readonly maxWaiting: number,
    private readonly makeFull: () => Error,
  ) {
    if (!(concurrency >= 1) || !(maxWaiting >= 0)) throw new Error('BoundedQueue: concurrency must be at least 1 and maxWaiting at least 0');
  }

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.running < this.concurrency) {
      this.running++;
    } else {
      if (this.waiting.length >= this.maxWaiting) throw this.makeFull();
      // release() hands its slot over: running stays the same.
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    }
    if (this.running > this.peak) this.peak = this.running;
    this.started++;
    try {
      return await task();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.running--;
    }
  }

  get stats(): { running: number; waiting: number; peak: number; started: number } {
    return { running: this.running, waiting: this.waiting.length, peak: this.peak, started: this.started };
  }
}

/** libuv's threadpool, shared by scrypt with file system calls and DNS lookups. */
const THREADPOOL_SIZE = Math.min(1024, Math.max(1, Number(process.env.UV_THREADPOOL_SIZE) || 4));

/**
 * Password hashing runs on libuv's threadpool: at most one hash per CPU, and never on every thread
 * of the pool (one is left for file system calls and DNS lookups); at most 64 more wait. Beyond
 * that the caller gets 503 with Retry-After at once, so a burst of sign-ins cannot queue without
 * bound in front of everything else the threadpool does.
 */
export const passwordHashing = new BoundedQueue(Math.max(1, Math.min(availableParallelism(), THREADPOOL_SIZE - 1)), 64, () => new AppError('hashing_busy', undefined, { retryAfterSeconds: 1 }));

function scryptQueued(password: string, salt: Buffer, keylen: number, params: { N: number; r: number; p: number }): Promise<Buffer> {
  return passwordHashing.run(
    () =>
      new Promise<Buffer>((resolve, reject) => {
        scrypt(password, salt, keylen, params, (err, key) => (err ? reject(err) : resolve(key)));
      }),
  );
}

/** scrypt$N$r$p$salt$hash, all parameters kept so they can be raised later. */
export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await scryptQueued(password, salt, SCRYPT.keylen, SCRYPT);
  return ['scrypt', SCRYPT.N, SCRYPT.r, SCRYPT.p, salt.toString('base64'), key.toString('base64')].join('$');
}

export async function verifyPassword(password: string, stored: string | null): Promise<boolean> {
  const parts = (stored ?? '').split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') {
    // Spend the same time as a real check so a missing account is not told apart by timing.
    await scryptQueued(password, randomBytes(16), SCRYPT.keylen, SCRYPT);
    return false;
  }
  const [, n, r, p, salt, hash] = parts as [string, string, string, string, string, string];
  const expected = Buffer.from(hash, 'base64');
  const key = await scryptQueued(password, Buffer.from(salt, 'base64'), expected.length, { N: Number(n), r: Number(r), p: Number(p) });
  return key.length === expected.length && timingSafeEqual(key, expected);
}

/** Constant-time comparison of two secrets of any length (compares their hashes). */
export function secretsEqual(a: string, b: string): boolean {
  return timingSafeEqual(createHash('sha256').update(a).digest(), createHash('sha256').update(b).digest());
}
