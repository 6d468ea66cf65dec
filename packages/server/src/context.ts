import type { SecretKey } from './secret-box.js';
import type { LivePublisher } from './bus.js';
import type { CredentialMessage } from './credential-messages.js';
import type { Database } from './db/database.js';
import type { PlanTable } from './plans.js';
import type { ChainConfig } from './chain/config.js';
import type { DeliveryResult } from './delivery/types.js';

/** What every service needs: storage, the plan table, a clock, and the change bus. */
export interface ServiceContext {
  db: Database;
  plans: PlanTable;
  now(): Date;
  /**
   * The operator's RAMPART_SECRET_KEY (src/secret-box.ts): what stored secrets (webhook signing
   * secrets, DNS provider credentials) are encrypted with. Absent, such secrets cannot be set.
   */
  secretKey?: SecretKey | undefined;
  /**
   * Notification delivery (services/notification-delivery.ts), from the environment serve.ts
   * reads once. Absent (tests that build the app alone): webhooks to private addresses are
   * refused, e-mail cannot be set, and queued deliveries wait for a delivery run.
   */
  delivery?: DeliveryContext | undefined;
  /**
   * Billing settings (docs/billing.md) serve.ts reads once: on-chain deposits and the payment
   * processor's webhook secret. Absent: deposits are confirmed by the operator only.
   */
  billing?: BillingContext | undefined;
  /**
   * RAMPART_ALLOW_PRIVATE_DNS_API=1 (serve.ts): a DNS provider's API URL may name a private or
   * loopback address (docs/dns-failover.md). Absent: public addresses only.
   */
  allowPrivateDnsApi?: boolean | undefined;
  /** Called after a commit that changed the desired state of these shield servers. */
  serversChanged(serverIds: readonly string[]): void;
  /** The live streams' publisher (GET /api/stream, src/bus.ts LivePublisher); serve.ts sets it. */
  live?: LivePublisher | undefined;
  /**
   * The change bus for credential changes (src/credential-cache.ts). Absent (one process, tests),
   * they are dropped from this process's cache only.
   */
  credentialBus?: {
    publish(m: CredentialMessage): Promise<void>;
    /** False while the bus may be missing messages (its listening connection is down). */
    live(): boolean;
    /** How many processes listen on the bus (each acknowledges a credential change); absent: 1. */
    listeners?(): Promise<number>;
    warn?(msg: string): void;
  };
}

export interface DeliveryContext {
  /** RAMPART_ALLOW_PRIVATE_WEBHOOKS=1: webhooks may go to private and loopback addresses. */
  allowPrivateWebhooks: boolean;
  /** RAMPART_SMTP_URL is set: notifications can be sent by e-mail. */
  emailEnabled: boolean;
  /** Deliveries were queued (perhaps in a transaction not yet committed): deliver soon. */
  queued(): void;
  /** Sends one e-mail through the operator's SMTP server (an address's confirmation); absent without SMTP. */
  sendEmail?: ((mail: { to: string; subject: string; text: string }) => Promise<DeliveryResult>) | undefined;
}

export interface BillingContext {
  /** On-chain deposits (RAMPART_CHAIN_*); undefined when off. */
  chain?: ChainConfig | undefined;
  /** RAMPART_PAYMENT_WEBHOOK_SECRET: POST /api/billing/webhook is verified with it; undefined when off. */
  webhookSecret?: string | undefined;
}

/** Postgres unique_violation, from pg or PGlite. */
export function isUniqueViolation(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { code?: unknown }).code === '23505';
}
