/**
 * Limits of an account that the service enforces and clients may show, in one place (the agent
 * channel's own are AGENT_LIMITS, beside the messages they bound).
 */
export const ACCOUNT_LIMITS = {
  /** API keys one account may hold (Pro and Enterprise). */
  apiKeys: 10,
} as const;
