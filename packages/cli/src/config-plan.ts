// `rampart apply`: the account's configuration read through the public API into the model of
// config-file.ts, compared with a file's (the plan), and the plan carried out through the same API
// in dependency order: servers, then domains, then the rules that name domains; deletions (only
// with --prune) the other way round.
import { formatHostPort, originTarget } from '@rampart/protocol';
import {
  customRuleKey,
  sortConfig,
  sortedKinds,
  wafRuleKey,
  type AccountConfig,
  type CustomRuleConfig,
  type DomainConfig,
  type NotificationsConfig,
  type RateLimit,
  type ServerConfig,
  type WafRuleConfig,
} from './config-file.js';

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export const FROZEN_MESSAGE = 'account is frozen, renew the plan to make changes';

/** The public API with an API key. */
export interface Api {
  call<T = unknown>(method: string, path: string, body?: unknown): Promise<T>;
}

export function httpApi(base: string, key: string): Api {
  return {
    async call<T>(method: string, path: string, body?: unknown): Promise<T> {
      const res = await fetch(base + path, {
        method,
        headers: { 'x-api-key': key, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
      const text = await res.text();
      let parsed: unknown;
      try {
        parsed = text ? JSON.parse(text) : undefined;
      } catch {
        parsed = undefined;
      }
      if (!res.ok) {
        const error = typeof parsed === 'object' && parsed !== null && 'error' in parsed ? parsed.error : undefined;
        throw new ApiError(res.status, typeof error === 'string' ? error : `HTTP ${res.status} from ${method} ${path}`);
      }
      // The answer of a route of ours: the caller names the shape the route documents.
      return parsed as T;
    },
  };
}

// ---- The account as it is ----

interface ServerRow {
  id: string;
  name: string;
  status: string;
  publicIp: string | null;
}
interface DomainRow extends Omit<DomainConfig, 'servers'> {
  id: string;
  serverIds: string[];
}
interface WafRow {
  id: string;
  rule_type: WafRuleConfig['type'];
  value: string;
  domain_id: string | null;
  enabled: boolean;
  priority: number;
}
interface CustomRow {
  id: string;
  name: string;
  expression: string;
  action: string;
  rateLimit: RateLimit | null;
  domainId: string | null;
  priority: number;
  enabled: boolean;
}

/** The account's configuration, with the ids of its objects by identity (server name, domain name, rule key). */
export interface Current {
  config: AccountConfig;
  state: string;
  ids: { servers: Map<string, string>; domains: Map<string, string>; wafRules: Map<string, string>; customRules: Map<string, string> };
  webhookSecretSet: boolean;
  /** The id of each object of `config` (deletions name the object itself: two rules may share a name). */
  objectIds: WeakMap<object, string>;
}

export async function readAccount(api: Api): Promise<Current> {
  const [account, servers, domains, waf, rules, notifications] = await Promise.all([
    api.call<{ state: string }>('GET', '/api/account'),
    api.call<ServerRow[]>('GET', '/api/servers'),
    api.call<DomainRow[]>('GET', '/api/domains'),
    api.call<WafRow[]>('GET', '/api/waf'),
    api.call<CustomRow[]>('GET', '/api/rules'),
    api.call<NotificationsConfig & { webhookSecretSet: boolean }>('GET', '/api/settings/notifications'),
    // Rollout settings (issue 23, point 1): GET /api/settings/rollout, read here beside the notifications.
  ]);
  const ids: Current['ids'] = { servers: new Map(), domains: new Map(), wafRules: new Map(), customRules: new Map() };
  const objectIds = new WeakMap<object, string>();
  const serverName = new Map<string, string>();
  const live = servers.filter((s) => s.status !== 'decommissioned');
  for (const s of live) {
    if (ids.servers.has(s.name)) {
      throw new Error(`the account has two shield servers named ${s.name}: a configuration file names servers, so rename one first (PUT /api/servers/{id})`);
    }
    ids.servers.set(s.name, s.id);
    serverName.set(s.id, s.name);
  }
  const domainName = new Map<string, string>();
  for (const d of domains) {
    ids.domains.set(d.domain, d.id);
    domainName.set(d.id, d.domain);
  }
  const wafRules: WafRuleConfig[] = waf.map((r) => {
    const rule = { type: r.rule_type, value: r.value, domain: r.domain_id === null ? null : (domainName.get(r.domain_id) ?? null), enabled: r.enabled, priority: r.priority };
    ids.wafRules.set(wafRuleKey(rule), r.id);
    objectIds.set(rule, r.id);
    return rule;
  });
  const customRules: CustomRuleConfig[] = [];
  for (const r of rules) {
    const rule = {
      name: r.name,
      domain: r.domainId === null ? null : (domainName.get(r.domainId) ?? null),
      expression: r.expression,
      action: r.action,
      rateLimit: r.rateLimit,
      priority: r.priority,
      enabled: r.enabled,
    };
    const key = customRuleKey(rule);
    // Two rules of one name and scope: the first is the one the file's rule matches, the second is extra.
    if (!ids.customRules.has(key)) ids.customRules.set(key, r.id);
    objectIds.set(rule, r.id);
    customRules.push(rule);
  }
  const config: AccountConfig = {
    servers: live.map((s) => {
      const server = { name: s.name, publicIp: s.publicIp };
      objectIds.set(server, s.id);
      return server;
    }),
    domains: domains.map((d) => ({
      domain: d.domain,
      origins: d.origins.map((o) => ('host' in o ? { host: o.host, port: o.port } : { ip: o.ip, port: o.port })),
      servers: d.serverIds
        .map((id) => serverName.get(id))
        .filter((n): n is string => n !== undefined)
        .sort(),
      sslEnabled: d.sslEnabled,
      wafEnabled: d.wafEnabled,
      wafLevel: d.wafLevel,
      wafMode: d.wafMode,
      wafCompressedBodies: d.wafCompressedBodies,
      dnsFailover: d.dnsFailover,
    })),
    wafRules,
    customRules,
    notifications: { webhookUrl: notifications.webhookUrl, email: notifications.email, kinds: sortedKinds(notifications.kinds ?? []) },
  };
  for (const d of config.domains) objectIds.set(d, ids.domains.get(d.domain)!);
  return { config: sortConfig(config), state: account.state, ids, webhookSecretSet: notifications.webhookSecretSet, objectIds };
}

// ---- The plan ----

export type Kind = 'server' | 'domain' | 'waf rule' | 'custom rule' | 'notifications';
export interface FieldChange {
  field: string;
  from: unknown;
  to: unknown;
}
export interface Step {
  op: 'create' | 'update' | 'delete';
  kind: Kind;
  /** How the object is named in the plan: `edge-1`, `www.example.com`, `block_ip 203.0.113.0/24 (www.example.com)`. */
  label: string;
  /** The object's identity in Current.ids. */
  key: string;
  changes: FieldChange[];
  /** The file's object (create, update) or the account's (delete). */
  object: unknown;
}
export interface Plan {
  steps: Step[];
  /** Objects of the account the file does not name, kept because --prune was not given. */
  kept: number;
}

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);
const originsText = (d: DomainConfig) => d.origins.map((o) => formatHostPort(originTarget(o), o.port));

function fieldChanges(from: Record<string, unknown>, to: Record<string, unknown>, fields: string[]): FieldChange[] {
  return fields.filter((f) => !same(from[f], to[f])).map((f) => ({ field: f, from: from[f], to: to[f] }));
}

const wafLabel = (r: WafRuleConfig) => `${r.type} ${r.value}${r.domain ? ` (${r.domain})` : ''}`;
const customLabel = (r: { name: string; domain: string | null }) => `${r.name}${r.domain ? ` (${r.domain})` : ''}`;

const SERVER_FIELDS = ['publicIp'];
const DOMAIN_FIELDS = ['origins', 'servers', 'sslEnabled', 'wafEnabled', 'wafLevel', 'wafMode', 'wafCompressedBodies', 'dnsFailover'];
const WAF_FIELDS = ['priority', 'enabled'];
const CUSTOM_FIELDS = ['expression', 'action', 'rateLimit', 'priority', 'enabled'];
const NOTIFICATION_FIELDS = ['webhookUrl', 'email', 'kinds'];

/** What applying DESIRED to the account CURRENT does, in the order it is done. */
export function makePlan(current: AccountConfig, desired: AccountConfig, prune: boolean): Plan {
  const creates: Step[] = [];
  const updates: Step[] = [];
  const deletes: Step[] = [];
  let kept = 0;
  const compare = <T>(kind: Kind, have: T[], want: T[], key: (t: T) => string, label: (t: T) => string, view: (t: T) => Record<string, unknown>, fields: string[]) => {
    const existing = new Map(have.map((t) => [key(t), t] as const));
    const wanted = new Set<string>();
    for (const t of want) {
      const k = key(t);
      wanted.add(k);
      const old = existing.get(k);
      if (old === undefined) creates.push({ op: 'create', kind, label: label(t), key: k, changes: fieldChanges({}, view(t), fields), object: t });
      else {
        const changes = fieldChanges(view(old), view(t), fields);
        if (changes.length > 0) updates.push({ op: 'update', kind, label: label(t), key: k, changes, object: t });
      }
    }
    const seen = new Set<string>();
    for (const t of have) {
      const k = key(t);
      // A second object with the same identity is never what the file means: extra, like one it does not name.
      const extra = wanted.has(k) ? seen.has(k) : true;
      seen.add(k);
      if (!extra) continue;
      if (prune) deletes.push({ op: 'delete', kind, label: label(t), key: k, changes: [], object: t });
      else kept++;
    }
  };
  compare<ServerConfig>(
    'server',
    current.servers,
    desired.servers,
    (s) => s.name,
    (s) => s.name,
    (s) => ({ publicIp: s.publicIp }),
    SERVER_FIELDS,
  );
  compare<DomainConfig>(
    'domain',
    current.domains,
    desired.domains,
    (d) => d.domain,
    (d) => d.domain,
    (d) => ({ ...d, origins: originsText(d) }),
    DOMAIN_FIELDS,
  );
  compare<WafRuleConfig>('waf rule', current.wafRules, desired.wafRules, wafRuleKey, wafLabel, (r) => ({ ...r }), WAF_FIELDS);
  compare<CustomRuleConfig>('custom rule', current.customRules, desired.customRules, customRuleKey, customLabel, (r) => ({ ...r }), CUSTOM_FIELDS);
  if (desired.notifications) {
    const changes = fieldChanges({ ...current.notifications }, { ...desired.notifications }, NOTIFICATION_FIELDS);
    if (changes.length > 0) updates.push({ op: 'update', kind: 'notifications', label: 'settings', key: 'notifications', changes, object: desired.notifications });
  }
  // Rollout settings (issue 23, point 1) are compared here like the notifications.
  const order: Kind[] = ['server', 'domain', 'waf rule', 'custom rule', 'notifications'];
  const rank = (s: Step) => order.indexOf(s.kind);
  return {
    steps: [...creates.sort((a, b) => rank(a) - rank(b)), ...updates.sort((a, b) => rank(a) - rank(b)), ...deletes.sort((a, b) => rank(b) - rank(a))],
    kept,
  };
}

const show = (v: unknown) => (v === undefined ? '(none)' : JSON.stringify(v));

/** The plan as `terraform plan` writes one: `+` created, `~` changed (with each field's old and new value), `-` deleted. */
export function renderPlan(plan: Plan): string {
  const lines: string[] = [];
  for (const s of plan.steps) {
    const mark = s.op === 'create' ? '+' : s.op === 'update' ? '~' : '-';
    lines.push(`  ${mark} ${s.kind} ${s.label}`);
    for (const c of s.changes) {
      if (s.op === 'create') lines.push(`      ${c.field}: ${show(c.to)}`);
      else lines.push(`      ${c.field}: ${show(c.from)} -> ${show(c.to)}`);
    }
  }
  const count = (op: Step['op']) => plan.steps.filter((s) => s.op === op).length;
  const summary = `Plan: ${count('create')} to create, ${count('update')} to change, ${count('delete')} to delete.`;
  const kept = plan.kept > 0 ? `\n${plan.kept} object(s) of the account are not in the file and are kept (--prune deletes them).` : '';
  return `${lines.join('\n')}\n\n${summary}${kept}\n`;
}

// ---- Carrying it out ----

export interface ApplyOptions {
  /** The webhook's signing secret (RAMPART_WEBHOOK_SECRET), needed when the file sets a new webhook URL. */
  webhookSecret?: string;
  /** Requests in flight at once within one stage. */
  concurrency?: number;
  /** Each step as it is done; a created server's connection token with it. */
  onDone?: (step: Step, token?: string) => void;
}

/** Carries out PLAN's steps in order (each kind's steps a few at a time); stops at the first refusal, which is thrown with the step named. */
export async function executePlan(api: Api, current: Current, plan: Plan, opts: ApplyOptions = {}): Promise<void> {
  const ids = current.ids;
  const serverIds = (names: string[]) => names.map((n) => ids.servers.get(n)!);
  const domainId = (name: string | null) => (name === null ? null : ids.domains.get(name)!);
  const run = async (step: Step): Promise<string | undefined> => {
    const id = (map: Map<string, string>) => (step.op === 'delete' ? current.objectIds.get(step.object as object) : map.get(step.key))!;
    switch (`${step.op} ${step.kind}`) {
      case 'create server': {
        const s = step.object as ServerConfig;
        const created = await api.call<{ id: string; connectionToken: string }>('POST', '/api/servers', { name: s.name });
        ids.servers.set(s.name, created.id);
        if (s.publicIp !== null) await api.call('PUT', `/api/servers/${created.id}`, { publicIp: s.publicIp });
        return created.connectionToken;
      }
      case 'update server':
        await api.call('PUT', `/api/servers/${id(ids.servers)}`, { publicIp: (step.object as ServerConfig).publicIp });
        return;
      case 'delete server':
        await api.call('DELETE', `/api/servers/${id(ids.servers)}`);
        return;
      case 'create domain': {
        const d = step.object as DomainConfig;
        const { dnsFailover, servers, ...rest } = d;
        const created = await api.call<{ id: string }>('POST', '/api/domains', { ...rest, serverIds: serverIds(servers) });
        ids.domains.set(d.domain, created.id);
        if (dnsFailover) await api.call('PUT', `/api/domains/${created.id}`, { dnsFailover });
        return;
      }
      case 'update domain': {
        const d = step.object as DomainConfig;
        const body: Record<string, unknown> = {};
        for (const c of step.changes) body[c.field === 'servers' ? 'serverIds' : c.field] = c.field === 'servers' ? serverIds(d.servers) : d[c.field as keyof DomainConfig];
        await api.call('PUT', `/api/domains/${id(ids.domains)}`, body);
        return;
      }
      case 'delete domain':
        await api.call('DELETE', `/api/domains/${id(ids.domains)}`);
        return;
      case 'create waf rule': {
        const r = step.object as WafRuleConfig;
        const created = await api.call<{ id: string }>('POST', '/api/waf', {
          rule_type: r.type,
          value: r.value,
          ...(r.domain !== null ? { domain_id: domainId(r.domain) } : {}),
          enabled: r.enabled,
          priority: r.priority,
        });
        ids.wafRules.set(step.key, created.id);
        return;
      }
      case 'update waf rule': {
        const r = step.object as WafRuleConfig;
        await api.call('PUT', `/api/waf/${id(ids.wafRules)}`, { enabled: r.enabled, priority: r.priority });
        return;
      }
      case 'delete waf rule':
        await api.call('DELETE', `/api/waf/${id(ids.wafRules)}`);
        return;
      case 'create custom rule': {
        const r = step.object as CustomRuleConfig;
        const created = await api.call<{ id: string }>('POST', '/api/rules', {
          name: r.name,
          expression: r.expression,
          action: r.action,
          rateLimit: r.rateLimit,
          domainId: domainId(r.domain),
          priority: r.priority,
          enabled: r.enabled,
        });
        ids.customRules.set(step.key, created.id);
        return;
      }
      case 'update custom rule': {
        const r = step.object as CustomRuleConfig;
        const body: Record<string, unknown> = {};
        for (const c of step.changes) body[c.field] = r[c.field as keyof CustomRuleConfig];
        await api.call('PUT', `/api/rules/${id(ids.customRules)}`, body);
        return;
      }
      case 'delete custom rule':
        await api.call('DELETE', `/api/rules/${id(ids.customRules)}`);
        return;
      case 'update notifications': {
        const n = step.object as NotificationsConfig;
        const body: Record<string, unknown> = {};
        for (const c of step.changes) body[c.field] = n[c.field as keyof NotificationsConfig];
        if ('webhookUrl' in body && n.webhookUrl !== null) body.webhookSecret = opts.webhookSecret;
        await api.call('PUT', '/api/settings/notifications', body);
        return;
      }
    }
    throw new Error(`no way to ${step.op} a ${step.kind}`);
  };
  // Steps of one stage (same operation and kind) do not depend on each other: a few at a time.
  const concurrency = opts.concurrency ?? 4;
  let i = 0;
  while (i < plan.steps.length) {
    const first = plan.steps[i]!;
    let end = i;
    while (end < plan.steps.length && plan.steps[end]!.op === first.op && plan.steps[end]!.kind === first.kind) end++;
    const stage = plan.steps.slice(i, end);
    let next = 0;
    let failed: Error | undefined;
    const worker = async () => {
      while (failed === undefined && next < stage.length) {
        const step = stage[next++]!;
        try {
          const token = await run(step);
          opts.onDone?.(step, token);
        } catch (err) {
          // Everything run and onDone throw is an Error; anything else would be wrapped, not lost.
          failed ??= err instanceof ApiError ? new StepError(step, err) : err instanceof Error ? err : new Error(String(err));
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, stage.length) }, worker));
    if (failed !== undefined) throw failed;
    i = end;
  }
}

export class StepError extends Error {
  constructor(
    readonly step: Step,
    override readonly cause: ApiError,
  ) {
    super(`${step.op} ${step.kind} ${step.label}: ${cause.status} ${cause.message}`);
  }
}

/** Why the plan cannot be carried out before anything is sent; empty when it can. */
export function planProblems(plan: Plan, opts: ApplyOptions): string[] {
  const problems: string[] = [];
  const n = plan.steps.find((s) => s.kind === 'notifications');
  if (n) {
    const url = (n.object as NotificationsConfig).webhookUrl;
    if (url !== null && n.changes.some((c) => c.field === 'webhookUrl') && !opts.webhookSecret) {
      problems.push(`notifications.webhookUrl: a new webhook URL needs its signing secret: set RAMPART_WEBHOOK_SECRET (16 to 200 characters); the file never holds it`);
    }
  }
  return problems;
}
