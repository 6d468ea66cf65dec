// The configuration file of `rampart export` and `rampart apply` (docs/config-as-code.md): an
// account's servers, domains, WAF rules, custom rules and notification settings as YAML, with
// objects named rather than numbered (no ids, no tokens, no secrets). This module reads a file into
// the model below, refusing it with every error's line and field, and writes the model back as
// YAML in a stable order.
import {
  checkRuleValue,
  COMPRESSED_BODY_POLICIES,
  CUSTOM_RULE_ACTIONS,
  DOMAIN_ONLY_RULE_TYPES,
  formatHostPort,
  isHostname,
  isIP,
  isOriginHost,
  normalizeHostname,
  originTarget,
  parseRuleExpression,
  RULE_RATE_LIMITS,
  RULE_TYPES,
  SERVER_WIDE_RULE_TYPES,
  WAF_LEVELS,
  WAF_MODES,
  type OriginAddress,
  type RuleType,
} from '@rampart/protocol';
import { Type, type TSchema } from '@sinclair/typebox';
import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler';
import { isMap, isNode, isScalar, LineCounter, parseDocument, stringify } from 'yaml';

export const FORMAT_VERSION = 1;

// ---- The model: what the file says, resolved (defaults filled in, values canonical) ----

/** An origin by address or by DNS name (`IP:PORT` or `NAME:PORT` in the file). */
export type Origin = OriginAddress;
export interface ServerConfig {
  name: string;
  publicIp: string | null;
}
export interface DomainConfig {
  domain: string;
  origins: Origin[];
  /** Server names, sorted. */
  servers: string[];
  sslEnabled: boolean;
  wafEnabled: boolean;
  wafLevel: string;
  wafMode: string;
  wafCompressedBodies: string;
  dnsFailover: boolean;
}
export interface WafRuleConfig {
  type: RuleType;
  /** The canonical value, as the API stores it. */
  value: string;
  /** The domain name; null: every domain (or server-wide). */
  domain: string | null;
  enabled: boolean;
  priority: number;
}
export interface RateLimit {
  requests: number;
  period: number;
  characteristics: string[];
  mitigation: 'block' | 'challenge';
  duration: number;
}
export interface CustomRuleConfig {
  name: string;
  domain: string | null;
  expression: string;
  action: string;
  rateLimit: RateLimit | null;
  priority: number;
  enabled: boolean;
}
export interface NotificationsConfig {
  webhookUrl: string | null;
  email: string | null;
  kinds: string[];
}
export interface AccountConfig {
  servers: ServerConfig[];
  domains: DomainConfig[];
  wafRules: WafRuleConfig[];
  customRules: CustomRuleConfig[];
  /** Undefined when the file has no notifications section: the account's settings are left alone. */
  notifications?: NotificationsConfig;
  // Rollout settings (issue 23, point 1: PUT /api/settings/rollout) go here as `rollout?: {...}`,
  // read, written, planned and applied like `notifications`.
}

export const DEFAULT_PRIORITY = 100;
export const DOMAIN_DEFAULTS = { sslEnabled: true, wafEnabled: true, wafLevel: 'medium', wafMode: 'block', wafCompressedBodies: 'refuse', dnsFailover: false } as const;

// ---- The file's schema (TypeBox), checked before anything else ----

const strict = { additionalProperties: false };
const Name = Type.String({ minLength: 1, maxLength: 100 });
const Priority = Type.Integer({ minimum: 0, maximum: 1_000_000 });
const literals = (values: readonly string[]) => Type.Union(values.map((v) => Type.Literal(v)));
const RateLimitSchema = Type.Object(
  {
    requests: Type.Integer({ minimum: RULE_RATE_LIMITS.requests[0], maximum: RULE_RATE_LIMITS.requests[1] }),
    period: Type.Integer({ minimum: RULE_RATE_LIMITS.period[0], maximum: RULE_RATE_LIMITS.period[1] }),
    characteristics: Type.Array(Type.String({ maxLength: 72 }), { minItems: 1, maxItems: 2 }),
    mitigation: literals(['block', 'challenge']),
    duration: Type.Integer({ minimum: RULE_RATE_LIMITS.duration[0], maximum: RULE_RATE_LIMITS.duration[1] }),
  },
  strict,
);
const ServerItem = Type.Object({ name: Name, publicIp: Type.Optional(Type.Union([Type.String(), Type.Null()])) }, strict);
const DomainItem = Type.Object(
  {
    domain: Type.String({ minLength: 1, maxLength: 253 }),
    origins: Type.Array(Type.String({ minLength: 1, maxLength: 60 }), { minItems: 1, maxItems: 32 }),
    servers: Type.Optional(Type.Array(Name, { maxItems: 100 })),
    sslEnabled: Type.Optional(Type.Boolean()),
    wafEnabled: Type.Optional(Type.Boolean()),
    wafLevel: Type.Optional(literals(WAF_LEVELS)),
    wafMode: Type.Optional(literals(WAF_MODES)),
    wafCompressedBodies: Type.Optional(literals(COMPRESSED_BODY_POLICIES)),
    dnsFailover: Type.Optional(Type.Boolean()),
  },
  strict,
);
const WafRuleItem = Type.Object(
  {
    type: literals(RULE_TYPES),
    // A string, or for the JSON-valued types (rate_limit, block_bot, waf_exception) a mapping.
    value: Type.Union([Type.String({ minLength: 1, maxLength: 1000 }), Type.Record(Type.String(), Type.Unknown())]),
    domain: Type.Optional(Type.Union([Type.String(), Type.Null()])),
    enabled: Type.Optional(Type.Boolean()),
    priority: Type.Optional(Priority),
  },
  strict,
);
const CustomRuleItem = Type.Object(
  {
    name: Name,
    domain: Type.Optional(Type.Union([Type.String(), Type.Null()])),
    expression: Type.String({ minLength: 1, maxLength: 4096 }),
    action: literals(CUSTOM_RULE_ACTIONS),
    rateLimit: Type.Optional(Type.Union([RateLimitSchema, Type.Null()])),
    priority: Type.Optional(Priority),
    enabled: Type.Optional(Type.Boolean()),
  },
  strict,
);
const NotificationsSection = Type.Object(
  {
    webhookUrl: Type.Optional(Type.Union([Type.String({ minLength: 1, maxLength: 2048 }), Type.Null()])),
    email: Type.Optional(Type.Union([Type.String({ minLength: 1, maxLength: 254 }), Type.Null()])),
    kinds: Type.Optional(Type.Array(Type.String({ maxLength: 50 }), { maxItems: 20 })),
  },
  strict,
);
/** The file's outline; each section's items are checked one by one (ITEMS), so one bad item hides no other's errors. */
const Outline = Type.Object(
  {
    version: Type.Literal(FORMAT_VERSION),
    servers: Type.Optional(Type.Array(Type.Unknown())),
    domains: Type.Optional(Type.Array(Type.Unknown())),
    wafRules: Type.Optional(Type.Array(Type.Unknown())),
    customRules: Type.Optional(Type.Array(Type.Unknown())),
    notifications: Type.Optional(Type.Unknown()),
  },
  strict,
);
const ITEMS = { servers: ServerItem, domains: DomainItem, wafRules: WafRuleItem, customRules: CustomRuleItem } as const;
type Section = keyof typeof ITEMS;

// ---- Reading ----

export interface FileError {
  line: number;
  column: number;
  /** The field at fault, as a path: `domains[2].origins[0]`. */
  field: string;
  message: string;
}

export class ConfigFileError extends Error {
  constructor(readonly errors: FileError[]) {
    super(errors.map(formatFileError).join('\n'));
  }
}

export function formatFileError(e: FileError): string {
  return `line ${e.line}, column ${e.column}: ${e.field ? `${e.field}: ` : ''}${e.message}`;
}

type Path = (string | number)[];

function fieldOf(path: Path): string {
  return path.reduce<string>((s, p) => (typeof p === 'number' ? `${s}[${p}]` : s ? `${s}.${p}` : p), '');
}

/** "/domains/0/origins" as a path of keys and indexes. */
function pointerPath(pointer: string): Path {
  return pointer
    .split('/')
    .slice(1)
    .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'))
    .map((p) => (/^(0|[1-9][0-9]*)$/.test(p) ? Number(p) : p));
}

/** Parses FILE's text into the model, or throws ConfigFileError with every error found (line, field, message). */
export function parseConfigFile(text: string): AccountConfig {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true });
  const at = (offset: number) => lineCounter.linePos(offset);
  if (doc.errors.length > 0) {
    throw new ConfigFileError(doc.errors.map((e) => ({ line: at(e.pos[0]).line, column: at(e.pos[0]).col, field: '', message: `not valid YAML: ${e.message.split('\n')[0]!}` })));
  }
  const errors: FileError[] = [];
  /** The error at the node of PATH, or of its nearest parent that exists (a missing field: its object). */
  const report = (path: Path, message: string, key = false) => {
    let node: unknown;
    for (let n = path.length; n >= 0; n--) {
      node = n === 0 ? doc.contents : doc.getIn(path.slice(0, n), true);
      if (key && n === path.length && isMap(doc.getIn(path.slice(0, -1), true))) {
        const parent = doc.getIn(path.slice(0, -1), true) as { items: { key: unknown }[] };
        const pair = parent.items.find((p) => isScalar(p.key) && p.key.value === path[path.length - 1]);
        if (pair && isNode(pair.key)) node = pair.key;
      }
      if (isNode(node) && node.range) break;
    }
    const offset = isNode(node) && node.range ? node.range[0] : 0;
    const { line, col } = at(offset);
    errors.push({ line, column: col, field: fieldOf(path), message });
  };
  const data: unknown = doc.toJS({ maxAliasCount: 100 });
  if (data === null || data === undefined || typeof data !== 'object' || Array.isArray(data)) {
    throw new ConfigFileError([{ line: 1, column: 1, field: '', message: 'the file must be a mapping with `version: 1` and the sections servers, domains, wafRules, customRules, notifications' }]);
  }
  const schemaErrors = (schema: TSchema, value: unknown, base: Path): boolean => {
    const check = compiled(schema);
    if (check.Check(value)) return false;
    let found = false;
    for (const e of check.Errors(value)) {
      const path = [...base, ...pointerPath(e.path)];
      found = true;
      // A union's members each complain; one message per field is enough.
      if (errors.some((x) => x.field === fieldOf(path))) continue;
      const extra = /unexpected property|not expect/i.test(e.message);
      const choices = (e.schema as { anyOf?: { const?: unknown }[] }).anyOf;
      const message = extra
        ? 'unknown field'
        : /^Expected required property/.test(e.message)
          ? 'is required'
          : choices?.every((c) => typeof c.const === 'string')
            ? `must be one of ${choices.map((c) => c.const).join(', ')}`
            : e.message.replace(/^Expected/, 'expected');
      report(path, message, extra);
    }
    return found;
  };
  if (schemaErrors(Outline, data, [])) throw new ConfigFileError(sortErrors(errors));
  const file = data as FileShape;
  // Items that fail their schema are left out of the checks below, but their names still count (a rule naming such a domain is not also wrong).
  const invalid = new Set<unknown>();
  for (const section of Object.keys(ITEMS) as Section[]) {
    (file[section] ?? []).forEach((item, i) => {
      if (schemaErrors(ITEMS[section], item, [section, i]) && !compiled(ITEMS[section]).Check(knownFields(ITEMS[section], item))) invalid.add(item);
    });
  }
  if (file.notifications !== undefined && schemaErrors(NotificationsSection, file.notifications, ['notifications'])) invalid.add(file.notifications);
  const config = resolve(file, report, invalid);
  if (errors.length > 0) throw new ConfigFileError(sortErrors(errors));
  return config;
}

const checks = new Map<TSchema, TypeCheck<TSchema>>();
/** The schema compiled once (a file of 1,000 domains is checked in milliseconds, not seconds). */
function compiled(schema: TSchema): TypeCheck<TSchema> {
  let check = checks.get(schema);
  if (!check) checks.set(schema, (check = TypeCompiler.Compile(schema)));
  return check;
}

/** ITEM without the fields SCHEMA does not know (already reported), so its other fields are still checked. */
function knownFields(schema: TSchema, item: unknown): unknown {
  if (item === null || typeof item !== 'object' || Array.isArray(item)) return item;
  const known = Object.keys((schema as unknown as { properties: object }).properties);
  return Object.fromEntries(Object.entries(item).filter(([k]) => known.includes(k)));
}

function sortErrors(errors: FileError[]): FileError[] {
  return [...errors].sort((a, b) => a.line - b.line || a.column - b.column);
}

interface FileShape {
  version: number;
  servers?: { name: string; publicIp?: string | null }[];
  domains?: {
    domain: string;
    origins: string[];
    servers?: string[];
    sslEnabled?: boolean;
    wafEnabled?: boolean;
    wafLevel?: string;
    wafMode?: string;
    wafCompressedBodies?: string;
    dnsFailover?: boolean;
  }[];
  wafRules?: { type: RuleType; value: string | Record<string, unknown>; domain?: string | null; enabled?: boolean; priority?: number }[];
  customRules?: { name: string; domain?: string | null; expression: string; action: string; rateLimit?: RateLimit | null; priority?: number; enabled?: boolean }[];
  notifications?: { webhookUrl?: string | null; email?: string | null; kinds?: string[] };
}

/** `192.0.2.10:8080` or `[2001:db8::10]:8080` as {ip, port}; undefined when it is neither. */
export function parseOrigin(text: string): Origin | undefined {
  const m = /^\[([^\]]+)\]:([0-9]{1,5})$/.exec(text) ?? /^([^:[\]]+):([0-9]{1,5})$/.exec(text);
  if (!m) return undefined;
  const port = Number(m[2]);
  if (port < 1 || port > 65535) return undefined;
  if (isIP(m[1]!)) return { ip: m[1]!.toLowerCase(), port };
  const host = normalizeHostname(m[1]!);
  return isOriginHost(host) ? { host, port } : undefined;
}

/** The checks beyond the schema: names unique and known, values in their type's format; the model with defaults filled in. */
function resolve(file: FileShape, report: (path: Path, message: string) => void, invalid: Set<unknown>): AccountConfig {
  const nameOf = (item: unknown, field: string) =>
    item !== null && typeof item === 'object' && typeof (item as Record<string, unknown>)[field] === 'string' ? ((item as Record<string, unknown>)[field] as string) : undefined;
  const servers: ServerConfig[] = [];
  const serverNames = new Set<string>();
  (file.servers ?? []).forEach((s, i) => {
    if (invalid.has(s)) {
      const name = nameOf(s, 'name');
      if (name !== undefined) serverNames.add(name);
      return;
    }
    if (serverNames.has(s.name)) report(['servers', i, 'name'], `the server ${s.name} is named twice`);
    serverNames.add(s.name);
    const publicIp = s.publicIp ?? null;
    if (publicIp !== null && !isIP(publicIp)) report(['servers', i, 'publicIp'], 'must be an IPv4 or IPv6 address');
    servers.push({ name: s.name, publicIp: publicIp === null ? null : publicIp.toLowerCase() });
  });
  const domains: DomainConfig[] = [];
  const domainNames = new Set<string>();
  (file.domains ?? []).forEach((d, i) => {
    if (invalid.has(d)) {
      const name = nameOf(d, 'domain');
      if (name !== undefined) domainNames.add(normalizeHostname(name));
      return;
    }
    const name = normalizeHostname(d.domain);
    if (!isHostname(name)) report(['domains', i, 'domain'], 'must be a fully qualified domain name (at least two labels of a-z 0-9 -)');
    else if (domainNames.has(name)) report(['domains', i, 'domain'], `the domain ${name} is named twice`);
    domainNames.add(name);
    const origins: Origin[] = [];
    const seen = new Set<string>();
    d.origins.forEach((o, j) => {
      const origin = parseOrigin(o);
      if (!origin) return report(['domains', i, 'origins', j], 'must be IP:PORT or NAME:PORT (an IPv6 address in brackets: [2001:db8::10]:8080), port 1 to 65535');
      const key = formatHostPort(originTarget(origin), origin.port);
      if (seen.has(key)) report(['domains', i, 'origins', j], `${key} is listed twice`);
      seen.add(key);
      origins.push(origin);
    });
    const named = new Set<string>();
    (d.servers ?? []).forEach((s, j) => {
      if (!serverNames.has(s)) report(['domains', i, 'servers', j], `names no server of the file's servers section: ${s}`);
      named.add(s);
    });
    domains.push({
      domain: name,
      origins,
      servers: [...named].sort(),
      sslEnabled: d.sslEnabled ?? DOMAIN_DEFAULTS.sslEnabled,
      wafEnabled: d.wafEnabled ?? DOMAIN_DEFAULTS.wafEnabled,
      wafLevel: d.wafLevel ?? DOMAIN_DEFAULTS.wafLevel,
      wafMode: d.wafMode ?? DOMAIN_DEFAULTS.wafMode,
      wafCompressedBodies: d.wafCompressedBodies ?? DOMAIN_DEFAULTS.wafCompressedBodies,
      dnsFailover: d.dnsFailover ?? DOMAIN_DEFAULTS.dnsFailover,
    });
    if (d.dnsFailover && named.size < 2) report(['domains', i, 'dnsFailover'], 'needs at least 2 servers on the domain');
  });
  const domainOf = (path: Path, value: string | null | undefined): string | null => {
    if (value === null || value === undefined) return null;
    const name = normalizeHostname(value);
    if (!domainNames.has(name)) report(path, `names no domain of the file's domains section: ${value}`);
    return name;
  };
  const wafRules: WafRuleConfig[] = [];
  const ruleKeys = new Set<string>();
  (file.wafRules ?? []).forEach((r, i) => {
    if (invalid.has(r)) return;
    const domain = domainOf(['wafRules', i, 'domain'], r.domain);
    if (domain !== null && SERVER_WIDE_RULE_TYPES.includes(r.type)) report(['wafRules', i, 'domain'], `a ${r.type} rule is server-wide: it has no domain`);
    if (domain === null && DOMAIN_ONLY_RULE_TYPES.includes(r.type)) report(['wafRules', i, 'domain'], `is required for ${r.type} rules, which apply to one domain`);
    const raw = typeof r.value === 'string' ? r.value : JSON.stringify(r.value);
    const checked = checkRuleValue(r.type, raw);
    if (!checked.ok) return report(['wafRules', i, 'value'], checked.message.replace(/^value /, ''));
    const key = wafRuleKey({ type: r.type, value: checked.value, domain });
    if (ruleKeys.has(key)) report(['wafRules', i], `repeats an earlier ${r.type} rule with the same value and domain`);
    ruleKeys.add(key);
    wafRules.push({ type: r.type, value: checked.value, domain, enabled: r.enabled ?? true, priority: r.priority ?? DEFAULT_PRIORITY });
  });
  const customRules: CustomRuleConfig[] = [];
  const customKeys = new Set<string>();
  (file.customRules ?? []).forEach((r, i) => {
    if (invalid.has(r)) return;
    const domain = domainOf(['customRules', i, 'domain'], r.domain);
    const key = customRuleKey({ name: r.name, domain });
    if (customKeys.has(key)) report(['customRules', i, 'name'], `the rule ${r.name} is named twice${domain ? ` for ${domain}` : ''}`);
    customKeys.add(key);
    const parsed = parseRuleExpression(r.expression);
    if (!parsed.ok) report(['customRules', i, 'expression'], parsed.message);
    const rateLimit = r.rateLimit ?? null;
    if (r.action === 'rate_limit' && rateLimit === null) report(['customRules', i, 'rateLimit'], 'is required with the action rate_limit');
    if (r.action !== 'rate_limit' && rateLimit !== null) report(['customRules', i, 'rateLimit'], 'is only for the action rate_limit');
    customRules.push({ name: r.name, domain, expression: r.expression, action: r.action, rateLimit, priority: r.priority ?? DEFAULT_PRIORITY, enabled: r.enabled ?? true });
  });
  const config: AccountConfig = { servers, domains, wafRules, customRules };
  if (file.notifications && !invalid.has(file.notifications)) {
    const n = file.notifications;
    config.notifications = { webhookUrl: n.webhookUrl ?? null, email: n.email ?? null, kinds: sortedKinds(n.kinds ?? []) };
  }
  return sortConfig(config);
}

/** Notification kinds are a set: once each, sorted (the API keeps its own order). */
export const sortedKinds = (kinds: readonly string[]) => [...new Set(kinds)].sort();

export const wafRuleKey = (r: { type: string; value: string; domain: string | null }) => `${r.type}\u0000${r.domain ?? ''}\u0000${r.value}`;
export const customRuleKey = (r: { name: string; domain: string | null }) => `${r.name}\u0000${r.domain ?? ''}`;

const byText = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** Every list in the order the file is written in: servers and domains by name, rules by kind, domain and value (or priority and name). */
export function sortConfig(c: AccountConfig): AccountConfig {
  return {
    ...c,
    servers: [...c.servers].sort((a, b) => byText(a.name, b.name)),
    domains: [...c.domains].sort((a, b) => byText(a.domain, b.domain)),
    wafRules: [...c.wafRules].sort((a, b) => byText(a.type, b.type) || byText(a.domain ?? '', b.domain ?? '') || byText(a.value, b.value)),
    customRules: [...c.customRules].sort((a, b) => a.priority - b.priority || byText(a.name, b.name) || byText(a.domain ?? '', b.domain ?? '')),
  };
}

// ---- Writing ----

const JSON_VALUED: readonly RuleType[] = ['rate_limit', 'block_bot', 'waf_exception'];

/** The model as the file's YAML: comments on top, every field written, lists sorted, so two exports diff line by line. */
export function renderConfigFile(c: AccountConfig, header: string[]): string {
  const sorted = sortConfig(c);
  const body: Record<string, unknown> = {
    version: FORMAT_VERSION,
    servers: sorted.servers.map((s) => ({ name: s.name, ...(s.publicIp !== null ? { publicIp: s.publicIp } : {}) })),
    domains: sorted.domains.map((d) => ({
      domain: d.domain,
      origins: d.origins.map((o) => formatHostPort(originTarget(o), o.port)),
      servers: d.servers,
      sslEnabled: d.sslEnabled,
      wafEnabled: d.wafEnabled,
      wafLevel: d.wafLevel,
      wafMode: d.wafMode,
      wafCompressedBodies: d.wafCompressedBodies,
      dnsFailover: d.dnsFailover,
    })),
    wafRules: sorted.wafRules.map((r) => ({
      type: r.type,
      value: JSON_VALUED.includes(r.type) ? (JSON.parse(r.value) as unknown) : r.value,
      ...(r.domain !== null ? { domain: r.domain } : {}),
      priority: r.priority,
      enabled: r.enabled,
    })),
    customRules: sorted.customRules.map((r) => ({
      name: r.name,
      ...(r.domain !== null ? { domain: r.domain } : {}),
      expression: r.expression,
      action: r.action,
      ...(r.rateLimit !== null ? { rateLimit: r.rateLimit } : {}),
      priority: r.priority,
      enabled: r.enabled,
    })),
    ...(sorted.notifications ? { notifications: sorted.notifications } : {}),
  };
  const yaml = stringify(body, { lineWidth: 0, flowCollectionPadding: false, aliasDuplicateObjects: false });
  // A blank line between sections, for the eye.
  const spaced = yaml.replace(/\n(?=[a-zA-Z])/g, '\n\n');
  return `${header.map((l) => `# ${l}`.trimEnd()).join('\n')}\n\n${spaced}`;
}
