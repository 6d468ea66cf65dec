import type { SecretKey } from './secret-box.js';
import { isUuid as isProtocolUuid } from '@rampart/protocol';
import type { CredentialMessage } from './credential-messages.js';
import type { Database } from './db/database.js';
import type { PlanTable } from './plans.js';

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
  /** Called after a commit that changed the desired state of these shield servers. */
  serversChanged(serverIds: readonly string[]): void;
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

/** Ids come from URLs and bodies; anything that is not a UUID cannot name a row, so it is "not found". */
export function isUuid(value: unknown): value is string {
  return isProtocolUuid(value, true);
}

export const iso = (d: Date | string | null | undefined): string | null =>
  d == null ? null : (d instanceof Date ? d : new Date(d)).toISOString();

/** Postgres unique_violation, from pg or PGlite. */
export function isUniqueViolation(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { code?: unknown }).code === '23505';
}
