/**
 * Limits of an account that the service enforces and clients may show, in one place (the agent
 * channel's own are AGENT_LIMITS, beside the messages they bound).
 */
export const ACCOUNT_LIMITS = {
  /** API keys one account may hold (Pro and Enterprise). */
  apiKeys: 10,
} as const;

/**
 * Traffic analytics (GET /api/analytics, docs/analytics.md): how long the service keeps each
 * resolution and what one answer may cover, for the service and the clients that draw it.
 */
export const ANALYTICS_LIMITS = {
  /** Minute rollups are kept (and accepted from agents) for this long. */
  minuteRetentionHours: 48,
  /** Hourly rollups are kept this long. */
  hourRetentionDays: 30,
  /** Points in one answer's series. */
  maxPoints: 1440,
  /** Without a step, ranges up to this long are answered by the minute, longer ones by the hour. */
  minuteStepMaxRangeHours: 6,
  /** Entries in each top list. */
  top: 10,
  /** The agent's default interval between batches. */
  intervalMs: 60_000,
} as const;

/**
 * Request latency, as the agent samples it (docs/api.md "Rollout"): HAProxy logs one request in
 * LATENCY_SAMPLE_EVERY, chosen at random, with its total active time (%Ta), and the agent counts
 * them per domain in buckets whose upper bounds, in milliseconds, are these; the last bucket
 * counts what took longer than the last bound. Buckets add up exactly across intervals and
 * servers, which percentiles do not.
 */
export const LATENCY_BUCKETS_MS = [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000] as const;
export const LATENCY_SAMPLE_EVERY = 16;

/** The bucket a latency of `ms` falls in (an index into a histogram of LATENCY_BUCKETS_MS.length + 1). */
export function latencyBucket(ms: number): number {
  const i = LATENCY_BUCKETS_MS.findIndex((bound) => ms <= bound);
  return i === -1 ? LATENCY_BUCKETS_MS.length : i;
}

/**
 * The 99th percentile of a histogram, as the upper bound of the bucket it falls in (Infinity in
 * the last, open one); undefined without samples.
 */
export function histogramP99(counts: readonly number[]): number | undefined {
  const total = counts.reduce((a, b) => a + b, 0);
  if (total === 0) return undefined;
  const rank = Math.ceil(total * 0.99);
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    seen += counts[i]!;
    if (seen >= rank) return LATENCY_BUCKETS_MS[i] ?? Infinity;
  }
  return Infinity;
}
