// Plans and their monthly prices in cents. Prices can be overridden by the operator with
// RAMPART_PLAN_PRICES='{"pro":2900,"enterprise":29900}' (cents), see docs/api.md.

export const PLANS = ['free', 'pro', 'enterprise'] as const;
export type Plan = (typeof PLANS)[number];

export interface PlanInfo {
  priceCents: number;
  apiKeys: boolean;
  dnsFailover: boolean;
  /**
   * Shield servers an account may have (decommissioned ones do not count). Every server can raise
   * notifications and hold an agent connection, so the plan bounds what one account costs the
   * others (docs/api.md "Plans and limits").
   */
  maxServers: number;
  /** Custom rules (/api/rules) an account may have, enabled or not (docs/rules.md "Limits"). */
  maxCustomRules: number;
}

export type PlanTable = Record<Plan, PlanInfo>;

export const DEFAULT_PLANS: PlanTable = {
  free: { priceCents: 0, apiKeys: false, dnsFailover: false, maxServers: 3, maxCustomRules: 5 },
  pro: { priceCents: 2900, apiKeys: true, dnsFailover: true, maxServers: 25, maxCustomRules: 25 },
  enterprise: { priceCents: 29900, apiKeys: true, dnsFailover: true, maxServers: 1000, maxCustomRules: 250 },
};

export function isPlan(value: string): value is Plan {
  return (PLANS as readonly string[]).includes(value);
}

export function plansFromEnv(raw: string | undefined): PlanTable {
  if (!raw) return DEFAULT_PLANS;
  const parsed: unknown = JSON.parse(raw);
  if (!parsed || typeof parsed !== 'object') throw new Error('RAMPART_PLAN_PRICES must be a JSON object');
  const table: PlanTable = structuredClone(DEFAULT_PLANS);
  for (const [plan, cents] of Object.entries(parsed)) {
    if (!isPlan(plan)) throw new Error(`RAMPART_PLAN_PRICES: unknown plan ${plan}`);
    if (typeof cents !== 'number' || !Number.isInteger(cents) || cents < 0) {
      throw new Error(`RAMPART_PLAN_PRICES: price of ${plan} must be a whole number of cents`);
    }
    table[plan].priceCents = cents;
  }
  return table;
}

export const dollars = (cents: number): number => Math.round(cents) / 100;
/** Cents as people read them: "$29.00", "-$1.50". */
export const money = (cents: number): string => `${cents < 0 ? '-' : ''}$${(Math.abs(cents) / 100).toFixed(2)}`;
/** A plan's name in a sentence: "Pro". */
export const planName = (plan: string): string => plan.charAt(0).toUpperCase() + plan.slice(1);
/** Dollars with at most two decimals to integer cents; callers validate the decimals first. */
export const cents = (dollarsValue: number): number => Math.round(dollarsValue * 100);
export const hasAtMostTwoDecimals = (v: number): boolean => Math.abs(Math.round(v * 100) - v * 100) < 1e-6;
