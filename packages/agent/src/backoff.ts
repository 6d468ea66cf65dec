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
  /** Set by spreadNext: the next wait is uniform over this window, whatever the attempt. */
  private spreadMs: number | undefined;
  readonly clock: Clock;
  private readonly random: () => number;

  constructor(private readonly options: BackoffOptions) {
    this.clock = options.clock ?? systemClock;
    this.random = options.random ?? Math.random;
  }

  /** The next wait in ms (and one step further up). */
  next(): number {
    if (this.spreadMs !== undefined) {
      const ms = Math.floor(this.random() * this.spreadMs);
      this.spreadMs = undefined;
      return ms;
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

  /** Back to the first step (a pending spreadNext still applies). */
  reset(): void {
    this.attempt = 0;
  }

  /**
   * The next wait only: uniform in [0, windowMs], then the steps start over from the first. Used
   * when the other end announced its restart, so the retries of many clients arrive evenly
   * across the window rather than in a burst followed by an exponential tail.
   */
  spreadNext(windowMs: number): void {
    this.spreadMs = windowMs;
    this.attempt = 0;
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
