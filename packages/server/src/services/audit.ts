import { isDeepStrictEqual } from 'node:util';
import type { ServiceContext } from '../context.js';
import { ISO_TIME, iso } from '../values.js';
import { newId } from '../crypto.js';
import type { Database, Tx } from '../db/database.js';
import { auditCursor, deleteAuditEntriesBefore, insertAuditEntry, latestAuditEntries, type AuditFilter, type AuditRow } from '../data/audit.js';
import { invalidField } from '../errors.js';
import { listPage, type Page, type PageParams } from './paging.js';

// The audit log (docs/api.md "Audit log"): every change to an account's configuration, keys,
// settings and billing, recorded by the service that makes it, in the same transaction, so a
// change that fails records nothing. Entries are only added; the retention job removes them after
// AUDIT_RETENTION_DAYS.

export const AUDIT_RETENTION_DAYS = 90;

/**
 * Who made a change: an API key (its name and prefix), a signed-in user (the account's e-mail),
 * the operator (the operator API), or the system (a periodic job: the monthly charge, a deposit
 * seen on the chain, a key rotated on schedule).
 */
export interface Actor {
  type: 'api_key' | 'user' | 'operator' | 'system';
  name: string | null;
  keyPrefix: string | null;
}

export const SYSTEM_ACTOR: Actor = { type: 'system', name: null, keyPrefix: null };
export const OPERATOR_ACTOR: Actor = { type: 'operator', name: null, keyPrefix: null };

export const AUDIT_OBJECT_TYPES = [
  'server',
  'domain',
  'waf_rule',
  'custom_rule',
  'waf_settings',
  'notification_settings',
  'dns_settings',
  'api_key',
  'account',
  'deposit',
  'transaction',
  'rollout_settings',
  'rollout',
] as const;
export type AuditObjectType = (typeof AUDIT_OBJECT_TYPES)[number];

/** A field whose value is a secret: the log says whether it is set and whether it changed, never what it is. */
export const SECRET = '[secret]';

export interface AuditChange {
  objectType: AuditObjectType;
  objectId: string | null;
  /** create, update, delete, or a verb of its own (regenerate_token, rotate, confirm, charge ...). */
  action: string;
  /** The object's fields before (null: it did not exist) and after (null: it is gone). */
  before?: Record<string, unknown> | null | undefined;
  after?: Record<string, unknown> | null | undefined;
  /** Names of fields of before/after that hold secrets: shown as SECRET when set. */
  secrets?: readonly string[] | undefined;
}

type Json = Record<string, unknown>;

/** Fields of views that are not settings: when a change happened, and counters. */
const NOT_SETTINGS = new Set(['id', 'createdAt', 'created_at', 'updatedAt', 'updated_at', 'hits', 'lastUsedAt', 'last_used_at']);

/** Dates as ISO strings, undefined fields and NOT_SETTINGS left out: what the log stores. */
function plain(o: Json | null | undefined): Json | null {
  if (o == null) return null;
  const out: Json = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined && !NOT_SETTINGS.has(k)) out[k] = v instanceof Date ? iso(v) : v;
  return out;
}

function masked(o: Json | null, secrets: readonly string[]): Json | null {
  if (o === null) return null;
  const out = { ...o };
  for (const k of secrets) if (k in out) out[k] = out[k] == null || out[k] === '' ? null : SECRET;
  return out;
}

/**
 * Records one change in the caller's transaction. Only the fields that differ are kept in before
 * and after (all of them on create and delete); a secret that changed is named in `changed` and
 * shown as SECRET. An update that changed nothing records nothing.
 */
export async function recordAudit(tx: Database | Tx, ctx: Pick<ServiceContext, 'now'>, accountId: string, actor: Actor, change: AuditChange): Promise<void> {
  const secrets = change.secrets ?? [];
  let before = plain(change.before);
  let after = plain(change.after);
  let changed: string[];
  if (before && after) {
    changed = [...new Set([...Object.keys(before), ...Object.keys(after)])].filter((k) => !isDeepStrictEqual(before![k], after![k]));
    if (changed.length === 0 && change.action === 'update') return;
    before = Object.fromEntries(changed.filter((k) => k in before!).map((k) => [k, before![k]]));
    after = Object.fromEntries(changed.filter((k) => k in after!).map((k) => [k, after![k]]));
  } else changed = Object.keys(before ?? after ?? {});
  const row: AuditRow = {
    id: newId(),
    account_id: accountId,
    created_at: ctx.now(),
    actor_type: actor.type,
    actor_name: actor.name,
    actor_key_prefix: actor.keyPrefix,
    object_type: change.objectType,
    object_id: change.objectId,
    action: change.action,
    changed,
    before: masked(before, secrets),
    after: masked(after, secrets),
  };
  await insertAuditEntry(tx, row);
}

/** GET /api/audit's query: the filters and the page. */
export interface AuditQuery extends PageParams {
  objectType?: string | undefined;
  objectId?: string | undefined;
  action?: string | undefined;
  actor?: string | undefined;
  since?: string | undefined;
  until?: string | undefined;
}

const ACTION = /^[a-z_]{1,40}$/;

/** The filters of GET /api/audit, each checked: a bad one is a 400 naming it. */
export function auditFilter(q: AuditQuery): AuditFilter {
  const filter: AuditFilter = {};
  if (q.objectType !== undefined) {
    if (!(AUDIT_OBJECT_TYPES as readonly string[]).includes(q.objectType)) throw invalidField('objectType', `must be one of ${AUDIT_OBJECT_TYPES.join(', ')}`);
    filter.objectType = q.objectType;
  }
  if (q.objectId !== undefined) filter.objectId = q.objectId.toLowerCase();
  if (q.action !== undefined) {
    if (!ACTION.test(q.action)) throw invalidField('action', 'must be an action such as create, update or delete');
    filter.action = q.action;
  }
  if (q.actor !== undefined) {
    if (q.actor === '') throw invalidField('actor', 'must not be empty');
    filter.actor = q.actor;
  }
  for (const field of ['since', 'until'] as const) {
    const v = q[field];
    if (v === undefined) continue;
    const at = ISO_TIME.test(v) ? Date.parse(v) : NaN;
    if (!Number.isFinite(at)) throw invalidField(field, 'must be an ISO 8601 time, e.g. 2026-11-23T06:00:00Z');
    filter[field] = new Date(at);
  }
  if (filter.since && filter.until && filter.since > filter.until) throw invalidField('since', 'must not be after until');
  return filter;
}

export function auditView(r: AuditRow) {
  return {
    id: r.id,
    at: iso(r.created_at)!,
    actor: { type: r.actor_type as Actor['type'], name: r.actor_name, keyPrefix: r.actor_key_prefix },
    objectType: r.object_type,
    objectId: r.object_id,
    action: r.action,
    changed: r.changed,
    before: r.before,
    after: r.after,
  };
}

/** The account's audit log matching the filters, newest first, a page at a time. */
export async function listAudit(ctx: ServiceContext, accountId: string, query: AuditQuery): Promise<Page<ReturnType<typeof auditView>>> {
  const filter = auditFilter(query);
  return listPage(
    query,
    (id) => auditCursor(ctx.db, accountId, id),
    (limit, before) => latestAuditEntries(ctx.db, accountId, filter, limit, before),
    auditView,
  );
}

/** The retention job: entries older than AUDIT_RETENTION_DAYS go. */
export async function pruneAudit(ctx: ServiceContext): Promise<number> {
  return deleteAuditEntriesBefore(ctx.db, new Date(ctx.now().getTime() - AUDIT_RETENTION_DAYS * 86_400_000));
}
