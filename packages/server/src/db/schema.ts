import type { CertState, SslStatus } from '@rampart/protocol';
import type { ColumnType } from 'kysely';

type Timestamp = ColumnType<Date, Date | string, Date | string>;
/** int8 columns come back as string (pg) or bigint/number (PGlite); read them through Number(). */
type Int8 = ColumnType<string | number | bigint, number | bigint, number | bigint>;
type Int8WithDefault = ColumnType<string | number | bigint, number | bigint | undefined, number | bigint>;
export type ServerStatus = 'active' | 'offline' | 'decommissioned';
export type DomainStatus = 'active' | 'pending' | 'error';

export interface AccountsTable {
  id: string;
  email: string;
  password_hash: string | null;
  plan: string;
  balance_cents: Int8;
  state: string;
  bot_secret: string;
  bot_key_id: ColumnType<string, string | undefined, string>;
  bot_key_created_at: ColumnType<Date, Date | string | undefined, Date | string>;
  bot_prev_key_id: ColumnType<string | null, string | null | undefined, string | null>;
  bot_prev_secret: ColumnType<string | null, string | null | undefined, string | null>;
  bot_prev_until: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  next_charge_at: Timestamp;
  created_at: Timestamp;
  waf_version: ColumnType<number, number | undefined, number>;
}

export interface SessionsTable {
  token_hash: string;
  account_id: string;
  created_at: Timestamp;
  expires_at: Timestamp;
}

export interface InvitationsTable {
  id: string;
  token_hash: string;
  /** The only email the invitation registers, or null for any. */
  email: string | null;
  created_at: Timestamp;
  expires_at: Timestamp;
  used_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  account_id: ColumnType<string | null, string | null | undefined, string | null>;
}

export interface ApiKeysTable {
  id: string;
  account_id: string;
  name: string;
  key_hash: string;
  key_prefix: string;
  created_at: Timestamp;
  last_used_at: Timestamp | null;
}

export interface ServersTable {
  id: string;
  account_id: string;
  name: string;
  token_hash: string | null;
  status: ServerStatus;
  ip: string | null;
  /** Set by the user: the address DNS points at; else the agent's connection address is used. */
  public_ip: ColumnType<string | null, string | null | undefined, string | null>;
  last_seen_at: Timestamp | null;
  desired_revision: Int8WithDefault;
  applied_revision: Int8WithDefault;
  created_at: Timestamp;
  /** Reported by the agent: the port its HAProxy serves HTTP on (the health probe's), and whether HAProxy is serving. */
  http_port: ColumnType<number | null, number | null | undefined, number | null>;
  proxy_serving: ColumnType<boolean | null, boolean | null | undefined, boolean | null>;
  /** The last health cycle's verdict; null before the first. */
  healthy: ColumnType<boolean | null, boolean | null | undefined, boolean | null>;
  health_error: ColumnType<string | null, string | null | undefined, string | null>;
  health_checked_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  /** The version the agent's last hello said, and why that hello was refused (null: accepted). */
  agent_version: ColumnType<string | null, string | null | undefined, string | null>;
  agent_refused: ColumnType<string | null, string | null | undefined, string | null>;
  /** Staged rollout: a canary gets a change first (services/rollouts.ts). */
  canary: ColumnType<boolean, boolean | undefined, boolean>;
  /** Staged rollout: the snapshot (JSON) last released to this server, sent while it is held. */
  released_snapshot: ColumnType<string | null, string | null | undefined, string | null>;
}

export interface DomainsTable {
  id: string;
  account_id: string;
  domain: string;
  origins: ColumnType<{ ip: string; port: number }[], string, string>;
  ssl_enabled: boolean;
  waf_enabled: boolean;
  waf_level: string;
  waf_mode: ColumnType<string, string | undefined, string>;
  waf_compressed_bodies: ColumnType<string, string | undefined, string>;
  status: DomainStatus;
  ssl_expires: Timestamp | null;
  ssl_status: SslStatus;
  ssl_error: ColumnType<string | null, string | null | undefined, string | null>;
  ssl_expiring_notified_for: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  created_at: Timestamp;
  updated_at: Timestamp;
  dns_failover: ColumnType<boolean, boolean | undefined, boolean>;
  /** The addresses last published for DNS failover (JSON array). */
  dns_addresses: ColumnType<string[] | null, string | null | undefined, string | null>;
  dns_error: ColumnType<string | null, string | null | undefined, string | null>;
}

/** Each shield server's report on its certificate for a domain (cert/status). */
export interface DomainCertificatesTable {
  domain_id: string;
  server_id: string;
  status: CertState;
  expires_at: Timestamp | null;
  message: string | null;
  updated_at: Timestamp;
}

/** Every order slot granted, kept for the authority's weekly cap per registered domain. */
export interface CertificateOrdersTable {
  id: string;
  registered_domain: string;
  domain: string;
  server_id: string | null;
  account_id: string | null;
  created_at: Timestamp;
}

export interface DomainServersTable {
  domain_id: string;
  server_id: string;
}

/** Custom rules (services/custom-rules.ts): an expression of the rule language and an action. */
export interface CustomRulesTable {
  id: string;
  account_id: string;
  domain_id: string | null;
  name: string;
  expression: string;
  action: string;
  /** JSON of a rate_limit rule's settings (protocol RuleRateLimit); null for other actions. */
  rate_limit: string | null;
  enabled: boolean;
  priority: number;
  created_at: Timestamp;
  updated_at: Timestamp;
}

export interface WafRulesTable {
  id: string;
  account_id: string;
  domain_id: string | null;
  rule_type: string;
  value: string;
  enabled: boolean;
  priority: number;
  created_at: Timestamp;
  updated_at: Timestamp;
}

/** The request ids a WAF event keeps (the first AGENT_LIMITS.requestIdsPerEvent, services/events.ts). */
export interface WafEventRequestsTable {
  event_id: ColumnType<string | number | bigint, number, never>;
  account_id: string;
  request_id: string;
}

export interface WafEventsTable {
  /** bigserial: assigned by the database. */
  id: ColumnType<string | number | bigint, never, never>;
  account_id: string;
  server_id: string | null;
  domain: string;
  source_ip: string;
  reason: string;
  rule_id: string | null;
  occurred_at: Timestamp;
  method: ColumnType<string | null, string | null | undefined, string | null>;
  path: ColumnType<string | null, string | null | undefined, string | null>;
  /** The first occurrence's query string excerpt (no `?`); null when it had none or the agent sent none. */
  query: ColumnType<string | null, string | null | undefined, string | null>;
  location: ColumnType<string | null, string | null | undefined, string | null>;
  matched: ColumnType<string | null, string | null | undefined, string | null>;
  /** false: detected in detect mode and let through. */
  blocked: ColumnType<boolean, boolean | undefined, boolean>;
  /** When the service received it (the daily cap counts by this); null for events stored before it was kept. */
  received_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  /** Identical events within 60 s folded into this row (services/events.ts). */
  count: ColumnType<number, number | undefined, number>;
  /** The last occurrence folded in; null: only the first (occurred_at). */
  last_seen_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  /** The proxy's request id of the first occurrence; null when the agent sent none. */
  request_id: ColumnType<string | null, string | null | undefined, string | null>;
}

export interface NotificationsTable {
  id: string;
  account_id: string;
  kind: string;
  message: string;
  server_id: string | null;
  created_at: Timestamp;
  /** Identical notifications folded into this one (1: just itself). */
  count: ColumnType<number, number | undefined, number>;
  /** The last occurrence folded in; null while there is only the first. */
  updated_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  read_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  domain_id: ColumnType<string | null, string | null | undefined, string | null>;
}

/** The live agent connection of a server, held by one control-plane process. */
export interface AgentConnectionsTable {
  server_id: string;
  /** Unique per WebSocket connection. */
  connection_id: string;
  /** The control-plane process holding it (random per process start). */
  process_id: string;
  ip: string;
  connected_at: Timestamp;
  /** Written by the holding process while the connection lives; older than the timeout means gone. */
  last_heartbeat_at: Timestamp;
}

type Nullable<T> = ColumnType<T | null, T | null | undefined, T | null>;
type NullableTime = ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;

/** The ledger: every charge, deposit and adjustment; an account's balance is the sum of delta_cents. */
export interface TransactionsTable {
  id: string;
  account_id: string;
  /** charge | deposit | adjustment */
  kind: string;
  /** What the row is about, positive (a charge's price, a deposit's amount); adjustments signed. */
  amount_cents: Int8;
  /** The signed effect on the balance: 0 while pending or failed. */
  delta_cents: Int8WithDefault;
  /** pending | confirmed | failed */
  status: string;
  tx_hash: string | null;
  created_at: Timestamp;
  confirmed_at: Timestamp | null;
  /** Charges: the start of the period paid for (one confirmed charge per account and period). */
  period_start: NullableTime;
  description: Nullable<string>;
  /** Deposits: the address derived for it, its derivation index, network and token. */
  address: Nullable<string>;
  address_index: Nullable<number>;
  network: Nullable<string>;
  token: Nullable<string>;
  /**
   * What credited the row (with tx_hash): an on-chain transfer's chain (`eip155:<chain id>`) and
   * log index, one credit per (chain, tx_hash, log_index); null for an off-chain payment id.
   */
  chain: Nullable<string>;
  log_index: Nullable<number>;
  /** Deposits: when a pending one expires (no longer open, and an hour later no longer watched). */
  expires_at: NullableTime;
}

/** A payment processor's webhook events, applied once each. */
export interface PaymentEventsTable {
  id: string;
  deposit_id: string | null;
  received_at: Timestamp;
}

export interface NotificationSettingsTable {
  account_id: string;
  webhook_url: string | null;
  /** Encrypted with RAMPART_SECRET_KEY (it signs every delivery, so it is kept, never shown). */
  webhook_secret_enc: string | null;
  email: string | null;
  /** The kinds delivered; empty: every kind. */
  kinds: ColumnType<string[], string | undefined, string>;
  updated_at: Timestamp;
  /** When the owner confirmed `email` (the link of the confirmation e-mail); null: nothing is sent to it. */
  email_confirmed_at: NullableTime;
  /** SHA-256 (hex) of the single-use confirmation token of `email`, and until when it works. */
  email_token_hash: Nullable<string>;
  email_token_expires_at: NullableTime;
  /** When the last confirmation e-mail was sent (they are spaced out). */
  email_token_sent_at: NullableTime;
}

/** One delivery endpoint of an account (its webhook, its e-mail address): fair turns and the circuit breaker. */
export interface NotificationEndpointsTable {
  account_id: string;
  /** webhook | email */
  channel: string;
  /** An attempt to this endpoint is under way until then (one at a time per endpoint). */
  busy_until: NullableTime;
  /** When it was last served, as a number from the notification_endpoint_turns sequence (0: never). */
  last_turn: ColumnType<string, string | number | undefined, string | number>;
  consecutive_failures: ColumnType<number, number | undefined, number>;
  failing_since: NullableTime;
  /** The circuit is open: no attempt before then. */
  paused_until: NullableTime;
  disabled_at: NullableTime;
  last_error: Nullable<string>;
}

export interface NotificationDeliveriesTable {
  id: string;
  notification_id: string;
  account_id: string;
  /** webhook | email */
  channel: string;
  target: string;
  /** pending | delivered | given_up */
  status: string;
  attempts: ColumnType<number, number | undefined, number>;
  next_attempt_at: NullableTime;
  last_status: Nullable<number>;
  last_error: Nullable<string>;
  created_at: Timestamp;
  updated_at: Timestamp;
}

export interface DnsSettingsTable {
  account_id: string;
  provider: string;
  /** The provider's credentials as JSON, encrypted with RAMPART_SECRET_KEY; never returned. */
  credentials_enc: string;
  updated_at: Timestamp;
}

/** A search crawler's published address list as last fetched (services/crawler-ranges.ts). */
export interface CrawlerAddressListsTable {
  crawler_id: string;
  /** JSON array of CIDR prefixes (protocol isCrawlerPrefix). */
  prefixes: string;
  /** JSON array of the URLs it was fetched from. */
  sources: string;
  fetched_at: Timestamp;
}

export interface JobStateTable {
  name: string;
  value: string;
}

/** Traffic analytics per domain and UTC minute (analytics_minute) or hour (analytics_hour); docs/analytics.md. */
interface AnalyticsCounts {
  account_id: string;
  domain_id: string;
  requests: Int8;
  s1xx: Int8;
  s2xx: Int8;
  s3xx: Int8;
  s4xx: Int8;
  s5xx: Int8;
  s_other: Int8;
  bytes_in: Int8;
  bytes_out: Int8;
  /** {"<WAF reason>": n}. */
  blocked: ColumnType<Record<string, number>, string, string>;
  updated_at: Timestamp;
}
/** Sampled requests by latency bucket (LATENCY_BUCKETS_MS); int8 elements may arrive as strings. */
export type LatencyColumn = ColumnType<(number | string)[] | null, number[] | null | undefined, number[] | null>;

export interface AnalyticsMinuteTable extends AnalyticsCounts {
  minute: Timestamp;
  latency: LatencyColumn;
}
export interface AnalyticsHourTable extends AnalyticsCounts {
  hour: Timestamp;
}

/** Requests a custom rule acted on, per UTC minute (custom_rule_hits_minute) or hour (custom_rule_hits_hour). */
export interface CustomRuleHitsMinuteTable {
  rule_id: string;
  account_id: string;
  minute: Timestamp;
  hits: Int8;
}
export interface CustomRuleHitsHourTable {
  rule_id: string;
  account_id: string;
  hour: Timestamp;
  hits: Int8;
}

export interface AuditLogTable {
  id: string;
  account_id: string;
  created_at: Timestamp;
  /** api_key, user, operator or system (services/audit.ts Actor). */
  actor_type: string;
  /** The key's name or the user's e-mail; null for the operator and the system. */
  actor_name: string | null;
  actor_key_prefix: string | null;
  object_type: string;
  object_id: string | null;
  action: string;
  /** The names of the fields that changed (secrets too, never their values). */
  changed: ColumnType<string[], string, string>;
  before: ColumnType<Record<string, unknown> | null, string | null, string | null>;
  after: ColumnType<Record<string, unknown> | null, string | null, string | null>;
}

export interface DB {
  audit_log: AuditLogTable;
  accounts: AccountsTable;
  sessions: SessionsTable;
  invitations: InvitationsTable;
  api_keys: ApiKeysTable;
  servers: ServersTable;
  domains: DomainsTable;
  domain_servers: DomainServersTable;
  domain_certificates: DomainCertificatesTable;
  certificate_orders: CertificateOrdersTable;
  waf_rules: WafRulesTable;
  custom_rules: CustomRulesTable;
  custom_rule_hits_minute: CustomRuleHitsMinuteTable;
  custom_rule_hits_hour: CustomRuleHitsHourTable;
  waf_events: WafEventsTable;
  waf_event_requests: WafEventRequestsTable;
  notifications: NotificationsTable;
  agent_connections: AgentConnectionsTable;
  transactions: TransactionsTable;
  payment_events: PaymentEventsTable;
  notification_settings: NotificationSettingsTable;
  notification_deliveries: NotificationDeliveriesTable;
  notification_endpoints: NotificationEndpointsTable;
  dns_settings: DnsSettingsTable;
  job_state: JobStateTable;
  crawler_address_lists: CrawlerAddressListsTable;
  analytics_minute: AnalyticsMinuteTable;
  rollout_settings: RolloutSettingsTable;
  rollouts: RolloutsTable;
  rollout_servers: RolloutServersTable;
  analytics_hour: AnalyticsHourTable;
}

export interface RolloutSettingsTable {
  account_id: string;
  mode: 'immediate' | 'staged';
  bake_seconds: number;
  updated_at: Timestamp;
}

export type RolloutState = 'baking' | 'applied' | 'halted' | 'rolled_back' | 'superseded';
export type RolloutServerState = 'queued' | 'baking' | 'applied' | 'halted' | 'rolled_back' | 'superseded';

export interface RolloutsTable {
  id: string;
  account_id: string;
  state: RolloutState;
  /**
   * The account's newest rollout while it holds servers on their released snapshot: baking (the
   * fleet), halted or rolled back (every server). False once it applied or a newer one started.
   */
  holding: boolean;
  /** What changed, from the released snapshot to the candidate (services/rollouts.ts describeChange). */
  change: string;
  bake_seconds: number;
  started_at: Timestamp;
  bake_until: Timestamp;
  ended_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  /** Why it halted: the signal and its values. */
  signal: ColumnType<string | null, string | null | undefined, string | null>;
  detail: ColumnType<string | null, string | null | undefined, string | null>;
}

export interface RolloutServersTable {
  rollout_id: string;
  server_id: string;
  canary: boolean;
  state: RolloutServerState;
  base_requests: Int8WithDefault;
  base_blocked: Int8WithDefault;
  base_errors: Int8WithDefault;
  requests: Int8WithDefault;
  blocked: Int8WithDefault;
  errors: Int8WithDefault;
  base_latency: LatencyColumn;
  latency: LatencyColumn;
  last_report_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
}
