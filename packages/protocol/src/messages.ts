import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { COMPRESSED_BODY_POLICIES, RULE_TYPES, WAF_LEVELS, WAF_MODES } from './waf.js';
import { CUSTOM_RULE_ACTIONS, RULE_LIMITS } from './rule-language.js';
import { CRAWLER_PREFIXES_MAX } from './crawlers.js';
import { LATENCY_BUCKETS_MS } from './limits.js';

/** Raised on both ends; an agent speaking another version is refused with a close reason. */
export const PROTOCOL_VERSION = 1;

/**
 * WebSocket close codes of the agent channel (4000-4999 are application codes; 1012 is the
 * standard "service restart").
 */
export const CLOSE = {
  /** The process is shutting down: reconnect, spread over RESTART_SPREAD_MS so a fleet does not arrive at once. */
  restarting: 1012,
  protocolMismatch: 4000,
  decommissioned: 4001,
  tokenRevoked: 4002,
  invalidMessage: 4003,
  replaced: 4004,
} as const;

/**
 * The limits of the agent channel, in one place: the service holds every agent to them (an agent
 * holding a valid token is not trusted to keep them) and the agent keeps within them.
 */
export const AGENT_LIMITS = {
  /**
   * Bytes of one agent -> service WebSocket message (the service's ws maxPayload); a longer one
   * closes the connection with 1009 (message too big). It is above the largest valid message (a
   * full events/batch with every string at its cap, each character escaped, and every item
   * carrying its request ids: about 4.0 MB), so an honest agent never meets it.
   */
  messageBytes: 4 * 1024 * 1024,
  /** WAF events in one events/batch. */
  eventsPerBatch: 500,
  /**
   * WAF events stored per shield server per UTC day, counted by the time the service received
   * them (whatever time the events carry); the agent logs no more than this either.
   */
  eventsPerServerPerDay: 5000,
  /** WAF events an agent holds while the service is away. */
  bufferedEvents: 5000,
  /**
   * Request ids one stored event keeps: its first occurrences' (the first and the next 31 folded
   * into it); an events/batch item carries at most this many (requestId and requestIds).
   */
  requestIdsPerEvent: 32,
  /** Occurrences one events/batch item folds (and a stored event's count never passes int32). */
  foldedPerItem: 1_000_000_000,
  /** Status reports an agent holds while the service is away. */
  bufferedReports: 100,
  /** Errors in one config/ack, and characters in each one's message. */
  ackErrors: 50,
  ackErrorMessage: 1000,
  /** Characters in a status/report message. */
  statusMessage: 4000,
  /** Characters in a cert/status message. */
  certMessage: 1000,
  /** Characters in agent/hello's agentVersion. */
  agentVersion: 64,
  /** Domains in one analytics/batch (an account has at most 1,000). */
  analyticsDomains: 1000,
  /** analytics/batch messages an agent holds while the service is away (two hours of minutes). */
  bufferedAnalytics: 120,
  /** Requests (and each status class, and each block reason) one domain may count in one batch. */
  analyticsRequests: 1_000_000_000_000,
  /** Bytes in or out one domain may count in one batch. */
  analyticsBytes: 1_000_000_000_000_000,
  /** Custom rules one analytics/batch counts hits of (an account has at most 250). */
  analyticsRules: 1000,
} as const;

/** Revisions and line numbers: non-negative integers a JavaScript number holds exactly. */
const Count = Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER });
/** The latest Unix time (seconds) an event or certificate can carry: 9999-12-31T23:59:59Z. */
export const MAX_UNIX_SECONDS = 253_402_300_799;

export const AGENT_PATH = '/agent';
/**
 * Every shield server's HAProxy answers GET (and HEAD) of this exact path itself, for any Host,
 * with 200 `ok`: the service's health probe. Nothing else about a request reaches it.
 */
export const HEALTH_PATH = '/.well-known/rampart/health';

/** An origin by address, or by DNS name (resolved by HAProxy at run time). */
const Origin = Type.Union([
  Type.Object({ ip: Type.String(), port: Type.Integer({ minimum: 1, maximum: 65535 }) }, { additionalProperties: false }),
  Type.Object({ host: Type.String(), port: Type.Integer({ minimum: 1, maximum: 65535 }) }, { additionalProperties: false }),
]);

export const SnapshotDomain = Type.Object(
  {
    id: Type.String(),
    domain: Type.String(),
    origins: Type.Array(Origin),
    sslEnabled: Type.Boolean(),
    wafEnabled: Type.Boolean(),
    wafLevel: Type.Union(WAF_LEVELS.map((l) => Type.Literal(l))),
    /** block: the attack-detection step answers 403; detect: it logs the event (not blocked) and lets the request through. */
    wafMode: Type.Union(WAF_MODES.map((m) => Type.Literal(m))),
    /**
     * Level high: refuse: a request whose body is compressed (Content-Encoding other than identity)
     * is refused (compressed_body), since no detector can read it; allow: it passes uninspected.
     * Absent from older control planes: refuse.
     */
    wafCompressedBodies: Type.Optional(Type.Union(COMPRESSED_BODY_POLICIES.map((m) => Type.Literal(m)))),
    /**
     * The addresses of every live shield server of this domain (each one's publicIp, else the
     * address its agent connected from): before ordering a certificate the agent checks that the
     * domain resolves to one of them.
     */
    serverAddresses: Type.Array(Type.String({ maxLength: 45 }), { maxItems: 100 }),
  },
  { additionalProperties: false },
);

export const SnapshotRule = Type.Object(
  {
    id: Type.String(),
    type: Type.Union(RULE_TYPES.map((t) => Type.Literal(t))),
    value: Type.String(),
    domainId: Type.Union([Type.String(), Type.Null()]),
    priority: Type.Integer(),
  },
  { additionalProperties: false },
);

/** A custom rule (rule-language.ts): its expression is parsed again by the proxy's compiler. */
export const SnapshotCustomRule = Type.Object(
  {
    id: Type.String(),
    expression: Type.String({ maxLength: RULE_LIMITS.expression }),
    action: Type.Union(CUSTOM_RULE_ACTIONS.map((a) => Type.Literal(a))),
    domainId: Type.Union([Type.String(), Type.Null()]),
    priority: Type.Integer(),
    /** With the action rate_limit only (rule-language.ts RuleRateLimit; the proxy checks it again). */
    rateLimit: Type.Optional(
      Type.Object(
        {
          requests: Type.Integer(),
          period: Type.Integer(),
          characteristics: Type.Array(Type.String({ maxLength: 72 }), { maxItems: 2 }),
          mitigation: Type.Union([Type.Literal('block'), Type.Literal('challenge')]),
          duration: Type.Integer(),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);

export const BOT_KEY_ID_PATTERN = '^[0-9a-z]{1,16}$';
export const BotKey = Type.Object({ id: Type.String({ pattern: BOT_KEY_ID_PATTERN }), secret: Type.String({ pattern: '^[0-9a-f]{32,128}$' }) }, { additionalProperties: false });
export type BotKey = Static<typeof BotKey>;

/** Everything one shield server must run: full desired state, never a diff. */
export const ServerSnapshot = Type.Object(
  {
    serverId: Type.String(),
    revision: Type.Integer({ minimum: 0 }),
    domains: Type.Array(SnapshotDomain),
    /** Enabled rules only, by priority (lower first). */
    rules: Type.Array(SnapshotRule),
    /**
     * The account's bot-protection HMAC keys, shared by all its shield servers: the current one
     * first (it signs challenges and pass cookies), then the one it replaced while cookies signed
     * with that may still be live (accepted, never used to sign). Each is named by its key id.
     */
    botKeys: Type.Optional(Type.Array(BotKey, { minItems: 1, maxItems: 2 })),
    /** Enabled custom rules only, by priority (lower first); absent from older control planes: none. */
    customRules: Type.Optional(Type.Array(SnapshotCustomRule)),
    /**
     * Staged rollout (docs/architecture.md): sent to a canary while its revision bakes, the
     * interval in seconds of its analytics/batch reports instead of 60; absent otherwise.
     */
    reportSeconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 60 })),
  },
  { additionalProperties: false },
);
export type ServerSnapshot = Static<typeof ServerSnapshot>;
export type SnapshotDomain = Static<typeof SnapshotDomain>;
export type SnapshotRule = Static<typeof SnapshotRule>;
export type SnapshotCustomRule = Static<typeof SnapshotCustomRule>;

/**
 * An apply error or status report whose cause is the shield server's host (a port another process
 * holds, a permission), not the configuration, starts with this: the service's notification then
 * says to fix the host, not to correct and save a change.
 */
export const HOST_PROBLEM = 'Host problem: ';
export const isHostProblem = (message: string): boolean => message.startsWith(HOST_PROBLEM);

const ApplyError = Type.Object({ line: Type.Union([Count, Type.Null()]), message: Type.String({ maxLength: AGENT_LIMITS.ackErrorMessage }) }, { additionalProperties: false });

function message<N extends string, P extends TSchema>(type: N, payload: P) {
  return Type.Object({ type: Type.Literal(type), payload }, { additionalProperties: false });
}

// agent -> service
export const AgentHello = message(
  'agent/hello',
  Type.Object(
    {
      protocol: Count,
      agentVersion: Type.String({ maxLength: AGENT_LIMITS.agentVersion }),
      runningRevision: Type.Union([Count, Type.Null()]),
      /**
       * The port HAProxy serves plain HTTP on (--http-port), where the service's health probe
       * asks HEALTH_PATH. Optional: agents from before it send none (the probe then uses 80).
       */
      httpPort: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535 })),
    },
    { additionalProperties: false },
  ),
);
export const AgentHeartbeat = message(
  'agent/heartbeat',
  Type.Object(
    {
      runningRevision: Type.Union([Count, Type.Null()]),
      /** Whether HAProxy passed the agent's last proxy health check (every 10 s). Optional: older agents send none. */
      proxyServing: Type.Optional(Type.Boolean()),
    },
    { additionalProperties: false },
  ),
);
export const ConfigAck = message(
  'config/ack',
  Type.Object({ revision: Count, ok: Type.Boolean(), errors: Type.Array(ApplyError, { maxItems: AGENT_LIMITS.ackErrors }) }, { additionalProperties: false }),
);
export const StatusReport = message(
  'status/report',
  Type.Object(
    {
      kind: Type.Union([Type.Literal('proxy_crash'), Type.Literal('proxy_reload_failed'), Type.Literal('server_error'), Type.Literal('origin_down'), Type.Literal('origin_up')]),
      message: Type.String({ maxLength: AGENT_LIMITS.statusMessage }),
    },
    { additionalProperties: false },
  ),
);
export const WAF_REASONS = [
  'ip_blocked',
  'country_blocked',
  'bot_blocked',
  'ai_bot_blocked',
  'bot_challenge',
  'rate_limited',
  'sqli_detected',
  'xss_detected',
  'cmdi_detected',
  'traversal_detected',
  'ssrf_detected',
  'xxe_detected',
  'injection_detected',
  'upload_blocked',
  'compressed_body',
  'body_too_complex',
  'custom_rule_blocked',
  'custom_rule_logged',
] as const;
export type WafReason = (typeof WAF_REASONS)[number];

/**
 * Caps on an event's request details, in UTF-16 code units (JavaScript string length, which is
 * what the schema below checks). The agent truncates to them; the service refuses longer ones.
 */
export const EVENT_FIELD_MAX = { method: 16, path: 256, query: 192, location: 80, matched: 64 } as const;

const nullableText = (maxLength: number) => Type.Union([Type.String({ maxLength }), Type.Null()]);
/** The proxy's id of a request (docs/architecture.md "Block pages"). */
const ProxyRequestId = Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$' });

export const WafEventItem = Type.Object(
  {
    /** Unix time in seconds. */
    ts: Type.Integer({ minimum: 0, maximum: MAX_UNIX_SECONDS }),
    ip: Type.String({ maxLength: 45 }),
    domain: Type.String({ maxLength: 253 }),
    reason: Type.Union(WAF_REASONS.map((r) => Type.Literal(r))),
    ruleId: Type.Union([Type.String({ maxLength: 36 }), Type.Null()]),
    // The fields below are optional on the wire: agents from before them send none (then method,
    // path, location and matched are null and blocked is true), and they must keep working.
    /** The request method, e.g. GET. */
    method: Type.Optional(nullableText(EVENT_FIELD_MAX.method)),
    /** The request path. */
    path: Type.Optional(nullableText(EVENT_FIELD_MAX.path)),
    /**
     * The start of the query string, as sent (without the `?`), the values of credential-like
     * parameters replaced (event-log.ts redactQueryCredentials); null when the request had none.
     * Newer agents only: older ones send none.
     */
    query: Type.Optional(nullableText(EVENT_FIELD_MAX.query)),
    /** Where the detector matched: query:<name>, body:<name>, cookie:<name>, header:<name> or path; null when not a detection. */
    location: Type.Optional(nullableText(EVENT_FIELD_MAX.location)),
    /** A short excerpt of what matched; null when not a detection. */
    matched: Type.Optional(nullableText(EVENT_FIELD_MAX.matched)),
    /** false for a request let through in detect mode. */
    blocked: Type.Optional(Type.Boolean()),
    /** The proxy's id of the request (1–64 of A–Z a–z 0–9 _ -); optional: older agents send none. */
    requestId: Type.Optional(ProxyRequestId),
    // The agent folds repeats (event-log.ts eventFoldKey): an item then stands for `count`
    // occurrences, the first at `ts` and the last at `lastTs`; an agent sends one item per new
    // event and then one per batch for the repeats folded into it since (same fields, same `ts`).
    // Absent (agents from before folding): one occurrence.
    /** Occurrences this item stands for; 1 when absent. */
    count: Type.Optional(Type.Integer({ minimum: 1, maximum: AGENT_LIMITS.foldedPerItem })),
    /** Unix time in seconds of the last of them; `ts` when absent. */
    lastTs: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_UNIX_SECONDS })),
    /** Request ids of the occurrences after the one `requestId` names (the first ones only: AGENT_LIMITS.requestIdsPerEvent in all). */
    requestIds: Type.Optional(Type.Array(ProxyRequestId, { maxItems: AGENT_LIMITS.requestIdsPerEvent - 1 })),
  },
  { additionalProperties: false },
);
export type WafEventItem = Static<typeof WafEventItem>;
export const EventsBatch = message('events/batch', Type.Object({ events: Type.Array(WafEventItem, { maxItems: AGENT_LIMITS.eventsPerBatch }) }, { additionalProperties: false }));

// Certificates (HTTP-01). An agent asks for an order slot before every order (the service keeps
// the authority's cap per registered domain), publishes each key authorization so every server of
// the domain can answer the validation, and reports each certificate's state.
const RequestId = Type.String({ pattern: '^[A-Za-z0-9_-]{1,64}$' });
const Hostname = Type.String({ minLength: 1, maxLength: 253 });
export const ACME_TOKEN_PATTERN = '^[A-Za-z0-9_-]{1,128}$';
export const KEY_AUTHORIZATION_PATTERN = '^[A-Za-z0-9_-]{1,128}\\.[A-Za-z0-9_-]{43}$';
const ChallengeFields = {
  domain: Hostname,
  token: Type.String({ pattern: ACME_TOKEN_PATTERN }),
  keyAuthorization: Type.String({ pattern: KEY_AUTHORIZATION_PATTERN }),
  action: Type.Union([Type.Literal('add'), Type.Literal('remove')]),
};
export const AcmeSlotRequest = message('acme/slot-request', Type.Object({ requestId: RequestId, domain: Hostname }, { additionalProperties: false }));
export const AcmeChallengePublish = message('acme/challenge-publish', Type.Object({ requestId: RequestId, ...ChallengeFields }, { additionalProperties: false }));
export const CERT_STATES = ['pending', 'active', 'error'] as const;
/** The latest notAfter a certificate can carry (RFC 5280's 99991231235959Z), in Unix seconds. */
export const MAX_CERT_EXPIRY = MAX_UNIX_SECONDS;
export type CertState = (typeof CERT_STATES)[number];
export const CertStatus = message(
  'cert/status',
  Type.Object(
    {
      domain: Hostname,
      status: Type.Union(CERT_STATES.map((s) => Type.Literal(s))),
      /** Unix time in seconds of the served certificate's notAfter; null while there is none. */
      expiresAt: Type.Union([Type.Integer({ minimum: 0, maximum: MAX_CERT_EXPIRY }), Type.Null()]),
      message: Type.Union([Type.String({ maxLength: AGENT_LIMITS.certMessage }), Type.Null()]),
    },
    { additionalProperties: false },
  ),
);
// Traffic analytics (docs/analytics.md): every interval (60 s) the agent sends, per domain, what
// HAProxy counted since the last batch (deltas of its cumulative counters) and the WAF's blocks.
const AnalyticsCount = Type.Integer({ minimum: 0, maximum: AGENT_LIMITS.analyticsRequests });
const AnalyticsBytes = Type.Integer({ minimum: 0, maximum: AGENT_LIMITS.analyticsBytes });
export const STATUS_CLASSES = ['1xx', '2xx', '3xx', '4xx', '5xx', 'other'] as const;
export type StatusClass = (typeof STATUS_CLASSES)[number];
export const AnalyticsDomain = Type.Object(
  {
    domain: Type.String({ minLength: 1, maxLength: 253 }),
    requests: AnalyticsCount,
    status: Type.Object(Object.fromEntries(STATUS_CLASSES.map((c) => [c, AnalyticsCount])) as Record<StatusClass, typeof AnalyticsCount>, { additionalProperties: false }),
    bytesIn: AnalyticsBytes,
    bytesOut: AnalyticsBytes,
    /** Blocked requests by WAF reason (reasons without blocks left out). */
    blocked: Type.Partial(Type.Object(Object.fromEntries(WAF_REASONS.map((r) => [r, AnalyticsCount])) as Record<WafReason, typeof AnalyticsCount>), { additionalProperties: false }),
    /** Sampled requests by latency bucket (LATENCY_BUCKETS_MS); absent without samples, and from older agents. */
    latency: Type.Optional(Type.Array(AnalyticsCount, { minItems: LATENCY_BUCKETS_MS.length + 1, maxItems: LATENCY_BUCKETS_MS.length + 1 })),
  },
  { additionalProperties: false },
);
export type AnalyticsDomain = Static<typeof AnalyticsDomain>;
/** The start of a UTC minute, e.g. 2026-11-23T06:41:00.000Z (seconds and milliseconds zero). */
export const ANALYTICS_MINUTE_PATTERN = '^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:00(\\.000)?Z$';
export const AnalyticsBatch = message(
  'analytics/batch',
  Type.Object(
    {
      /** The minute the interval began in. */
      minute: Type.String({ pattern: ANALYTICS_MINUTE_PATTERN, maxLength: 24 }),
      domains: Type.Array(AnalyticsDomain, { maxItems: AGENT_LIMITS.analyticsDomains }),
      /**
       * Requests each custom rule acted on in the interval (docs/rules.md "Hits"): blocked,
       * allowed, challenged, refused by its rate limit, or logged (a log rule). Rules without hits
       * are left out; absent from older agents.
       */
      rules: Type.Optional(
        Type.Array(Type.Object({ ruleId: Type.String({ minLength: 36, maxLength: 36 }), hits: AnalyticsCount }, { additionalProperties: false }), { maxItems: AGENT_LIMITS.analyticsRules }),
      ),
    },
    { additionalProperties: false },
  ),
);
export type AnalyticsBatchPayload = Static<typeof AnalyticsBatch>['payload'];
export const AgentMessage = Type.Union([AgentHello, AgentHeartbeat, ConfigAck, StatusReport, EventsBatch, AcmeSlotRequest, AcmeChallengePublish, CertStatus, AnalyticsBatch]);
export type AgentMessage = Static<typeof AgentMessage>;

// service -> agent
export const ConfigSnapshot = message('config/snapshot', ServerSnapshot);
export const ServiceHeartbeat = message('service/heartbeat', Type.Object({}, { additionalProperties: false }));
export const AcmeSlotReply = message(
  'acme/slot-reply',
  Type.Object({ requestId: RequestId, granted: Type.Boolean(), message: Type.Union([Type.String({ maxLength: 1000 }), Type.Null()]) }, { additionalProperties: false }),
);
/** A key authorization to serve (add) or forget (remove), relayed to every agent of the domain. */
export const AcmeChallenge = message('acme/challenge', Type.Object(ChallengeFields, { additionalProperties: false }));
/** Answers a publish once the challenge has been sent to the domain's other connected agents. */
export const AcmeChallengeReply = message('acme/challenge-reply', Type.Object({ requestId: RequestId, relayedTo: Type.Integer({ minimum: 0 }) }, { additionalProperties: false }));
/**
 * One search crawler's published address ranges (docs/bots.md "Verified crawlers"), as the control
 * plane last fetched them from the crawler's owner: CIDR prefixes (isCrawlerPrefix), used until
 * `expiresAt` (Unix seconds), after which the agent falls back to reverse DNS for that crawler.
 */
export const CrawlerAddressList = Type.Object(
  {
    crawlerId: Type.String({ pattern: '^[a-z0-9_-]{1,32}$' }),
    prefixes: Type.Array(Type.String({ maxLength: 49 }), { maxItems: CRAWLER_PREFIXES_MAX }),
    expiresAt: Type.Integer({ minimum: 0, maximum: MAX_UNIX_SECONDS }),
  },
  { additionalProperties: false },
);
export type CrawlerAddressList = Static<typeof CrawlerAddressList>;
/**
 * Every current list (the whole set: a crawler left out has none), sent after each snapshot of a
 * (re)connect and whenever the lists change. Agents from before it ignore it (an unknown message
 * is logged and dropped), and keep verifying by reverse DNS.
 */
export const CrawlerRanges = message('crawlers/ranges', Type.Object({ lists: Type.Array(CrawlerAddressList, { maxItems: 32 }) }, { additionalProperties: false }));
export const ServiceMessage = Type.Union([ConfigSnapshot, ServiceHeartbeat, AcmeSlotReply, AcmeChallenge, AcmeChallengeReply, CrawlerRanges]);
export type ServiceMessage = Static<typeof ServiceMessage>;

const agentCheck = TypeCompiler.Compile(AgentMessage);
const serviceCheck = TypeCompiler.Compile(ServiceMessage);

export type Parsed<T> = { ok: true; message: T } | { ok: false; error: string };

function parseWith<T>(check: { Check(v: unknown): boolean; Errors(v: unknown): Iterable<{ path: string; message: string }> }, raw: string): Parsed<T> {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    return { ok: false, error: 'not JSON' };
  }
  if (check.Check(value)) return { ok: true, message: value as T };
  const first = [...check.Errors(value)][0];
  return { ok: false, error: first ? `${first.path || '/'}: ${first.message}` : 'invalid message' };
}

export const parseAgentMessage = (raw: string): Parsed<AgentMessage> => parseWith(agentCheck, raw);
export const parseServiceMessage = (raw: string): Parsed<ServiceMessage> => parseWith(serviceCheck, raw);

/**
 * The versions a hello claims, read without validating the rest of it (an agent of another
 * protocol may shape its hello otherwise); undefined for anything else. Control characters are
 * dropped from the version, and it is cut to AGENT_LIMITS.agentVersion.
 */
export function helloVersions(raw: string): { protocol: number; agentVersion: string | null } | undefined {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    return undefined;
  }
  const { type, payload } = (typeof value === 'object' && value !== null ? value : {}) as { type?: unknown; payload?: unknown };
  if (type !== 'agent/hello' || typeof payload !== 'object' || payload === null) return undefined;
  const { protocol, agentVersion } = payload as { protocol?: unknown; agentVersion?: unknown };
  if (typeof protocol !== 'number' || !Number.isSafeInteger(protocol)) return undefined;
  // eslint-disable-next-line no-control-regex -- deliberate: control characters are stripped from the agent's version text
  const version = typeof agentVersion === 'string' ? agentVersion.replace(/[\x00-\x1f\x7f]/g, '').slice(0, AGENT_LIMITS.agentVersion) : null;
  return { protocol, agentVersion: version };
}

/**
 * Why an agent is refused, naming both sides' versions (the control plane's first, so that a close
 * reason cut to its 123 bytes keeps it); the same words on both sides.
 */
export function protocolRefusal(agent: { protocol: number; agentVersion: string | null }, service: { protocol: number; version: string }): string {
  const upgrade = agent.protocol > service.protocol ? 'upgrade the control plane' : 'upgrade the agent';
  return `control plane rampart ${service.version} speaks protocol ${service.protocol}, agent ${agent.agentVersion ?? '(no version)'} speaks protocol ${agent.protocol}: ${upgrade}`;
}

/** A WebSocket close reason holds at most 123 bytes of UTF-8: longer text is cut to fit. */
export function closeReasonText(text: string): string {
  const bytes = new TextEncoder().encode(text);
  if (bytes.length <= 123) return text;
  return new TextDecoder().decode(bytes.subarray(0, 120)).replace(/\uFFFD$/, '') + '...';
}

/** A domain's certificate state as the API shows it (`sslStatus`): `off` when sslEnabled is false. */
export const SSL_STATUSES = ['off', 'pending', 'active', 'error'] as const;
export type SslStatus = (typeof SSL_STATUSES)[number];
