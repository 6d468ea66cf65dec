/**
 * When a failed delivery is tried again: capped exponential backoff with full jitter. After the
 * n-th failed attempt the next one waits a random time from 0 up to min(30 s × 2^(n-1), 1 h):
 *
 *   after attempt   1     2     3     4     5      6      7      8 and on
 *   wait up to      30 s  1 min 2 min 4 min 8 min  16 min 32 min 1 h
 *
 * The randomness spreads the retries of many deliveries that failed together (a receiver that
 * was down for everyone) instead of sending them back at the same moment. A delivery still
 * failing a day after its first attempt is given up: about 55 attempts by then on average.
 */
export const RETRY_BASE_MS = 30_000;
export const RETRY_CAP_MS = 60 * 60_000;
export const DELIVERY_GIVE_UP_MS = 24 * 60 * 60_000;

/** How long to wait before the next attempt, after `attempt` (1, 2, ...) failed ones. */
export function nextAttemptDelayMs(attempt: number, random: () => number = Math.random): number {
  const ceiling = Math.min(RETRY_CAP_MS, RETRY_BASE_MS * 2 ** (Math.max(1, attempt) - 1));
  return Math.floor(random() * ceiling);
}

/** Whether a delivery first tried at `firstAttemptAt` is past the day it is given. */
export function shouldGiveUp(firstAttemptAt: Date, now: Date): boolean {
  return now.getTime() - firstAttemptAt.getTime() >= DELIVERY_GIVE_UP_MS;
}
