import type { Clock } from '../src/backoff.js';

/** A clock the test moves: sleepers wake when advance() passes their deadline (or their signal aborts). */
export class FakeClock implements Clock {
  private sleepers: { until: number; wake(): void }[] = [];

  constructor(private t = Date.UTC(2026, 10, 22)) {}

  now(): number {
    return this.t;
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal?.aborted) return resolve();
      const sleeper = {
        until: this.t + ms,
        wake: () => {
          this.sleepers = this.sleepers.filter((s) => s !== sleeper);
          signal?.removeEventListener('abort', sleeper.wake);
          resolve();
        },
      };
      this.sleepers.push(sleeper);
      signal?.addEventListener('abort', sleeper.wake, { once: true });
    });
  }

  /** Moves time forward and wakes every sleeper whose deadline has come. */
  advance(ms: number): void {
    this.t += ms;
    for (const s of [...this.sleepers]) if (s.until <= this.t) s.wake();
  }

  /** How many loops are asleep on this clock. */
  get sleeping(): number {
    return this.sleepers.length;
  }
}
