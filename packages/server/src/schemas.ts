import {
  COMPRESSED_BODY_POLICIES,
  CUSTOM_RULE_ACTIONS,
  CUSTOM_RULE_NAME_MAX,
  EVENT_FIELD_MAX,
  RULE_LIMITS,
  RULE_RATE_LIMITS,
  RULE_TYPES,
  SSL_STATUSES,
  WAF_LEVELS,
  WAF_MODES,
} from '@rampart/protocol';
import { Type, type Static, type TSchema } from '@sinclair/typebox';

// The HTTP edge: shapes, types and lengths. Semantic checks (hostnames, addresses, rule values)
// live in the services, which report every problem at once.

// No control characters (C0, DEL, C1) and no lone surrogates, which PostgreSQL cannot store.
const NO_CONTROL_CHARS = '^[^\\p{Cc}\\p{Cs}]*$';
const strict = { additionalProperties: false } as const;

export const ErrorBody = Type.Object({ error: Type.String() }, { $id: 'Error', description: 'Every error answer' });
export const Success = Type.Object({ success: Type.Literal(true) });
export const IdParams = Type.Object({ id: Type.String({ maxLength: 100 }) }, strict);

// API keys
export const ApiKeyCreate = Type.Object({ name: Type.String({ minLength: 1, maxLength: 100, pattern: NO_CONTROL_CHARS }) }, strict);
export const ApiKeyCreated = Type.Object({
  id: Type.String(),
  name: Type.String(),
  key: Type.String({ description: 'The full key; shown only in this answer' }),
  key_prefix: Type.String(),
  created_at: Type.String({ format: 'date-time' }),
});
export const ApiKeyListItem = Type.Object({
  id: Type.String(),
  name: Type.String(),
  keyPrefix: Type.String(),
  lastUsedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  createdAt: Type.String({ format: 'date-time' }),
});
export const ApiKeyDeleteQuery = Type.Object({ id: Type.String({ maxLength: 100 }) }, strict);

// Servers
const ServerName = Type.String({ minLength: 1, maxLength: 100, pattern: NO_CONTROL_CHARS });
export const ServerCreate = Type.Object({ name: ServerName }, strict);
export const ServerUpdate = Type.Object(
  {
    name: Type.Optional(ServerName),
    publicIp: Type.Optional(
      Type.Union([Type.String({ description: 'IPv4 or IPv6 address' }), Type.Null()], {
        description: 'The address DNS points at for this server (checked before ordering a certificate); null: the address its agent connects from',
      }),
    ),
    canary: Type.Optional(Type.Boolean({ description: 'Staged rollout: the server gets every change first and bakes it (PUT /api/settings/rollout)' })),
  },
  { ...strict, minProperties: 1 },
);
const serverFields = {
  id: Type.String(),
  name: Type.String(),
  status: Type.Union([Type.Literal('active'), Type.Literal('offline'), Type.Literal('decommissioned')]),
  ip: Type.Union([Type.String(), Type.Null()], { description: 'Address the agent last connected from; null until it connects' }),
  publicIp: Type.Union([Type.String(), Type.Null()], { description: 'Address set with PUT /api/servers/{id}; null: ip is used' }),
  lastSeenAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  desiredRevision: Type.Integer({ description: 'Revision of the configuration the server should run' }),
  appliedRevision: Type.Integer({ description: 'Revision the agent last reported as running' }),
  canary: Type.Boolean({ description: 'Staged rollout: the server gets every change first (GET /api/rollouts)' }),
  healthy: Type.Union([Type.Boolean(), Type.Null()], {
    description:
      'The last health check (every RAMPART_HEALTH_INTERVAL seconds): true when the agent is connected, HAProxy serves and it answers the probe of /.well-known/rampart/health; null before the first check or while the agent has never connected',
  }),
  healthError: Type.Union([Type.String(), Type.Null()], { description: 'Why the last health check did not find the server healthy; null when it did' }),
  healthCheckedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], { description: 'When the last health check ran; null before the first' }),
  agentVersion: Type.Union([Type.String(), Type.Null()], { description: "The rampart version the server's agent said in its last hello (stored at every hello); null until one connects" }),
  agentRefused: Type.Union([Type.String(), Type.Null()], {
    description: "Why the control plane refused the agent's last hello: a protocol it cannot speak, with both versions named (the agent stays offline); null once an agent is accepted",
  }),
  createdAt: Type.String({ format: 'date-time' }),
};
export const ServerView = Type.Object(serverFields);
export const ServerWithToken = Type.Object({
  ...serverFields,
  connectionToken: Type.String({ description: 'Shown only in this answer; stored as SHA-256' }),
});

// Domains
export const Origin = Type.Object(
  {
    ip: Type.Optional(Type.String({ minLength: 1, maxLength: 45, description: 'IPv4 or IPv6 address; give ip or host, not both' })),
    host: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 253,
        description: 'DNS name (such as origin.example.com or localhost) the shield servers resolve at run time, following its changes; give ip or host, not both',
      }),
    ),
    port: Type.Integer({ minimum: 1, maximum: 65535 }),
  },
  strict,
);
const domainSettable = {
  origins: Type.Array(Origin, { minItems: 1, maxItems: 32 }),
  serverIds: Type.Array(Type.String({ maxLength: 100 }), { maxItems: 100, description: 'Shield servers of this account' }),
  sslEnabled: Type.Boolean({ description: 'Default true' }),
  wafEnabled: Type.Boolean({ description: 'Default true' }),
  wafLevel: Type.Union(
    WAF_LEVELS.map((l) => Type.Literal(l)),
    { description: 'Default medium' },
  ),
  wafMode: Type.Union(
    WAF_MODES.map((m) => Type.Literal(m)),
    {
      description: 'Default block. detect: the attack-detection step (level high) logs events marked not blocked and lets the request through; IP lists, bots and rate limits still act',
    },
  ),
  wafCompressedBodies: Type.Union(
    COMPRESSED_BODY_POLICIES.map((m) => Type.Literal(m)),
    {
      description:
        'Default refuse. Level high reads a gzip or deflate body (one coding) inflated, within the body budget. A body no detector can read (br, several codings, or one that does not inflate): refuse answers 403 (reason compressed_body); allow lets it through with only its bytes as sent inspected',
    },
  ),
  dnsFailover: Type.Boolean({
    description:
      "Default false; only with PUT. DNS failover: the domain's A/AAAA records hold its healthy shield servers' addresses. Pro and Enterprise, at least 2 servers, a DNS provider connected (PUT /api/settings/dns)",
  }),
};
export const DomainCreate = Type.Object(
  {
    domain: Type.String({ minLength: 1, maxLength: 253, description: 'Fully qualified domain name' }),
    origins: domainSettable.origins,
    serverIds: Type.Optional(domainSettable.serverIds),
    sslEnabled: Type.Optional(domainSettable.sslEnabled),
    wafEnabled: Type.Optional(domainSettable.wafEnabled),
    wafLevel: Type.Optional(domainSettable.wafLevel),
    wafMode: Type.Optional(domainSettable.wafMode),
    wafCompressedBodies: Type.Optional(domainSettable.wafCompressedBodies),
  },
  strict,
);
export const DomainUpdate = Type.Partial(Type.Object(domainSettable, strict), { ...strict, minProperties: 1 });
export const DomainView = Type.Object({
  id: Type.String(),
  domain: Type.String(),
  origins: Type.Array(Type.Object({ ip: Type.Optional(Type.String()), host: Type.Optional(Type.String()), port: Type.Integer() }), { description: 'Each { ip, port } or { host, port }' }),
  serverIds: Type.Array(Type.String()),
  sslEnabled: Type.Boolean(),
  sslStatus: Type.Union(
    SSL_STATUSES.map((s) => Type.Literal(s)),
    {
      description: 'Certificate state: off (sslEnabled false), pending (being obtained), active (served by a shield server), error (see sslError)',
    },
  ),
  sslError: Type.Union([Type.String(), Type.Null()], { description: 'Why the certificate could not be obtained, as a shield server reported it' }),
  sslExpires: Type.Union([Type.String({ description: 'YYYY-MM-DD' }), Type.Null()], { description: 'Earliest expiry of the certificates in service' }),
  wafEnabled: Type.Boolean(),
  wafLevel: Type.String(),
  wafMode: Type.String({ description: 'block or detect' }),
  wafCompressedBodies: Type.String({ description: 'refuse or allow' }),
  status: Type.Union([Type.Literal('active'), Type.Literal('pending'), Type.Literal('error')]),
  dnsFailover: Type.Boolean({ description: "Whether DNS failover keeps the domain's A/AAAA records on its healthy servers" }),
  dnsAddresses: Type.Union([Type.Array(Type.String()), Type.Null()], { description: 'The addresses DNS failover last published; null before the first publication' }),
  dnsError: Type.Union([Type.String(), Type.Null()], { description: 'Why the last health cycle could not publish the addresses wanted; null when it could' }),
  createdAt: Type.String({ format: 'date-time' }),
  updatedAt: Type.String({ format: 'date-time' }),
  warnings: Type.Array(Type.String(), {
    description: 'What keeps the saved domain from working as expected, in words (today: no shield server serves it); empty when nothing does',
  }),
});

// WAF
const Priority = Type.Integer({ minimum: 0, maximum: 1_000_000, description: 'Default 100; lower runs first' });
const RuleValue = Type.String({ minLength: 1, maxLength: 1000 });
export const RuleCreate = Type.Object(
  {
    rule_type: Type.Union(RULE_TYPES.map((t) => Type.Literal(t))),
    value: RuleValue,
    domain_id: Type.Optional(Type.String({ maxLength: 100, description: 'Omitted: global. Not allowed for rate_limit and block_bot; required for waf_exception' })),
    enabled: Type.Optional(Type.Boolean()),
    priority: Type.Optional(Priority),
  },
  strict,
);
export const RuleUpdate = Type.Object({ value: Type.Optional(RuleValue), enabled: Type.Optional(Type.Boolean()), priority: Type.Optional(Priority) }, { ...strict, minProperties: 1 });
export const RuleView = Type.Object({
  id: Type.String(),
  rule_type: Type.String(),
  value: Type.String(),
  domain_id: Type.Union([Type.String(), Type.Null()]),
  enabled: Type.Boolean(),
  priority: Type.Integer(),
  created_at: Type.String({ format: 'date-time' }),
  updated_at: Type.String({ format: 'date-time' }),
});
// Custom rules (docs/rules.md)
const RuleName = Type.String({ minLength: 1, maxLength: CUSTOM_RULE_NAME_MAX, pattern: NO_CONTROL_CHARS });
const RuleExpression = Type.String({
  minLength: 1,
  maxLength: RULE_LIMITS.expression,
  description: 'A subset of Cloudflare\'s Rules language, e.g. `http.request.uri.path eq "/login" and ip.src.country in {"CN" "RU"}`',
});
const CustomAction = Type.Union(
  CUSTOM_RULE_ACTIONS.map((a) => Type.Literal(a)),
  {
    description: 'block (403), challenge (the bot challenge), allow (skips bot protection, rate limits and attack detection), log, rate_limit (with rateLimit)',
  },
);
const RateLimitSettings = Type.Object(
  {
    requests: Type.Integer({ minimum: RULE_RATE_LIMITS.requests[0], maximum: RULE_RATE_LIMITS.requests[1], description: 'Requests allowed in the period' }),
    period: Type.Integer({ minimum: RULE_RATE_LIMITS.period[0], maximum: RULE_RATE_LIMITS.period[1], description: 'Seconds' }),
    characteristics: Type.Array(Type.String({ maxLength: 72 }), { minItems: 1, maxItems: 2, description: '["ip"], ["ip", "path"] or ["header:<name>"]' }),
    mitigation: Type.Union([Type.Literal('block'), Type.Literal('challenge')], { description: 'block: 429 with Retry-After; challenge: the bot challenge' }),
    duration: Type.Integer({ minimum: RULE_RATE_LIMITS.duration[0], maximum: RULE_RATE_LIMITS.duration[1], description: 'Seconds the mitigation lasts' }),
  },
  strict,
);
const RuleScope = Type.Union([Type.String({ maxLength: 100 }), Type.Null()], { description: 'The domain; null or omitted: every domain of the account' });
export const CustomRuleCreate = Type.Object(
  {
    name: RuleName,
    expression: RuleExpression,
    action: CustomAction,
    rateLimit: Type.Optional(Type.Union([RateLimitSettings, Type.Null()], { description: 'Required with the action rate_limit, absent or null otherwise' })),
    domainId: Type.Optional(RuleScope),
    priority: Type.Optional(Priority),
    enabled: Type.Optional(Type.Boolean()),
  },
  strict,
);
export const CustomRuleUpdate = Type.Object(
  {
    name: Type.Optional(RuleName),
    expression: Type.Optional(RuleExpression),
    action: Type.Optional(CustomAction),
    rateLimit: Type.Optional(Type.Union([RateLimitSettings, Type.Null()])),
    domainId: Type.Optional(RuleScope),
    priority: Type.Optional(Priority),
    enabled: Type.Optional(Type.Boolean()),
  },
  { ...strict, minProperties: 1 },
);
export const CustomRuleView = Type.Object({
  id: Type.String(),
  name: Type.String(),
  expression: Type.String(),
  action: Type.String(),
  rateLimit: Type.Union([RateLimitSettings, Type.Null()]),
  domainId: Type.Union([Type.String(), Type.Null()]),
  priority: Type.Integer(),
  enabled: Type.Boolean(),
  createdAt: Type.String({ format: 'date-time' }),
  updatedAt: Type.String({ format: 'date-time' }),
  hits: Type.Object(
    {
      hour: Type.Integer({ minimum: 0 }),
      day: Type.Integer({ minimum: 0 }),
      week: Type.Integer({ minimum: 0 }),
    },
    {
      description:
        'Requests the rule acted on (blocked, allowed, challenged, rate limited, or logged by a log rule) in the last hour, day and week, as the shield servers report them every minute (docs/rules.md "Hits")',
    },
  ),
});
export const WafEvent = Type.Object({
  id: Type.String({ description: 'The event; `before` in the Link header names the last of a page' }),
  timestamp: Type.String({ format: 'date-time', description: 'The first occurrence' }),
  source_ip: Type.String(),
  domain: Type.String(),
  reason: Type.String(),
  rule_id: Type.Union([Type.String(), Type.Null()]),
  ruleName: Type.Union([Type.String(), Type.Null()], { description: "The custom rule's name when rule_id names one of the account's custom rules (docs/rules.md); null otherwise" }),
  server_id: Type.Union([Type.String(), Type.Null()]),
  method: Type.Union([Type.String({ maxLength: EVENT_FIELD_MAX.method }), Type.Null()], { description: 'The request method; null for events from agents that predate it' }),
  path: Type.Union([Type.String({ maxLength: EVENT_FIELD_MAX.path }), Type.Null()], { description: 'The request path; null for events from agents that predate it' }),
  query: Type.Union([Type.String({ maxLength: EVENT_FIELD_MAX.query }), Type.Null()], {
    description:
      "The start of the request's query string (first 192 bytes, as sent, without the `?`), values of parameters named like credentials replaced by [redacted]; null when the request had none, or from agents that predate it. Not part of what folds events: the first occurrence's",
  }),
  location: Type.Union([Type.String({ maxLength: EVENT_FIELD_MAX.location }), Type.Null()], {
    description: 'Where a detector matched: query:<name>, body:<name>, cookie:<name>, header:<name> or path; null when no detector matched',
  }),
  matched: Type.Union([Type.String({ maxLength: EVENT_FIELD_MAX.matched }), Type.Null()], { description: 'A short excerpt of what a detector matched; null when no detector matched' }),
  blocked: Type.Boolean({ description: 'false: logged, not blocked (a detection in detect mode, let through; a challenge page served)' }),
  count: Type.Integer({
    minimum: 1,
    description: 'Occurrences of this very event (same server, source, reason, rule, domain, method, path, location and blocked) within 60 s of the first, folded into it',
  }),
  last_seen_at: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], { description: 'The last occurrence folded in; null when count is 1' }),
  request_id: Type.Union([Type.String(), Type.Null()], {
    description: "The proxy's request id of the first occurrence; null from agents that predate it. The ids of the first 32 occurrences find the event (requestId)",
  }),
});
export const BotKeyRotationView = Type.Object(
  {
    key_id: Type.String({ description: 'id of the key that signs from now on' }),
    rotated_at: Type.String({ format: 'date-time' }),
    previous_key_id: Type.Union([Type.String(), Type.Null()], { description: 'id of the key it replaced, still accepted' }),
    previous_valid_until: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], { description: 'when cookies signed with the previous key have all expired' }),
  },
  { additionalProperties: false },
);

export const AiBotView = Type.Object({ name: Type.String(), pattern: Type.String(), operator: Type.String() });

// Account, billing, notifications
const Money = Type.Number({ description: 'US dollars' });
const LogIndex = Type.Integer({
  minimum: 0,
  maximum: 2_147_483_647,
  description: "On-chain deposits: the one transfer of the transaction meant (its log index, as explorers show it); default every transfer of it to the deposit's address",
});
export const AccountView = Type.Object({
  id: Type.String(),
  email: Type.String(),
  plan: Type.String(),
  price: Money,
  balance: Money,
  state: Type.Union([Type.Literal('active'), Type.Literal('frozen')]),
  nextChargeAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  createdAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
});
export const DepositCreate = Type.Object({ amount: Type.Number({ minimum: 0.01, maximum: 1_000_000, description: 'US dollars, at most two decimals' }) }, strict);
const nullable = <T extends TSchema>(t: T, description?: string) => Type.Union([t, Type.Null()], description ? { description } : {});
const Time = Type.String({ format: 'date-time' });
/** A ledger row (docs/billing.md, "The ledger"). */
export const TransactionView = Type.Object({
  id: Type.String(),
  kind: Type.String({ description: 'charge, deposit or adjustment' }),
  amount: Type.Number({ description: "US dollars: a charge's price, a deposit's amount (what arrived, once confirmed); an adjustment's signed amount" }),
  delta: Type.Number({ description: 'US dollars: the signed effect on the balance; 0 while pending or failed. The balance is the sum of every delta' }),
  status: Type.String({ description: 'pending, confirmed, failed, or expired (a deposit not paid in time)' }),
  description: nullable(Type.String()),
  txHash: nullable(Type.String(), 'The payment: an on-chain transaction hash, or the payment id the operator or processor gave'),
  logIndex: nullable(Type.Integer(), 'On-chain payments: the log index of the transfer credited (with txHash, the transfer itself)'),
  periodStart: nullable(Time, 'Monthly charges: the start of the month paid for'),
  address: nullable(Type.String(), 'On-chain deposits: the address to pay to'),
  network: nullable(Type.String(), 'On-chain deposits: the network to pay on'),
  token: nullable(Type.String(), 'On-chain deposits: the token to pay with (its symbol)'),
  createdAt: nullable(Time),
  confirmedAt: nullable(Time),
  expiresAt: nullable(Time, 'Deposits: when it stops being open (24 hours after it was made)'),
});
export const DepositView = Type.Object({
  ...TransactionView.properties,
  tokenContract: nullable(Type.String(), "On-chain deposits: the token's ERC-20 contract on that network"),
});
const CreditedAccount = Type.Object({ id: Type.String(), state: Type.Union([Type.Literal('active'), Type.Literal('frozen')]), balance: Money });
export const DepositConfirmed = Type.Object({ deposit: TransactionView, account: CreditedAccount });
export const PlanChange = Type.Object({ plan: Type.Union([Type.Literal('free'), Type.Literal('pro'), Type.Literal('enterprise')]) }, strict);
export const PlanChanged = Type.Object({
  account: AccountView,
  transaction: nullable(TransactionView, 'The pro-rata charge (upgrade) or credit (downgrade); null when nothing was due'),
});
/** POST /api/billing/webhook, after its signature is checked (docs/billing.md, "Payment processor webhook"). */
export const PaymentEventBody = Type.Object(
  {
    id: Type.String({ minLength: 1, maxLength: 200, pattern: NO_CONTROL_CHARS, description: "The processor's event id: each is applied once" }),
    type: Type.String({ minLength: 1, maxLength: 100, description: 'deposit.confirmed; other types are acknowledged and ignored' }),
    depositId: Type.Optional(Type.String({ maxLength: 100 })),
    amount: Type.Optional(Type.Number({ minimum: 0.01, maximum: 1_000_000, description: 'US dollars received, at most two decimals; default the amount asked for' })),
    txHash: Type.Optional(
      Type.String({ minLength: 1, maxLength: 200, pattern: NO_CONTROL_CHARS, description: "The payment: on-chain deposits, the transaction's hash (required); otherwise the processor's payment id" }),
    ),
    logIndex: Type.Optional(LogIndex),
  },
  strict,
);
export const PaymentEventResult = Type.Object({
  received: Type.Boolean({ description: 'Always true: the event was read' }),
  applied: Type.Boolean({ description: 'false for an event already applied, or of a type other than deposit.confirmed' }),
  duplicate: Type.Optional(Type.Boolean()),
  deposit: Type.Optional(TransactionView),
  account: Type.Optional(CreditedAccount),
});
export const NotificationView = Type.Object({
  id: Type.String(),
  kind: Type.String(),
  message: Type.String({ description: 'What happened and what to do' }),
  serverId: Type.Union([Type.String(), Type.Null()]),
  domainId: Type.Union([Type.String(), Type.Null()]),
  count: Type.Integer({ minimum: 1, description: 'Identical notifications (same server, kind and message) within a minute, folded into this one' }),
  read: Type.Boolean({ description: 'Marked read with POST /api/notifications/read' }),
  createdAt: Type.String({ format: 'date-time', description: 'The first occurrence' }),
  updatedAt: Type.String({ format: 'date-time', description: 'The last occurrence folded in (createdAt when count is 1)' }),
});
/** Newest-first lists: `limit` (1 to 200, default 50) and `before` (the last id of the previous page, from the Link header). */
export const PageQuery = Type.Object(
  {
    limit: Type.Optional(Type.String({ maxLength: 10, description: 'Entries per page, 1 to 200 (default 50)' })),
    before: Type.Optional(Type.String({ maxLength: 100, description: 'The page after this entry (the id the Link header names)' })),
  },
  { description: 'Other parameters are ignored, as on every read' },
);
/** GET /api/waf/events: PageQuery and the filters. */
export const EventQuery = Type.Object(
  {
    ...PageQuery.properties,
    domain: Type.Optional(Type.String({ maxLength: 253, description: 'Events of this domain (exact, any case)' })),
    reason: Type.Optional(Type.String({ maxLength: 40, description: 'Events of this reason' })),
    ip: Type.Optional(Type.String({ maxLength: 45, description: 'Events from this source address (exact)' })),
    since: Type.Optional(Type.String({ maxLength: 40, description: 'First occurrence at or after this ISO time (within the 7 days kept)' })),
    until: Type.Optional(Type.String({ maxLength: 40, description: 'First occurrence at or before this ISO time; since must not be after it' })),
    requestId: Type.Optional(Type.String({ maxLength: 64, description: 'The event holding this request id (from a block page or X-Rampart-Request-Id): its first occurrence or one folded into it' })),
  },
  { description: 'Other parameters are ignored, as on every read' },
);
export const AuditQuery = Type.Object(
  {
    ...PageQuery.properties,
    objectType: Type.Optional(
      Type.String({ maxLength: 40, description: 'server, domain, waf_rule, custom_rule, waf_settings, notification_settings, dns_settings, api_key, account, deposit or transaction' }),
    ),
    objectId: Type.Optional(Type.String({ maxLength: 100, description: 'Entries of this object' })),
    action: Type.Optional(Type.String({ maxLength: 40, description: 'create, update, delete, or another action (regenerate_token, change_plan, confirm, charge, charge_failed, adjust)' })),
    actor: Type.Optional(Type.String({ maxLength: 320, description: "An API key's name or prefix, a user's e-mail, or an actor type (api_key, user, operator, system)" })),
    since: Type.Optional(Type.String({ maxLength: 40, description: 'At or after this ISO time' })),
    until: Type.Optional(Type.String({ maxLength: 40, description: 'At or before this ISO time; since must not be after it' })),
  },
  { description: 'Other parameters are ignored, as on every read' },
);
const jsonObjectOrNull = (description: string) => Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()], { description });
export const AuditEntry = Type.Object(
  {
    id: Type.String(),
    at: Type.String({ format: 'date-time' }),
    actor: Type.Object({
      type: Type.Union([Type.Literal('api_key'), Type.Literal('user'), Type.Literal('operator'), Type.Literal('system')]),
      name: Type.Union([Type.String(), Type.Null()], { description: "The API key's name or the user's e-mail; null for the operator and the system" }),
      keyPrefix: Type.Union([Type.String(), Type.Null()], { description: "The API key's prefix (api_key only)" }),
    }),
    objectType: Type.String(),
    objectId: Type.Union([Type.String(), Type.Null()], { description: 'null for settings the account has one of' }),
    action: Type.String(),
    changed: Type.Array(Type.String(), { description: 'The fields that changed (all of them on create and delete), secrets included' }),
    before: jsonObjectOrNull('Those fields before; null on create. A secret is "[secret]" (set) or null, never its value'),
    after: jsonObjectOrNull('Those fields after; null on delete. A secret is "[secret]" (set) or null, never its value'),
  },
  { description: 'One change, as the audit log records it' },
);
export const NotificationReadBody = Type.Object({ ids: Type.Array(Type.String({ maxLength: 100 }), { minItems: 1, maxItems: 200, description: 'Notification ids, at most 200' }) }, strict);
export const NotificationReadResult = Type.Object({ marked: Type.Integer({ description: 'How many unread notifications of the account were marked read' }) });
export const NotificationSettingsUpdate = Type.Object(
  {
    webhookUrl: Type.Optional(Type.Union([Type.String({ maxLength: 2048 }), Type.Null()], { description: 'http(s) URL; null: no webhook' })),
    webhookSecret: Type.Optional(Type.Union([Type.String({ maxLength: 200 }), Type.Null()], { description: 'The signing key, 16 to 200 characters; required with webhookUrl; never shown' })),
    email: Type.Optional(Type.Union([Type.String({ maxLength: 254 }), Type.Null()], { description: 'One address; null: no e-mail' })),
    kinds: Type.Optional(Type.Union([Type.Array(Type.String({ maxLength: 50 }), { maxItems: 20 }), Type.Null()], { description: 'Kinds delivered; empty or null: every kind' })),
  },
  { ...strict, minProperties: 1 },
);
const ChannelStatus = Type.Union(
  [
    Type.Object({
      state: Type.Union([Type.Literal('ok'), Type.Literal('failing'), Type.Literal('paused'), Type.Literal('disabled')], {
        description:
          'failing: its last attempts failed; paused: 5 failed in a row, nothing is sent until pausedUntil; disabled: every attempt failed for 3 days, save the channel again to turn it back on',
      }),
      consecutiveFailures: Type.Integer(),
      failingSince: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
      pausedUntil: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
      disabledAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
      lastError: Type.Union([Type.String(), Type.Null()]),
    }),
    Type.Null(),
  ],
  { description: 'How deliveries to this channel go; null without the channel' },
);
export const NotificationSettingsView = Type.Object({
  webhookUrl: Type.Union([Type.String(), Type.Null()]),
  webhookSecretSet: Type.Boolean({ description: 'Whether a webhook secret is stored (it is never shown)' }),
  email: Type.Union([Type.String(), Type.Null()]),
  emailConfirmed: Type.Boolean({ description: 'Whether the link of the confirmation e-mail was opened; nothing else is sent to the address before' }),
  emailConfirmationSentAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], { description: 'When the last confirmation e-mail was sent (null once confirmed)' }),
  kinds: Type.Array(Type.String(), { description: 'Kinds delivered; empty: every kind' }),
  updatedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  webhookStatus: ChannelStatus,
  emailStatus: ChannelStatus,
});
export const EmailConfirmBody = Type.Object({ token: Type.String({ minLength: 1, maxLength: 200, description: 'The token of the confirmation link' }) }, strict);
export const EmailConfirmResult = Type.Object({ email: Type.String({ description: 'The address now confirmed' }) });
export const DeliveryView = Type.Object({
  id: Type.String(),
  notificationId: Type.String(),
  kind: Type.String(),
  channel: Type.Union([Type.Literal('webhook'), Type.Literal('email')]),
  target: Type.String({ description: 'The webhook URL without its query, or the e-mail address' }),
  status: Type.Union([Type.Literal('pending'), Type.Literal('delivered'), Type.Literal('given_up')]),
  attempts: Type.Integer(),
  lastStatus: Type.Union([Type.Integer(), Type.Null()], { description: 'HTTP status or SMTP reply code of the last attempt' }),
  lastError: Type.Union([Type.String(), Type.Null()]),
  nextAttemptAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  createdAt: Type.String({ format: 'date-time' }),
  updatedAt: Type.String({ format: 'date-time' }),
});

// Sessions
export const Credentials = Type.Object(
  {
    email: Type.String({ minLength: 3, maxLength: 254, pattern: '^[^\\s@\\p{Cc}\\p{Cs}]+@[^\\s@\\p{Cc}\\p{Cs}]+\\.[^\\s@\\p{Cc}\\p{Cs}]+$' }),
    password: Type.String({ minLength: 8, maxLength: 200, pattern: '^[^\\p{Cs}]*$' }),
  },
  strict,
);
export const SessionView = Type.Object({ accountId: Type.String(), email: Type.String(), plan: Type.String() });
export const Registration = Type.Object(
  {
    ...Credentials.properties,
    invitation: Type.Optional(Type.String({ minLength: 1, maxLength: 200, pattern: NO_CONTROL_CHARS, description: 'an invitation from the operator (RAMPART_SIGNUP=invite)' })),
  },
  strict,
);
export const SignupView = Type.Object({
  signup: Type.Union([Type.Literal('closed'), Type.Literal('invite'), Type.Literal('open')], {
    description: 'closed: only the operator creates accounts; invite: POST /api/auth/register needs an invitation; open: anyone may register',
  }),
});

// Operator API
export const AdminAccountCreate = Type.Object(
  {
    email: Credentials.properties.email,
    password: Type.Optional(Credentials.properties.password),
    plan: Type.Union([Type.Literal('free'), Type.Literal('pro'), Type.Literal('enterprise')]),
    balance: Type.Optional(Type.Number({ minimum: 0, maximum: 100_000_000, description: 'US dollars; default 0' })),
  },
  strict,
);
export const AdminInvitationCreate = Type.Object(
  {
    email: Type.Optional(Credentials.properties.email),
    expiresInDays: Type.Optional(Type.Integer({ minimum: 1, maximum: 90, description: 'default 7' })),
  },
  strict,
);
export const InvitationCreated = Type.Object({
  id: Type.String(),
  invitation: Type.String({ description: 'the token to give the invited person; shown only here' }),
  email: Type.Union([Type.String(), Type.Null()]),
  expiresAt: Type.String(),
});
export const AdminCharge = Type.Object({ accountId: Type.Optional(Type.String({ maxLength: 100 })) }, strict);
export const AdminConfirm = Type.Object(
  {
    txHash: Type.Optional(
      Type.String({ minLength: 1, maxLength: 200, pattern: NO_CONTROL_CHARS, description: "The payment: on-chain deposits, the transaction's hash (required); otherwise the payment id" }),
    ),
    logIndex: Type.Optional(LogIndex),
  },
  strict,
);
export const AdminAdjustment = Type.Object(
  {
    amount: Type.Number({ minimum: -100_000_000, maximum: 100_000_000, description: 'US dollars, signed (a credit or a debit), not 0, at most two decimals' }),
    description: Type.Optional(Type.String({ minLength: 1, maxLength: 200, pattern: NO_CONTROL_CHARS })),
  },
  strict,
);
export const AdminAdjusted = Type.Object({ transaction: TransactionView, account: CreditedAccount });

export type DomainCreateBody = Static<typeof DomainCreate>;
export type DomainUpdateBody = Static<typeof DomainUpdate>;
