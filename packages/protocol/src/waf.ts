import aiBotsFile from './ai-bots.json' with { type: 'json' };
import { canonicalCidr, isCountryCode } from './validate.js';

export const RULE_TYPES = ['block_ip', 'allow_ip', 'block_country', 'rate_limit', 'block_bot', 'block_ai_bot', 'waf_exception'] as const;
export type RuleType = (typeof RULE_TYPES)[number];

/** Rule types that apply to the whole shield server and so take no domain_id. */
export const SERVER_WIDE_RULE_TYPES: readonly RuleType[] = ['rate_limit', 'block_bot'];

/** Rule types that belong to one domain and so require a domain_id. */
export const DOMAIN_ONLY_RULE_TYPES: readonly RuleType[] = ['waf_exception'];

export const WAF_LEVELS = ['low', 'medium', 'high'] as const;
export type WafLevel = (typeof WAF_LEVELS)[number];

/**
 * What the attack-detection step (level high) does with a request it flags: `block` answers 403,
 * `detect` logs the event as not blocked and lets the request through. IP lists, bot rules and the
 * rate limiter act in both modes.
 */
export const WAF_MODES = ['block', 'detect'] as const;
export type WafMode = (typeof WAF_MODES)[number];
/**
 * What level high does with a compressed request body (Content-Encoding other than identity),
 * which no detector can read: refuse it (reason compressed_body; the default), or allow it through
 * uninspected (for sites whose clients compress uploads).
 */
export const COMPRESSED_BODY_POLICIES = ['refuse', 'allow'] as const;
export type CompressedBodyPolicy = (typeof COMPRESSED_BODY_POLICIES)[number];

/** The attack detectors a waf_exception can name. */
export const WAF_DETECTORS = ['sqli', 'xss', 'cmdi', 'traversal', 'ssrf', 'xxe', 'injection', 'upload'] as const;
export type WafDetector = (typeof WAF_DETECTORS)[number];

/** Where in a request a waf_exception applies; `path`, or a named (or `*`: any) parameter, cookie or header. */
export const WAF_EXCEPTION_LOCATION_KINDS = ['query', 'body', 'cookie', 'header'] as const;
export const WAF_EXCEPTION_PATH_MAX = 256;
export const WAF_EXCEPTION_NAME_MAX = 64;

/** A waf_exception's value, parsed: detection is skipped for requests whose path starts with `path`, in `location` (any when absent), for `detector` (all when absent). */
export interface WafException {
  path: string;
  location?: string;
  detector?: WafDetector;
}

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

const EXCEPTION_PATH_RE = new RegExp(`^/[\\x21-\\x7e]{0,${WAF_EXCEPTION_PATH_MAX - 1}}$`);
const EXCEPTION_LOCATION_RE = new RegExp(`^(${WAF_EXCEPTION_LOCATION_KINDS.join('|')}):(\\*|[A-Za-z0-9_.\\-\\[\\]]{1,${WAF_EXCEPTION_NAME_MAX}})$`);
const EXCEPTION_FIELDS = ['path', 'location', 'detector'];
const EXCEPTION_EXAMPLE = '{"path":"/comments","location":"body:content","detector":"xss"}';

/** A waf_exception location in canonical form (header names lowercased), or undefined when it is not one. */
function canonicalLocation(location: string): string | undefined {
  if (location === 'path') return location;
  const m = EXCEPTION_LOCATION_RE.exec(location);
  if (!m) return undefined;
  return m[1] === 'header' ? location.toLowerCase() : location;
}

function checkWafException(value: string): RuleValueCheck {
  const obj = parseJsonObject(value);
  if (!obj) return { ok: false, message: `value must be a JSON object with a path and an optional location and detector, e.g. ${EXCEPTION_EXAMPLE}` };
  const unknown = Object.keys(obj).filter((k) => !EXCEPTION_FIELDS.includes(k));
  if (unknown.length > 0) return { ok: false, message: `value has an unknown field: ${unknown[0]}` };
  const pathRule = `a string that starts with / and has 1 to ${WAF_EXCEPTION_PATH_MAX} printable ASCII characters, no spaces`;
  if (!('path' in obj)) return { ok: false, message: `value needs a path: ${pathRule}` };
  if (typeof obj.path !== 'string' || !EXCEPTION_PATH_RE.test(obj.path)) return { ok: false, message: `value has an invalid path: it must be ${pathRule}` };
  const out: WafException = { path: obj.path };
  if ('location' in obj) {
    const location = typeof obj.location === 'string' ? canonicalLocation(obj.location) : undefined;
    if (location === undefined) {
      return {
        ok: false,
        message: `value has an invalid location: it must be path, or ${WAF_EXCEPTION_LOCATION_KINDS.map((k) => `${k}:`).join(', ')} followed by * or a name of 1 to ${WAF_EXCEPTION_NAME_MAX} characters from A-Z a-z 0-9 _ . - [ ]`,
      };
    }
    out.location = location;
  }
  if ('detector' in obj) {
    if (typeof obj.detector !== 'string' || !(WAF_DETECTORS as readonly string[]).includes(obj.detector)) {
      return { ok: false, message: `value has an invalid detector: it must be one of ${WAF_DETECTORS.join(', ')}` };
    }
    out.detector = obj.detector as WafDetector;
  }
  return { ok: true, value: JSON.stringify(out) };
}

/**
 * Bot protection (`block_bot`): on or off, the proof-of-work difficulty in leading zero bits of
 * SHA-256, and optionally the path prefixes it guards (every path when absent).
 */
export interface BlockBot {
  enabled: boolean;
  difficulty: number;
  paths: string[] | null;
}

/** How long a pass cookie is valid, and so how long a rotated-out bot key stays accepted. */
export const BOT_COOKIE_TTL_SECONDS = 86_400;
/** How long a challenge token may be answered after it was served. */
export const BOT_CHALLENGE_TTL_SECONDS = 300;

/** Chosen from measurement (docs/bots.md): a median solve well under 300 ms in a browser, thousands of hashes per pass. */
export const BOT_DIFFICULTY_DEFAULT = 14;
export const BOT_DIFFICULTY_MIN = 8;
export const BOT_DIFFICULTY_MAX = 24;
export const BOT_PATHS_MAX = 32;
export const BOT_PATH_MAX = 128;
// A path prefix: starts with /, then URL path characters only (no blank, query, fragment or quote).
const BOT_PATH_RE = new RegExp(`^/[A-Za-z0-9\\-._~!$&()*+,;=:@%/]{0,${BOT_PATH_MAX - 1}}$`);
const BOT_EXAMPLE = '{"enabled":true,"difficulty":14,"paths":["/login"]}';

function checkBlockBot(value: string): RuleValueCheck {
  const obj = parseJsonObject(value);
  if (!obj || typeof obj.enabled !== 'boolean') {
    return { ok: false, message: `value must be a JSON object with a boolean field enabled, e.g. {"enabled":true} or ${BOT_EXAMPLE}` };
  }
  const unknown = Object.keys(obj).filter((k) => !['enabled', 'difficulty', 'paths'].includes(k));
  if (unknown.length > 0) return { ok: false, message: `value has an unknown field: ${unknown[0]}` };
  const out: Record<string, unknown> = { enabled: obj.enabled };
  if ('difficulty' in obj) {
    const d = obj.difficulty;
    if (typeof d !== 'number' || !Number.isInteger(d) || d < BOT_DIFFICULTY_MIN || d > BOT_DIFFICULTY_MAX) {
      return {
        ok: false,
        message: `value has an invalid difficulty: it must be a whole number of leading zero bits from ${BOT_DIFFICULTY_MIN} to ${BOT_DIFFICULTY_MAX} (default ${BOT_DIFFICULTY_DEFAULT})`,
      };
    }
    out.difficulty = d;
  }
  if ('paths' in obj) {
    const paths = obj.paths;
    const rule = `a list of 1 to ${BOT_PATHS_MAX} path prefixes, each starting with / and of at most ${BOT_PATH_MAX} URL path characters`;
    if (!Array.isArray(paths) || paths.length < 1 || paths.length > BOT_PATHS_MAX) return { ok: false, message: `value has invalid paths: it must be ${rule}` };
    const bad: unknown = paths.find((p) => typeof p !== 'string' || !BOT_PATH_RE.test(p));
    if (bad !== undefined) return { ok: false, message: `value has an invalid path ${JSON.stringify(bad)}: paths must be ${rule}` };
    out.paths = [...new Set(paths as string[])];
  }
  return { ok: true, value: JSON.stringify(out) };
}

/** A stored block_bot value (checked by checkRuleValue) with defaults filled in; undefined when it is not one. */
export function blockBotOf(value: string): BlockBot | undefined {
  const checked = checkBlockBot(value);
  if (!checked.ok) return undefined;
  const obj = JSON.parse(checked.value) as { enabled: boolean; difficulty?: number; paths?: string[] };
  return { enabled: obj.enabled, difficulty: obj.difficulty ?? BOT_DIFFICULTY_DEFAULT, paths: obj.paths ?? null };
}

export type RuleValueCheck = { ok: true; value: string } | { ok: false; message: string };

/** A JSON object (not an array, not null), or undefined for anything else or invalid JSON. */
export function parseJsonObject(value: string): Record<string, unknown> | undefined {
  try {
    const parsed: unknown = JSON.parse(value);
    return parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : undefined;
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
    case 'allow_ip': {
      const canonical = canonicalCidr(value);
      return canonical !== undefined
        ? { ok: true, value: canonical }
        : { ok: false, message: 'value must be an IPv4 address with an optional /0 to /32 suffix, or an IPv6 address with an optional /0 to /128 suffix' };
    }
    case 'block_country':
      return isCountryCode(value) ? { ok: true, value } : { ok: false, message: 'value must be a country code of exactly 2 uppercase letters' };
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
    case 'block_bot':
      return checkBlockBot(value);
    case 'block_ai_bot': {
      const bot = findAiBot(value);
      return bot ? { ok: true, value: bot.name } : { ok: false, message: 'value must be one of the supported AI crawler names (GET /api/waf/ai-bots)' };
    }
    case 'waf_exception':
      return checkWafException(value);
  }
}

/** The fields of a stored (canonical) waf_exception value; undefined for a value that does not pass checkRuleValue. */
export function wafExceptionOf(value: string): WafException | undefined {
  const checked = checkRuleValue('waf_exception', value);
  return checked.ok ? (JSON.parse(checked.value) as WafException) : undefined;
}

/** requests_per_minute of a stored (canonical) rate_limit value. */
export function rateLimitOf(value: string): number {
  const obj = parseJsonObject(value);
  const rpm = obj?.requests_per_minute;
  return typeof rpm === 'number' ? rpm : RATE_LIMIT_DEFAULT;
}
