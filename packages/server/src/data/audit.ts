import type { Database, Tx } from '../db/database.js';

// The audit_log table (services/audit.ts). Rows are only inserted, read, and deleted by the
// retention job: no statement here changes one.

export interface AuditRow {
  id: string;
  account_id: string;
  created_at: Date;
  actor_type: string;
  actor_name: string | null;
  actor_key_prefix: string | null;
  object_type: string;
  object_id: string | null;
  action: string;
  changed: string[];
  before: Record<string, unknown> | null;
  after: Record<string, unknown> | null;
}

export async function insertAuditEntry(db: Database | Tx, row: AuditRow): Promise<void> {
  await db
    .insertInto('audit_log')
    .values({
      ...row,
      changed: JSON.stringify(row.changed),
      before: row.before === null ? null : JSON.stringify(row.before),
      after: row.after === null ? null : JSON.stringify(row.after),
    })
    .execute();
}

export interface AuditFilter {
  objectType?: string;
  objectId?: string;
  action?: string;
  /** The actor's type, name (key name or e-mail) or key prefix, exactly. */
  actor?: string;
  since?: Date;
  until?: Date;
}

export interface AuditCursor {
  createdAt: Date;
  id: string;
}

/** The account's entries matching the filter, newest first (created_at, then id), after `before` when given. */
export async function latestAuditEntries(db: Database | Tx, accountId: string, filter: AuditFilter, limit: number, before?: AuditCursor): Promise<AuditRow[]> {
  const rows = await db
    .selectFrom('audit_log')
    .selectAll()
    .where('account_id', '=', accountId)
    .$if(filter.objectType !== undefined, (q) => q.where('object_type', '=', filter.objectType!))
    .$if(filter.objectId !== undefined, (q) => q.where('object_id', '=', filter.objectId!))
    .$if(filter.action !== undefined, (q) => q.where('action', '=', filter.action!))
    .$if(filter.actor !== undefined, (q) => q.where((eb) => eb.or([eb('actor_type', '=', filter.actor!), eb('actor_name', '=', filter.actor!), eb('actor_key_prefix', '=', filter.actor!)])))
    .$if(filter.since !== undefined, (q) => q.where('created_at', '>=', filter.since!))
    .$if(filter.until !== undefined, (q) => q.where('created_at', '<=', filter.until!))
    .$if(before !== undefined, (q) => q.where((eb) => eb(eb.refTuple('created_at', 'id'), '<', eb.tuple(before!.createdAt, before!.id))))
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(limit)
    .execute();
  return rows.map((r) => ({ ...r, created_at: new Date(r.created_at) }));
}

/** The paging position of one of the account's entries; undefined when it has no such one. */
export async function auditCursor(db: Database | Tx, accountId: string, id: string): Promise<AuditCursor | undefined> {
  const row = await db.selectFrom('audit_log').select(['id', 'created_at']).where('account_id', '=', accountId).where('id', '=', id).executeTakeFirst();
  return row && { createdAt: new Date(row.created_at), id: row.id };
}

/** The retention job: entries older than `cutoff` go. Returns how many. */
export async function deleteAuditEntriesBefore(db: Database | Tx, cutoff: Date): Promise<number> {
  const res = await db.deleteFrom('audit_log').where('created_at', '<', cutoff).executeTakeFirst();
  return Number(res.numDeletedRows);
}
