/** Time as the agent's loops see it: injected, so tests drive time instead of sleeping. */
export interface Clock {
  now(): number;
  /** Resolves after ms, or at once when the signal aborts. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  sleep: delay,
};

export interface BackoffOptions {
  baseMs: number;
  capMs: number;
  /**
   * `full`: the n-th wait is uniform in [0, ceiling] (reconnects: spreads a fleet's retries);
   * `equal`: uniform in [ceiling/2, ceiling] (orders: never retries sooner than half the step).
   */
  jitter?: 'full' | 'equal';
  random?: () => number;
  clock?: Clock;
}

/**
 * Capped exponential backoff with jitter, ceiling min(cap, base * 2^n), reset after a success.
 * Every retry loop of the agent goes through it; its clock and random source are injectable.
 */
export class Backoff {
  private attempt = 0;
  /** Set by spread(): the next waits are uniform over this window, whatever the attempt. */
  private spreadMs = 0;
  private spreadLeft = 0;
  readonly clock: Clock;
  private readonly random: () => number;

  constructor(private readonly options: BackoffOptions) {
    this.clock = options.clock ?? systemClock;
    this.random = options.random ?? Math.random;
  }

  /** The next wait in ms (and one step further up). */
  next(): number {
    if (this.spreadLeft > 0) {
      this.spreadLeft--;
      return Math.floor(this.random() * this.spreadMs);
    }
    const ceiling = Math.min(this.options.capMs, this.options.baseMs * 2 ** this.attempt);
    this.attempt = Math.min(this.attempt + 1, 30);
    const floor = this.options.jitter === 'equal' ? ceiling / 2 : 0;
    return Math.floor(floor + this.random() * (ceiling - floor));
  }

  /** Sleeps the next wait on the injected clock; returns how long it waited for. */
  async wait(signal?: AbortSignal): Promise<number> {
    const ms = this.next();
    await this.clock.sleep(ms, signal);
    return ms;
  }

  /** Back to the first step, and out of a spread. */
  reset(): void {
    this.attempt = 0;
    this.spreadLeft = 0;
  }

  /**
   * The next `attempts` waits are each uniform in [0, windowMs]; after them the steps go on from
   * the first whose ceiling reaches the window. For when the other end announced its restart:
   * the retries of many clients arrive evenly across the window, and one whose try came while the
   * other end was still down picks again over the whole window instead of over a short first
   * step, so the retries do not bunch up the moment it is back.
   */
  spread(windowMs: number, attempts = 3): void {
    this.spreadMs = windowMs;
    this.spreadLeft = attempts;
    this.attempt = 0;
    while (this.attempt < 30 && this.options.baseMs * 2 ** this.attempt < windowMs) this.attempt++;
  }
}

/** Resolves after ms, or at once when the signal aborts. */
export function delay(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** After a close with CLOSE.restarting, an agent's one wait before reconnecting is uniform over this window. */
export const RESTART_SPREAD_MS = 10_000;

/** Reconnects to the service: 1 s doubling to 60 s, full jitter. */
export function reconnectBackoff(extra: Pick<BackoffOptions, 'random' | 'clock'> = {}): Backoff {
  return new Backoff({ baseMs: 1000, capMs: 60_000, jitter: 'full', ...extra });
}

/** Tries while the service refuses the agent's token: 30 s doubling to 10 min, equal jitter (never sooner than half the step). */
export function tokenRefusedBackoff(extra: Pick<BackoffOptions, 'random' | 'clock'> = {}): Backoff {
  return new Backoff({ baseMs: 30_000, capMs: 600_000, jitter: 'equal', ...extra });
}
