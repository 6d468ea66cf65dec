/**
 * Capped exponential backoff with full jitter: the n-th wait is uniform in [0, min(cap, base * 2^n)].
 * Reset after a healthy connection. Random source injectable so tests are deterministic.
 */
export class Backoff {
  private attempt = 0;

  constructor(
    private readonly baseMs = 1000,
    private readonly capMs = 60_000,
    private readonly random: () => number = Math.random,
  ) {}

  next(): number {
    const ceiling = Math.min(this.capMs, this.baseMs * 2 ** this.attempt);
    this.attempt = Math.min(this.attempt + 1, 30);
    return Math.floor(this.random() * ceiling);
  }

  reset(): void {
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
