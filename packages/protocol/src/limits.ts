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
