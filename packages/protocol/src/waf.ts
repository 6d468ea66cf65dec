import aiBotsFile from './ai-bots.json' with { type: 'json' };
import { isCidr, isCountryCode } from './validate.js';

export const RULE_TYPES = ['block_ip', 'allow_ip', 'block_country', 'rate_limit', 'block_bot', 'block_ai_bot'] as const;
export type RuleType = (typeof RULE_TYPES)[number];

/** Rule types that apply to the whole shield server and so take no domain_id. */
export const SERVER_WIDE_RULE_TYPES: readonly RuleType[] = ['rate_limit', 'block_bot'];

export const WAF_LEVELS = ['low', 'medium', 'high'] as const;
export type WafLevel = (typeof WAF_LEVELS)[number];

export const RATE_LIMIT_MIN = 1;
export const RATE_LIMIT_MAX = 10_000;
export const RATE_LIMIT_DEFAULT = 60;

export interface AiBot {
  name: string;
  pattern: string;
  operator: string;
}

export const AI_BOTS: readonly AiBot[] = aiBotsFile.bots;
const AI_BOTS_BY_LOWER_NAME = new Map(AI_BOTS.map((b) => [b.name.toLowerCase(), b]));

export function findAiBot(name: string): AiBot | undefined {
  return AI_BOTS_BY_LOWER_NAME.get(name.toLowerCase());
}

export type RuleValueCheck = { ok: true; value: string } | { ok: false; message: string };

function parseJsonObject(value: string): Record<string, unknown> | undefined {
  try {
    const parsed: unknown = JSON.parse(value);
    return parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)
      ? (parsed as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Checks a rule's value against the value table of docs/api.md and returns it in canonical form (AI crawler
 * names as listed, JSON values re-serialized with only their known field).
 */
export function checkRuleValue(ruleType: RuleType, value: string): RuleValueCheck {
  switch (ruleType) {
    case 'block_ip':
    case 'allow_ip':
      return isCidr(value)
        ? { ok: true, value }
        : { ok: false, message: 'value must be an IPv4 address with an optional /0 to /32 suffix, or an IPv6 address with an optional /0 to /128 suffix' };
    case 'block_country':
      return isCountryCode(value)
        ? { ok: true, value }
        : { ok: false, message: 'value must be a country code of exactly 2 uppercase letters' };
    case 'rate_limit': {
      const obj = parseJsonObject(value);
      const rpmMessage = `value must be a JSON object whose requests_per_minute is an integer from ${RATE_LIMIT_MIN} to ${RATE_LIMIT_MAX}`;
      if (!obj) return { ok: false, message: rpmMessage };
      const unknown = Object.keys(obj).filter((k) => k !== 'requests_per_minute');
      if (unknown.length > 0) return { ok: false, message: `value has an unknown field: ${unknown[0]}` };
      const rpm = 'requests_per_minute' in obj ? obj.requests_per_minute : RATE_LIMIT_DEFAULT;
      if (typeof rpm !== 'number' || !Number.isInteger(rpm) || rpm < RATE_LIMIT_MIN || rpm > RATE_LIMIT_MAX) {
        return { ok: false, message: rpmMessage };
      }
      return { ok: true, value: JSON.stringify({ requests_per_minute: rpm }) };
    }
    case 'block_bot': {
      const obj = parseJsonObject(value);
      if (!obj || typeof obj.enabled !== 'boolean' || Object.keys(obj).length !== 1) {
        return { ok: false, message: 'value must be a JSON object with a boolean field enabled, e.g. {"enabled":true}' };
      }
      return { ok: true, value: JSON.stringify({ enabled: obj.enabled }) };
    }
    case 'block_ai_bot': {
      const bot = findAiBot(value);
      return bot
        ? { ok: true, value: bot.name }
        : { ok: false, message: 'value must be one of the supported AI crawler names (GET /api/waf/ai-bots)' };
    }
  }
}

/** requests_per_minute of a stored (canonical) rate_limit value. */
export function rateLimitOf(value: string): number {
  const obj = parseJsonObject(value);
  const rpm = obj?.requests_per_minute;
  return typeof rpm === 'number' ? rpm : RATE_LIMIT_DEFAULT;
}
